package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// ChunkStatusError is a final, non-SUCCESS status of a ChunkService call.
// Its text is the status name, e.g. CHUNK_OP_STATUS_INVALID_REQUEST.
type ChunkStatusError struct {
	Status chunkserverpb.CHUNK_OP_STATUS
}

func (e *ChunkStatusError) Error() string { return e.Status.String() }

// CopysetStatusError is a failing status of a CopysetService call.
type CopysetStatusError struct {
	Status chunkserverpb.COPYSET_OP_STATUS
}

func (e *CopysetStatusError) Error() string { return e.Status.String() }

// IsChunkStatus reports whether err carries ChunkService status st.
func IsChunkStatus(err error, st chunkserverpb.CHUNK_OP_STATUS) bool {
	var se *ChunkStatusError
	return errors.As(err, &se) && se.Status == st
}

// GaveUpError is returned when an operation kept failing in retryable ways
// (no leader, servers unreachable, redirects) until its deadline. Last is the
// most recent failure and is what Unwrap returns.
type GaveUpError struct {
	After time.Duration
	Last  error
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("gave up after %s: %v", e.After.Round(time.Millisecond), e.Last)
}

func (e *GaveUpError) Unwrap() error { return e.Last }

// serverError is a failure of one server, named by its address.
type serverError struct {
	Addr string
	Err  error
}

func (e *serverError) Error() string {
	if e.Addr == "" {
		return describe(e.Err)
	}
	return e.Addr + ": " + describe(e.Err)
}
func (e *serverError) Unwrap() error { return e.Err }

// noLeaderError lists why each server could not name a leader.
type noLeaderError struct {
	errs []*serverError
}

func (e *noLeaderError) Error() string {
	parts := make([]string, len(e.errs))
	for i, se := range e.errs {
		parts[i] = se.Error()
	}
	return "no leader found: " + strings.Join(parts, "; ")
}

func (e *noLeaderError) Unwrap() []error {
	out := make([]error, len(e.errs))
	for i, se := range e.errs {
		out[i] = se
	}
	return out
}

// permanent reports whether waiting cannot help: every server answered, and
// none with a transient failure. In particular, when every server says it
// does not host the copyset (NotFound), the copyset does not exist there.
func (e *noLeaderError) permanent() bool {
	for _, se := range e.errs {
		if retryable(se.Err) {
			return false
		}
	}
	return len(e.errs) > 0
}

// describe renders a gRPC error as "Code: message", anything else as is.
// Dial failures are shortened to "unreachable: <cause>".
func describe(err error) string {
	st, ok := status.FromError(err)
	if !ok || st.Code() == codes.OK {
		return err.Error()
	}
	msg := st.Message()
	if st.Code() == codes.Unavailable && strings.Contains(msg, "while dialing") {
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			return "unreachable: " + strings.Trim(msg[i+2:], `"`)
		}
	}
	return st.Code().String() + ": " + msg
}

// cellError is err for a table cell: without the operation prefix when it is
// a GaveUpError (the row already names the copyset).
func cellError(err error) string {
	var g *GaveUpError
	if errors.As(err, &g) {
		return g.Error()
	}
	return errText(err)
}

// retryable reports whether a gRPC error may go away by waiting or by asking
// another server: the server is down, restarting, stopped or overloaded.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted, codes.Canceled:
		return true
	}
	return false
}

// joinedError is errors.Join on one line: "a; b".
type joinedError []error

func (e joinedError) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (e joinedError) Unwrap() []error { return e }

// joinErrors is like errors.Join but renders on a single line.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return joinedError(errs)
}

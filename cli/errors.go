package cli

import (
	"errors"
	"fmt"
	"slices"
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

// noLeaderError lists why each server could not name the leader of cs.
type noLeaderError struct {
	cs   CopysetID
	errs []*serverError
}

// Error is one line. When every server says it does not host the copyset
// it says so once, not once per server; when every server refuses
// connections (or does not host the copyset) it names those that refuse.
func (e *noLeaderError) Error() string {
	refusing, notHosted := e.tally()
	cs := fmt.Sprintf("copyset %d/%d", e.cs.Pool, e.cs.Copyset)
	switch n := len(e.errs); {
	case n > 0 && notHosted == n:
		return "COPYSET_NOTEXIST: " + cs + " is hosted by " + countServers("none of the", n)
	case n > 0 && len(refusing)+notHosted == n:
		msg := "connection refused by " + strings.Join(refusing, ", ")
		if len(refusing) == n {
			msg = "every server refuses connections: " + strings.Join(refusing, ", ")
		}
		if notHosted > 0 {
			verb := "do"
			if notHosted == 1 {
				verb = "does"
			}
			msg += fmt.Sprintf("; %s %s not host %s", countServers("the other", notHosted), verb, cs)
		}
		return msg
	}
	parts := make([]string, len(e.errs))
	for i, se := range e.errs {
		parts[i] = se.Error()
	}
	return "no leader found: " + strings.Join(parts, "; ")
}

// tally returns the servers that refused connections, sorted, and how many
// said they do not host the copyset.
func (e *noLeaderError) tally() (refusing []string, notHosted int) {
	for _, se := range e.errs {
		switch {
		case refused(se.Err):
			refusing = append(refusing, se.Addr)
		case status.Code(se.Err) == codes.NotFound:
			notHosted++
		}
	}
	slices.Sort(refusing)
	return refusing, notHosted
}

// countServers is "<what> 3 servers" ("the other 1 server" for one).
func countServers(what string, n int) string {
	if n == 1 {
		return what + " 1 server"
	}
	return fmt.Sprintf("%s %d servers", what, n)
}

func (e *noLeaderError) Unwrap() []error {
	out := make([]error, 0, len(e.errs)+1)
	if _, notHosted := e.tally(); notHosted == len(e.errs) && notHosted > 0 {
		// IsChunkStatus(COPYSET_NOTEXIST) holds, as if a server had said it.
		out = append(out, &ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST})
	}
	for _, se := range e.errs {
		out = append(out, se)
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

// unreachable reports whether no server that might host the copyset
// accepts connections: each refused them or said it does not host it, and
// at least one refused.
func (e *noLeaderError) unreachable() bool {
	refusing, notHosted := e.tally()
	return len(refusing) > 0 && len(refusing)+notHosted == len(e.errs)
}

// refused reports whether err is a failed connection attempt that the
// server's host refused: nothing listens on the port (the server is down or
// restarting).
func refused(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection refused")
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

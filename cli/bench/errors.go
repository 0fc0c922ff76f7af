package bench

import (
	"context"
	"errors"
	"regexp"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/cli"
)

// Error kinds besides ChunkService status names.
const (
	KindTimeout     = "timeout"
	KindUnavailable = "unavailable"
	KindCanceled    = "canceled"
	KindOther       = "other"
)

// statusName finds a ChunkService status name in an error's text: the
// client reports statuses it retried on (REDIRECTED, OVERLOAD,
// COPYSET_NOTEXIST) only in the text of the error it gives up with.
var statusName = regexp.MustCompile(`\bCHUNK_OP_STATUS_[A-Z_]+\b`)

// Classify names the kind of a failed operation's error:
//
//   - the status name of a final non-SUCCESS ChunkService status
//     (CHUNK_OP_STATUS_CHUNK_NOTEXIST, CHUNK_OP_STATUS_INVALID_REQUEST, ...);
//   - when the client gave up retrying, the kind of the last failure:
//     a status it kept getting (CHUNK_OP_STATUS_REDIRECTED,
//     CHUNK_OP_STATUS_OVERLOAD, ...) or one of the kinds below, and
//     "timeout" when nothing more specific is known;
//   - "timeout" for deadlines, "unavailable" for servers that cannot be
//     reached or have no leader, "canceled" for canceled calls;
//   - "grpc:<Code>" for any other gRPC status code, "other" for the rest.
//
// Errors of the etcd target ([EtcdError]) are named by the etcd server's
// message when there is one ("etcdserver: request timed out",
// "etcdserver: leader changed", ...), or "etcd: key not found" for reads of
// keys nobody wrote, else by the generic kinds.
func Classify(err error) string {
	if err == nil {
		return ""
	}
	var ee *EtcdError
	if errors.As(err, &ee) {
		return ee.kind()
	}
	var se *cli.ChunkStatusError
	if errors.As(err, &se) {
		return se.Status.String()
	}
	var g *cli.GaveUpError
	if errors.As(err, &g) {
		if g.Last == nil {
			return KindTimeout
		}
		if k := classifyCause(g.Last); k != KindOther {
			return k
		}
		return KindTimeout
	}
	return classifyCause(err)
}

func classifyCause(err error) string {
	var se *cli.ChunkStatusError
	if errors.As(err, &se) {
		return se.Status.String()
	}
	if m := statusName.FindString(err.Error()); m != "" {
		return m
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	}
	switch code := status.Code(err); code {
	case codes.OK, codes.Unknown:
	case codes.Unavailable:
		return KindUnavailable
	case codes.DeadlineExceeded:
		return KindTimeout
	case codes.Canceled:
		return KindCanceled
	default:
		return "grpc:" + code.String()
	}
	if strings.Contains(err.Error(), "no leader found") {
		return KindUnavailable
	}
	return KindOther
}

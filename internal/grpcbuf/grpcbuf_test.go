package grpcbuf

import (
	"testing"

	"google.golang.org/grpc/mem"
)

func TestDefaultPoolReplaced(t *testing.T) {
	if got := mem.DefaultBufferPool(); got != mem.BufferPool(Pool) {
		t.Fatalf("gRPC default buffer pool is %T, want grpcbuf.Pool", got)
	}
}

package grpcbuf

import (
	"google.golang.org/grpc/experimental"

	"github.com/chunkraft/chunkraft/internal/bufpool"
)

// Pool is the process's gRPC message buffer pool (classes 256 B .. 64 MiB,
// the largest message a chunkserver accepts).
var Pool = bufpool.New(8, 26)

func init() { experimental.SetDefaultBufferPool(Pool) }

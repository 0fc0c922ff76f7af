package chunkserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// benchChunks is how many chunks the write benchmarks spread their writes
// over; each is written once before the measured loop.
const benchChunks = 8

// benchWrite4K writes block i of the benchmark's chunks through cl and
// reports any failure or status but success.
func benchWrite4K(ctx context.Context, cl pb.ChunkServiceClient, i int, data []byte) error {
	// 4096 blocks of 4 KiB fill a 16 MiB chunk.
	req := writeReq(uint64(1+i%benchChunks), uint32(i/benchChunks%4096)<<12, data)
	resp, err := cl.WriteChunk(ctx, req)
	if err == nil && resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
		err = fmt.Errorf("write %d: %v", i, resp.GetStatus())
	}
	return err
}

// BenchmarkReplicatedWrite4K sends 4 KiB WriteChunk RPCs to the leader of
// a copyset of three in-process servers, one at a time (serial) and with
// 16 and 64 in flight. allocs/op and B/op count every allocation of the
// process per write: the client, the leader, both followers, raft and its
// transport, and the servers' background work while the writes run.
//
//	go test ./chunkserver/ -run '^$' -bench ReplicatedWrite4K -benchtime 2000x
func BenchmarkReplicatedWrite4K(b *testing.B) {
	c := startTestCluster(b, 3)
	ctx := context.Background()
	data := block(7)
	l := c.Leader(b)
	cl := c.Chunk(l)
	for i := range benchChunks {
		if err := benchWrite4K(ctx, cl, i, data); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(4096)
		for i := 0; b.Loop(); i++ {
			if err := benchWrite4K(ctx, cl, i, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, depth := range []int{16, 64} {
		b.Run(fmt.Sprintf("inflight=%d", depth), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(4096)
			var (
				wg   sync.WaitGroup
				next atomic.Int64
				once sync.Once
				fail error
			)
			b.ResetTimer()
			for range depth {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= b.N {
							return
						}
						if err := benchWrite4K(ctx, cl, i, data); err != nil {
							once.Do(func() { fail = err })
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if fail != nil {
				b.Fatal(fail)
			}
		})
	}
}

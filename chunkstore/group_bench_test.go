package chunkstore_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// BenchmarkGroupVsWrite compares, on one copyset of three in-process
// servers, a client's 1 MiB WriteChunk (through gRPC, as a restore writes)
// with the same write proposed as a group with a tenant's small
// checkpoint op (Store.ProposeGroup, as a dm share applies), at 1 and 4 in
// flight; each op writes its own chunk region.
//
//	go test ./chunkstore/ -run '^$' -bench GroupVsWrite -benchtime 64x
func BenchmarkGroupVsWrite(b *testing.B) {
	c := chunkservertest.StartWithTenants(b, 3, func() []chunkserver.Tenant { return []chunkserver.Tenant{checkpointTenant{}} })
	ctx := context.Background()
	data := bytes.Repeat([]byte{7}, 1<<20)
	l := c.Leader(b)
	ops := map[string]func(i int) error{
		"write": func(i int) error {
			resp, err := c.Chunk(l).WriteChunk(ctx, writeReq(uint64(1+i%8), uint32(i/8%16)<<20, data))
			if err == nil && resp.GetStatus() != pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS {
				err = fmt.Errorf("write: %v", resp.GetStatus())
			}
			return err
		},
		"group": func(i int) error {
			_, err := c.Servers[l].Chunks().ProposeGroup(ctx, c.Group, []*pb.ChunkRequest{groupWrite(uint64(1+i%8), uint32(i/8%16)<<20, data)},
				[][]byte{copysettest.ToyOp(checkpointKind, "applied", fmt.Sprint(i))})
			return err
		},
	}
	for _, depth := range []int{1, 4} {
		for _, name := range []string{"write", "group"} {
			op := ops[name]
			b.Run(fmt.Sprintf("%s/depth=%d", name, depth), func(b *testing.B) {
				b.SetBytes(1 << 20)
				var (
					wg   sync.WaitGroup
					mu   sync.Mutex
					next int
					fail error
				)
				for range depth {
					wg.Go(func() {
						for {
							mu.Lock()
							i := next
							next++
							mu.Unlock()
							if i >= b.N {
								return
							}
							if err := op(i); err != nil {
								mu.Lock()
								fail = err
								mu.Unlock()
								return
							}
						}
					})
				}
				wg.Wait()
				if fail != nil {
					b.Fatal(fail)
				}
			})
		}
	}
}

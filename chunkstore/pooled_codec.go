package chunkstore

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/internal/grpcbuf"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// pooledBufs maps each request being served whose Data aliases borrowed
// bytes (unmarshalPooled) to the function that gives them back, until
// RecyclePooled calls it.
var pooledBufs sync.Map // *pb.ChunkRequest or *dspb.SendDataRequest -> func()

// unmarshalPooled decodes a large message m (a ChunkRequest or a
// SendDataRequest) with its data (set by set) aliasing bytes borrowed from
// the received message (grpcbuf.Borrow: in place, or a copy in a pooled
// buffer), which RecyclePooled gives back when the call is done: every
// large write and every sync packet lands in memory an earlier one used
// instead of in a fresh allocation of its size, which the kernel must fault
// in and zero. Joining a message's frames into a fresh buffer instead
// (grpcbuf.Hold) is most of a SyncTool's copying, and most of a leader's
// CPU during a restore's 1 MiB writes into a cluster that has been idle
// (bytes.Join's memmove: docs/benchmarks.md, "The pool's quiet period at
// 10 s, what the first restore pays"). Anything unmarshalAliasingData
// does not parse goes to the next codec. Only Data of at least
// aliasDataMin bytes stays borrowed (smaller Data of a large message is
// copied out), so that RecyclePooled looks up large requests only.
func (c *chunkCodec) unmarshalPooled(data mem.BufferSlice, m proto.Message, set func(proto.Message, []byte)) error {
	b, release := grpcbuf.Borrow(data)
	aliased, ok := unmarshalAliasingData(b, m, set)
	switch {
	case ok && aliased && len(dataOf(m)) >= aliasDataMin:
		pooledBufs.Store(m, release)
		return nil
	case ok && aliased: // a large message with small data: not worth lending
		d := dataOf(m)
		set(m, append(make([]byte, 0, len(d)), d...))
		release()
		return nil
	case ok:
		release()
		return nil
	}
	release() // nothing in m points into it: next resets m
	if err := c.next.Unmarshal(data, m); err != nil {
		return fmt.Errorf("chunkserver: unmarshal %T: %w", m, err)
	}
	return nil
}

// RecyclePooled is the unary server interceptor that gives back the pooled
// bytes of a request (unmarshalPooled) when its call is done:
//
//   - a ChunkRequest's always: the chunk service reads its data only
//     within the call (it copies it into the proposed op, chunkop.Encode,
//     before it waits for the commit);
//   - a SendDataRequest's only after a success: the packet was then
//     written whole (a file fsynced, an object put), so nothing reads the
//     buffer any more; a failed call may leave a write or an upload reading
//     it (an HTTP body is read on after a cancelled request returns), and
//     its buffer is left to the GC.
func RecyclePooled(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	var data *[]byte
	switch r := req.(type) {
	case *pb.ChunkRequest:
		data = &r.Data
	case *dspb.SendDataRequest:
		data = &r.Data
	}
	// Only Data of aliasDataMin bytes or more is ever borrowed
	// (unmarshalPooled): the small requests, most chunk requests, skip the
	// map.
	if data == nil || len(*data) < aliasDataMin {
		return resp, err
	}
	release, held := pooledBufs.LoadAndDelete(req)
	if !held {
		return resp, err
	}
	if _, sd := req.(*dspb.SendDataRequest); sd {
		if out, _ := resp.(*dspb.SendDataResponse); err != nil || out.GetResponse().GetCode() != 0 {
			return resp, err // left to the GC
		}
	}
	*data = nil
	release.(func())()
	return resp, err
}

// dataOf is a ChunkRequest's or SendDataRequest's Data.
func dataOf(m proto.Message) []byte {
	switch r := m.(type) {
	case *pb.ChunkRequest:
		return r.Data
	case *dspb.SendDataRequest:
		return r.Data
	}
	return nil
}

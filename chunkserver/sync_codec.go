package chunkserver

import (
	"context"
	"fmt"
	gosync "sync"

	"google.golang.org/grpc"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/chunkraft/chunkraft/internal/grpcbuf"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// marshalSendData encodes r as its fields but data, marshalled, then data's
// tag and length, then data itself in a buffer of its own that aliases
// r.Data: gRPC frames the packet from the exporter's buffer (which the
// exporter leaves alone until the call returns) instead of from a
// marshalled copy of it. Protobuf decodes fields in any order, so the
// result decodes to r; with data the highest-numbered field it is even the
// bytes proto.Marshal writes, unless r has unknown fields.
func marshalSendData(r *dspb.SendDataRequest) (mem.BufferSlice, error) {
	src := r.ProtoReflect()
	rest := src.New()
	src.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Number() != chunkDataField {
			rest.Set(fd, v) // shares sub-messages: rest is only marshalled
		}
		return true
	})
	rest.SetUnknown(src.GetUnknown())
	m := rest.Interface()
	head, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, 0, proto.Size(m)+protowire.SizeTag(chunkDataField)+protowire.SizeVarint(uint64(len(r.Data)))), m)
	if err != nil {
		return nil, fmt.Errorf("chunkserver: marshal SendDataRequest: %w", err)
	}
	head = protowire.AppendTag(head, chunkDataField, protowire.BytesType)
	head = protowire.AppendVarint(head, uint64(len(r.Data)))
	return mem.BufferSlice{mem.SliceBuffer(head), mem.SliceBuffer(r.Data)}, nil
}

// sendDataBufs maps each SendDataRequest being served whose Data aliases a
// pooled buffer to that buffer, until recycleSendData hands it back.
var sendDataBufs gosync.Map // *dspb.SendDataRequest -> *[]byte

// setSendData sets a SendDataRequest's data (unmarshalAliasingData's set).
func setSendData(m proto.Message, d []byte) { m.(*dspb.SendDataRequest).Data = d }

// unmarshalSendData decodes a large SendDataRequest with Data aliasing a
// buffer of grpcbuf.Pool, which recycleSendData returns to the pool once
// the SyncTool has written the packet: every packet of an export lands in
// memory an earlier one used instead of in a fresh allocation of its size
// (which the kernel must fault in and zero, the larger part of a SyncTool's
// copying when it was grpcbuf.Hold's).
func (c *chunkCodec) unmarshalSendData(data mem.BufferSlice, r *dspb.SendDataRequest) error {
	bp := grpcbuf.Pool.Get(data.Len())
	data.CopyTo(*bp)
	aliased, ok := unmarshalAliasingData(*bp, r, setSendData)
	switch {
	case ok && aliased:
		sendDataBufs.Store(r, bp)
		return nil
	case ok:
		grpcbuf.Pool.Put(bp)
		return nil
	}
	grpcbuf.Pool.Put(bp) // nothing in r points into it: next resets r
	if err := c.next.Unmarshal(data, r); err != nil {
		return fmt.Errorf("chunkserver: unmarshal %T: %w", r, err)
	}
	return nil
}

// recycleSendData is the unary server interceptor that gives back the
// pooled buffer of a SendDataRequest (unmarshalSendData) when its call is
// done. Only after a success: the packet was then written whole (a file
// fsynced, an object put), so nothing reads the buffer any more; a failed
// call may leave a write or an upload reading it (an HTTP body is read on
// after a cancelled request returns), and its buffer is left to the GC.
func recycleSendData(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if r, ok := req.(*dspb.SendDataRequest); ok {
		if bp, held := sendDataBufs.LoadAndDelete(r); held {
			if out, _ := resp.(*dspb.SendDataResponse); err == nil && out.GetResponse().GetCode() == 0 {
				r.Data = nil
				grpcbuf.Pool.Put(bp.(*[]byte))
			}
		}
	}
	return resp, err
}

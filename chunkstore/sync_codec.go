package chunkstore

import (
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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

// setSendData sets a SendDataRequest's data (unmarshalAliasingData's set).
func setSendData(m proto.Message, d []byte) { m.(*dspb.SendDataRequest).Data = d }

package etcdserverpb_test

// Contract checks for the etcd v3 subset (same conventions as
// proto/contract_test.go): chunkbench talks to a real etcd with it, so the
// service and method names must match upstream's gRPC paths and every field
// kept must have upstream's number, name and type.

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/chunkraft/chunkraft/proto/etcd/etcdserverpb"
	"github.com/chunkraft/chunkraft/proto/etcd/mvccpb"
)

func TestContractFiles(t *testing.T) {
	for _, tt := range []struct {
		file protoreflect.FileDescriptor
		pkg  protoreflect.FullName
	}{
		{etcdserverpb.File_etcd_etcdserverpb_rpc_proto, "etcdserverpb"},
		{mvccpb.File_etcd_mvccpb_kv_proto, "mvccpb"},
	} {
		if got := tt.file.Package(); got != tt.pkg {
			t.Errorf("%s: package = %q, want %q", tt.file.Path(), got, tt.pkg)
		}
		if got := tt.file.Syntax(); got != protoreflect.Proto3 {
			t.Errorf("%s: syntax = %v, want proto3", tt.file.Path(), got)
		}
	}
}

func TestContractService(t *testing.T) {
	sd := etcdserverpb.File_etcd_etcdserverpb_rpc_proto.Services().ByName("KV")
	if sd == nil || sd.FullName() != "etcdserverpb.KV" {
		t.Fatalf("service etcdserverpb.KV not found")
	}
	if got := etcdserverpb.KV_ServiceDesc.ServiceName; got != "etcdserverpb.KV" {
		t.Errorf("grpc ServiceName = %q", got)
	}
	for _, m := range []struct {
		name    protoreflect.Name
		path    string
		in, out protoreflect.FullName
	}{
		{"Range", etcdserverpb.KV_Range_FullMethodName, "etcdserverpb.RangeRequest", "etcdserverpb.RangeResponse"},
		{"Put", etcdserverpb.KV_Put_FullMethodName, "etcdserverpb.PutRequest", "etcdserverpb.PutResponse"},
	} {
		md := sd.Methods().ByName(m.name)
		if md == nil {
			t.Errorf("method %s not found", m.name)
			continue
		}
		if want := "/etcdserverpb.KV/" + string(m.name); m.path != want {
			t.Errorf("%s: path %q, want %q", m.name, m.path, want)
		}
		if md.Input().FullName() != m.in || md.Output().FullName() != m.out {
			t.Errorf("%s: %s -> %s, want %s -> %s", m.name, md.Input().FullName(), md.Output().FullName(), m.in, m.out)
		}
		if md.IsStreamingClient() || md.IsStreamingServer() {
			t.Errorf("%s: streaming, want unary", m.name)
		}
	}
	var names []string
	for i := 0; i < sd.Methods().Len(); i++ {
		names = append(names, string(sd.Methods().Get(i).Name()))
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"Put", "Range"}) {
		t.Errorf("methods = %v, want [Put Range]", names)
	}
}

// Upstream numbers: etcd-io/etcd api/etcdserverpb/rpc.proto and
// api/mvccpb/kv.proto.
func TestContractFields(t *testing.T) {
	type field struct {
		number   protoreflect.FieldNumber
		name     protoreflect.Name
		kind     protoreflect.Kind
		repeated bool
		typeName protoreflect.FullName
	}
	const (
		u64 = protoreflect.Uint64Kind
		i64 = protoreflect.Int64Kind
		byt = protoreflect.BytesKind
		bln = protoreflect.BoolKind
		msg = protoreflect.MessageKind
	)
	tests := []struct {
		message protoreflect.MessageDescriptor
		fields  []field
	}{
		{(&etcdserverpb.ResponseHeader{}).ProtoReflect().Descriptor(), []field{
			{1, "cluster_id", u64, false, ""},
			{2, "member_id", u64, false, ""},
			{3, "revision", i64, false, ""},
			{4, "raft_term", u64, false, ""},
		}},
		{(&etcdserverpb.RangeRequest{}).ProtoReflect().Descriptor(), []field{
			{1, "key", byt, false, ""},
			{2, "range_end", byt, false, ""},
			{3, "limit", i64, false, ""},
			{4, "revision", i64, false, ""},
			{7, "serializable", bln, false, ""},
			{8, "keys_only", bln, false, ""},
			{9, "count_only", bln, false, ""},
		}},
		{(&etcdserverpb.RangeResponse{}).ProtoReflect().Descriptor(), []field{
			{1, "header", msg, false, "etcdserverpb.ResponseHeader"},
			{2, "kvs", msg, true, "mvccpb.KeyValue"},
			{3, "more", bln, false, ""},
			{4, "count", i64, false, ""},
		}},
		{(&etcdserverpb.PutRequest{}).ProtoReflect().Descriptor(), []field{
			{1, "key", byt, false, ""},
			{2, "value", byt, false, ""},
			{3, "lease", i64, false, ""},
			{4, "prev_kv", bln, false, ""},
			{5, "ignore_value", bln, false, ""},
			{6, "ignore_lease", bln, false, ""},
		}},
		{(&etcdserverpb.PutResponse{}).ProtoReflect().Descriptor(), []field{
			{1, "header", msg, false, "etcdserverpb.ResponseHeader"},
			{2, "prev_kv", msg, false, "mvccpb.KeyValue"},
		}},
		{(&mvccpb.KeyValue{}).ProtoReflect().Descriptor(), []field{
			{1, "key", byt, false, ""},
			{2, "create_revision", i64, false, ""},
			{3, "mod_revision", i64, false, ""},
			{4, "version", i64, false, ""},
			{5, "value", byt, false, ""},
			{6, "lease", i64, false, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(string(tt.message.FullName()), func(t *testing.T) {
			// No field beyond these: a new one must be checked against upstream.
			if got, want := tt.message.Fields().Len(), len(tt.fields); got != want {
				t.Errorf("%d fields, want %d", got, want)
			}
			for _, f := range tt.fields {
				fd := tt.message.Fields().ByNumber(f.number)
				if fd == nil {
					t.Errorf("field %d (%s) not found", f.number, f.name)
					continue
				}
				if fd.Name() != f.name || fd.Kind() != f.kind || fd.IsList() != f.repeated {
					t.Errorf("field %d = %s %v list=%v, want %s %v list=%v", f.number, fd.Name(), fd.Kind(), fd.IsList(), f.name, f.kind, f.repeated)
				}
				if fd.Message() != nil && fd.Message().FullName() != f.typeName {
					t.Errorf("field %d type = %s, want %s", f.number, fd.Message().FullName(), f.typeName)
				}
			}
		})
	}
}

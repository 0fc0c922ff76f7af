package proto_test

// Contract checks for the foreign wire protocols (docs/architecture.md, proto/): the
// names, numbers, syntax and streaming shape that a client generated from the
// upstream .proto files relies on. They read the descriptors compiled into the
// generated packages, so a drifting .proto fails here before it fails a peer.

import (
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
	coprocessorpb "github.com/chunkraft/chunkraft/proto/kvproto/coprocessor"
	disaggregatedpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	"github.com/chunkraft/chunkraft/proto/kvproto/kvrpcpb"
	"github.com/chunkraft/chunkraft/proto/kvproto/metapb"
	"github.com/chunkraft/chunkraft/proto/kvproto/tikvpb"
	datasyncpb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

func TestContractFileSyntax(t *testing.T) {
	tests := []struct {
		file   protoreflect.FileDescriptor
		pkg    protoreflect.FullName
		syntax protoreflect.Syntax
	}{
		{datasyncpb.File_openmldb_datasync_data_sync_proto, "openmldb.datasync", protoreflect.Proto2},
		{dmpb.File_dm_pb_dmworker_proto, "pb", protoreflect.Proto3},
		{disaggregatedpb.File_kvproto_disaggregated_disaggregated_proto, "disaggregated", protoreflect.Proto3},
		{tikvpb.File_kvproto_tikvpb_tikvpb_proto, "tikvpb", protoreflect.Proto3},
		{coprocessorpb.File_kvproto_coprocessor_coprocessor_proto, "coprocessor", protoreflect.Proto3},
		{kvrpcpb.File_kvproto_kvrpcpb_kvrpcpb_proto, "kvrpcpb", protoreflect.Proto3},
		{metapb.File_kvproto_metapb_metapb_proto, "metapb", protoreflect.Proto3},
	}
	for _, tt := range tests {
		t.Run(tt.file.Path(), func(t *testing.T) {
			if got := tt.file.Package(); got != tt.pkg {
				t.Errorf("package = %q, want %q", got, tt.pkg)
			}
			if got := tt.file.Syntax(); got != tt.syntax {
				t.Errorf("syntax = %v, want %v", got, tt.syntax)
			}
		})
	}
}

func TestContractServices(t *testing.T) {
	tests := []struct {
		service protoreflect.FullName
		desc    *grpc.ServiceDesc
		methods []string // exact set, in any order
	}{
		{"openmldb.datasync.DataCollector", &datasyncpb.DataCollector_ServiceDesc,
			[]string{"AddSyncTask"}},
		{"openmldb.datasync.SyncTool", &datasyncpb.SyncTool_ServiceDesc,
			[]string{"CreateSyncTask", "DelelteSyncTask", "DeleteSyncTask", "TaskStatus", "SendData"}},
		{"pb.Worker", &dmpb.Worker_ServiceDesc,
			[]string{"QueryStatus", "PurgeRelay", "OperateSchema", "OperateV1Meta", "HandleError",
				"GetWorkerCfg", "CheckSubtasksCanUpdate", "GetWorkerValidatorStatus",
				"GetValidatorError", "OperateValidatorError", "UpdateValidator"}},
		{"tikvpb.Tikv", &tikvpb.Tikv_ServiceDesc,
			[]string{"tryAddLock", "tryMarkDelete", "EstablishDisaggTask", "CancelDisaggTask",
				"FetchDisaggPages", "GetDisaggConfig"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.service), func(t *testing.T) {
			sd := findService(t, tt.service)
			var got []string
			for i := 0; i < sd.Methods().Len(); i++ {
				got = append(got, string(sd.Methods().Get(i).Name()))
			}
			want := slices.Clone(tt.methods)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("methods = %v, want %v", got, want)
			}
			// The gRPC registration must use the same name and every method.
			if tt.desc.ServiceName != string(tt.service) {
				t.Errorf("grpc ServiceName = %q, want %q", tt.desc.ServiceName, tt.service)
			}
			var registered []string
			for _, m := range tt.desc.Methods {
				registered = append(registered, m.MethodName)
			}
			for _, s := range tt.desc.Streams {
				registered = append(registered, s.StreamName)
			}
			slices.Sort(registered)
			if !slices.Equal(registered, want) {
				t.Errorf("grpc registered methods = %v, want %v", registered, want)
			}
		})
	}
}

func TestContractMethods(t *testing.T) {
	tests := []struct {
		service      protoreflect.FullName
		method       protoreflect.Name
		in, out      protoreflect.FullName
		serverStream bool
	}{
		{"openmldb.datasync.DataCollector", "AddSyncTask",
			"openmldb.datasync.AddSyncTaskRequest", "openmldb.datasync.GeneralResponse", false},
		{"openmldb.datasync.SyncTool", "DelelteSyncTask",
			"openmldb.datasync.DeleteSyncTaskRequest", "openmldb.datasync.GeneralResponse", false},
		{"openmldb.datasync.SyncTool", "DeleteSyncTask",
			"openmldb.datasync.DeleteSyncTaskRequest", "openmldb.datasync.GeneralResponse", false},
		{"openmldb.datasync.SyncTool", "SendData",
			"openmldb.datasync.SendDataRequest", "openmldb.datasync.SendDataResponse", false},
		{"pb.Worker", "QueryStatus", "pb.QueryStatusRequest", "pb.QueryStatusResponse", false},
		{"pb.Worker", "UpdateValidator", "pb.UpdateValidationWorkerRequest", "pb.CommonWorkerResponse", false},
		{"tikvpb.Tikv", "tryAddLock",
			"disaggregated.TryAddLockRequest", "disaggregated.TryAddLockResponse", false},
		{"tikvpb.Tikv", "tryMarkDelete",
			"disaggregated.TryMarkDeleteRequest", "disaggregated.TryMarkDeleteResponse", false},
		{"tikvpb.Tikv", "EstablishDisaggTask",
			"disaggregated.EstablishDisaggTaskRequest", "disaggregated.EstablishDisaggTaskResponse", false},
		{"tikvpb.Tikv", "CancelDisaggTask",
			"disaggregated.CancelDisaggTaskRequest", "disaggregated.CancelDisaggTaskResponse", false},
		{"tikvpb.Tikv", "FetchDisaggPages",
			"disaggregated.FetchDisaggPagesRequest", "disaggregated.PagesPacket", true},
		{"tikvpb.Tikv", "GetDisaggConfig",
			"disaggregated.GetDisaggConfigRequest", "disaggregated.GetDisaggConfigResponse", false},
	}
	for _, tt := range tests {
		t.Run(string(tt.service)+"/"+string(tt.method), func(t *testing.T) {
			md := findService(t, tt.service).Methods().ByName(tt.method)
			if md == nil {
				t.Fatalf("method %s not found", tt.method)
			}
			if got := md.Input().FullName(); got != tt.in {
				t.Errorf("input = %s, want %s", got, tt.in)
			}
			if got := md.Output().FullName(); got != tt.out {
				t.Errorf("output = %s, want %s", got, tt.out)
			}
			if md.IsStreamingClient() {
				t.Errorf("client streaming, want unary request")
			}
			if got := md.IsStreamingServer(); got != tt.serverStream {
				t.Errorf("server streaming = %v, want %v", got, tt.serverStream)
			}
		})
	}
}

func TestContractFields(t *testing.T) {
	tests := []struct {
		message     protoreflect.FullName
		number      protoreflect.FieldNumber
		name        protoreflect.Name
		kind        protoreflect.Kind
		cardinality protoreflect.Cardinality
		typeName    protoreflect.FullName // message or enum type, if any
	}{
		// chunkraft's carrier for upstream's brpc attachment.
		{"openmldb.datasync.SendDataRequest", 100, "data", protoreflect.BytesKind, protoreflect.Optional, ""},
		// chunkraft's extensions for several named tasks per pool and
		// export ids, outside upstream's numbering.
		{"openmldb.datasync.SendDataRequest", 101, "task_name", protoreflect.StringKind, protoreflect.Optional, ""},
		{"openmldb.datasync.SendDataRequest", 102, "export_id", protoreflect.StringKind, protoreflect.Optional, ""},
		{"openmldb.datasync.SendDataRequest", 103, "written_at_ms", protoreflect.Int64Kind, protoreflect.Optional, ""},
		{"openmldb.datasync.AddSyncTaskRequest", 100, "task_name", protoreflect.StringKind, protoreflect.Optional, ""},
		{"openmldb.datasync.AddSyncTaskRequest", 101, "export_id", protoreflect.StringKind, protoreflect.Optional, ""},
		{"openmldb.datasync.AddSyncTaskRequest", 9, "dest", protoreflect.StringKind, protoreflect.Optional, ""},
		{"openmldb.datasync.SendDataRequest", 6, "finished", protoreflect.BoolKind, protoreflect.Optional, ""},
		{"openmldb.datasync.SendDataRequest", 7, "next_point", protoreflect.MessageKind, protoreflect.Optional, "openmldb.datasync.SyncPoint"},
		{"openmldb.datasync.SendDataResponse", 1, "response", protoreflect.MessageKind, protoreflect.Required, "openmldb.datasync.GeneralResponse"},
		{"openmldb.datasync.SyncPoint", 1, "type", protoreflect.EnumKind, protoreflect.Required, "openmldb.datasync.SyncType"},
		{"openmldb.datasync.TaskStatusResponse", 3, "readableInfo", protoreflect.StringKind, protoreflect.Repeated, ""},
		{"pb.SubTaskStatus", 11, "validation", protoreflect.MessageKind, protoreflect.Optional, "pb.ValidationStatus"},
		{"pb.OperateV1MetaResponse", 3, "meta", protoreflect.MessageKind, protoreflect.Repeated, "pb.OperateV1MetaResponse.MetaEntry"},
		{"pb.ValidationStatus", 12, "cutoverBinlogGtid", protoreflect.StringKind, protoreflect.Optional, ""},
		{"disaggregated.TryAddLockRequest", 1, "data_file_key", protoreflect.BytesKind, protoreflect.Optional, ""},
		{"disaggregated.TryAddLockRequest", 3, "lock_store_id", protoreflect.Uint64Kind, protoreflect.Optional, ""},
		{"disaggregated.TryAddLockRequest", 4, "lock_seq", protoreflect.Uint64Kind, protoreflect.Optional, ""},
		{"disaggregated.DisaggTaskMeta", 7, "keyspace_id", protoreflect.Uint32Kind, protoreflect.Optional, ""},
		{"disaggregated.DisaggTaskMeta", 8, "api_version", protoreflect.EnumKind, protoreflect.Optional, "kvrpcpb.APIVersion"},
		{"disaggregated.EstablishDisaggTaskError", 99, "error_other", protoreflect.MessageKind, protoreflect.Optional, "disaggregated.ErrorOther"},
		{"disaggregated.ErrorLocked", 2, "locked", protoreflect.MessageKind, protoreflect.Repeated, "kvrpcpb.LockInfo"},
		{"disaggregated.EstablishDisaggTaskRequest", 4, "regions", protoreflect.MessageKind, protoreflect.Repeated, "coprocessor.RegionInfo"},
		{"disaggregated.EstablishDisaggTaskRequest", 6, "table_regions", protoreflect.MessageKind, protoreflect.Repeated, "coprocessor.TableRegions"},
		{"coprocessor.RegionInfo", 2, "region_epoch", protoreflect.MessageKind, protoreflect.Optional, "metapb.RegionEpoch"},
		{"metapb.RegionEpoch", 1, "conf_ver", protoreflect.Uint64Kind, protoreflect.Optional, ""},
		{"kvrpcpb.LockInfo", 6, "lock_type", protoreflect.EnumKind, protoreflect.Optional, "kvrpcpb.Op"},
		{"kvrpcpb.LockInfo", 100, "is_txn_file", protoreflect.BoolKind, protoreflect.Optional, ""},
	}
	for _, tt := range tests {
		t.Run(string(tt.message)+"."+string(tt.name), func(t *testing.T) {
			fd := findMessage(t, tt.message).Fields().ByNumber(tt.number)
			if fd == nil {
				t.Fatalf("field %d not found", tt.number)
			}
			if fd.Name() != tt.name || fd.Kind() != tt.kind || fd.Cardinality() != tt.cardinality {
				t.Errorf("field %d = %s %v %v, want %s %v %v", tt.number,
					fd.Name(), fd.Kind(), fd.Cardinality(), tt.name, tt.kind, tt.cardinality)
			}
			var typeName protoreflect.FullName
			switch {
			case fd.Message() != nil:
				typeName = fd.Message().FullName()
			case fd.Enum() != nil:
				typeName = fd.Enum().FullName()
			}
			if typeName != tt.typeName {
				t.Errorf("field type = %q, want %q", typeName, tt.typeName)
			}
		})
	}
}

// Upstream gaps that must stay gaps: a field here would collide with a
// number upstream never assigned (or assigned elsewhere).
func TestContractAbsentFields(t *testing.T) {
	tests := []struct {
		message protoreflect.FullName
		number  protoreflect.FieldNumber
	}{
		{"disaggregated.TryAddLockRequest", 2},
		{"disaggregated.EstablishDisaggTaskResponse", 2},
		// upstream's numbering ends at 9 and 7: chunkraft's fields start at 100.
		{"openmldb.datasync.AddSyncTaskRequest", 10},
		{"openmldb.datasync.SendDataRequest", 8},
	}
	for _, tt := range tests {
		if fd := findMessage(t, tt.message).Fields().ByNumber(tt.number); fd != nil {
			t.Errorf("%s has field %d (%s), upstream has none", tt.message, tt.number, fd.Name())
		}
	}
}

func findService(t *testing.T, name protoreflect.FullName) protoreflect.ServiceDescriptor {
	t.Helper()
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		t.Fatalf("service %s: %v", name, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		t.Fatalf("%s is a %T, not a service", name, d)
	}
	return sd
}

func findMessage(t *testing.T, name protoreflect.FullName) protoreflect.MessageDescriptor {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		t.Fatalf("message %s: %v", name, err)
	}
	return mt.Descriptor()
}

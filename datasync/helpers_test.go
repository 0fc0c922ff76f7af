package datasync

import (
	"log/slog"
	"strconv"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// Ops and points of the tests.

func snapStart() *dspb.SyncPoint { return &dspb.SyncPoint{Type: dspb.SyncType_kSNAPSHOT.Enum()} }

func snapAt(chunk, off uint64) *dspb.SyncPoint {
	return &dspb.SyncPoint{Type: dspb.SyncType_kSNAPSHOT.Enum(), Pk: proto.String(strconv.FormatUint(chunk, 10)), Offset: proto.Uint64(off)}
}

func binlogAt(index uint64) *dspb.SyncPoint {
	return &dspb.SyncPoint{Type: dspb.SyncType_kBINLOG.Enum(), Offset: proto.Uint64(index)}
}

func ref(tid, pid uint32, token string) *pb.Ref { return &pb.Ref{Tid: tid, Pid: pid, Token: token} }

// putReq is the PutSubTask of task name on pool tid, copyset pid.
func putReq(name string, tid, pid uint32, token string, mode dspb.SyncMode, at *dspb.SyncPoint, ms int64) *pb.PutSubTask {
	return &pb.PutSubTask{Db: strconv.FormatUint(uint64(tid), 10), Name: name, UpdateMs: ms,
		Request: &dspb.AddSyncTaskRequest{Tid: proto.Uint32(tid), Pid: proto.Uint32(pid), Mode: mode.Enum(),
			SyncPoint: at, TabletEndpoint: proto.String("127.0.0.1:8200"), DesEndpoint: proto.String("127.0.0.1:8200"),
			Token: proto.String(token), Dest: proto.String("file:///tmp/export")}}
}

func advance(tid, pid uint32, token string, from, to *dspb.SyncPoint, count uint64, ms int64, finished bool) *pb.Advance {
	return &pb.Advance{Ref: ref(tid, pid, token), Start: from, Next: to, Count: count, UpdateMs: ms, Finished: finished}
}

// must(t)(EncodeX(op)) is the encoded op; an encoding error fails t.
func must(t testing.TB) func([]byte, error) []byte {
	return func(b []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

var testGroup = copyset.NewGroupID(1, 1)

// openSpec opens the machine on dir as a copyset does (its Spec, through
// copyset.OpenMachines).
func openSpec(t testing.TB, dir string) (*Machine, copyset.Machines) {
	t.Helper()
	ms, err := copyset.OpenMachines([]copyset.MachineSpec{Spec()}, testGroup, dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := copyset.MachineAs[*Machine](ms, kinds.Sync)
	if !ok {
		t.Fatal("no sync machine")
	}
	return m, ms
}

func closeSpec(t testing.TB, ms copyset.Machines) {
	t.Helper()
	if err := copyset.CloseMachines(ms); err != nil {
		t.Fatal(err)
	}
}

// newMachine opens a machine on a fresh dir, closed at the end of t.
func newMachine(t testing.TB) *Machine {
	m, ms := openSpec(t, t.TempDir())
	t.Cleanup(func() { closeSpec(t, ms) })
	return m
}

// apply applies an encoded op at index and returns its Result.
func apply(t testing.TB, m *Machine, index uint64, op []byte) Result {
	t.Helper()
	kind, payload, err := copyset.DecodeOp(op)
	if err != nil || kind != kinds.Sync {
		t.Fatalf("op: kind %d, %v", kind, err)
	}
	out := m.Apply(index, payload)
	res, ok := out.(Result)
	if !ok {
		t.Fatalf("apply index %d: %v", index, out)
	}
	return res
}

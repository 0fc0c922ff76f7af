package datasync

import (
	"errors"
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
	"google.golang.org/protobuf/proto"
)

// Admission refuses bad input with an error naming the problem, and the
// encoders encode nothing for it.
func TestValidateRefusesBadInput(t *testing.T) {
	put := func(edit func(*pb.PutSubTask)) *pb.Op {
		p := putReq("t", 1, 1, tok1, dspb.SyncMode_kFull, snapStart(), 1000)
		edit(p)
		return &pb.Op{Op: &pb.Op_Put{Put: p}}
	}
	adv := func(edit func(*pb.Advance)) *pb.Op {
		a := advance(1, 1, tok1, snapStart(), snapAt(1, 0), 1, 1000, false)
		edit(a)
		return &pb.Op{Op: &pb.Op_Advance{Advance: a}}
	}
	touch := func(edit func(*pb.Touch)) *pb.Op {
		o := &pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: 1000, At: binlogAt(5), CoveredIndex: 9, CoveredMs: 2000}
		edit(o)
		return &pb.Op{Op: &pb.Op_Touch{Touch: o}}
	}
	tests := []struct {
		name string
		op   *pb.Op
		want string
	}{
		{"no op", &pb.Op{}, "none of the known ops"},
		{"put: no request", put(func(p *pb.PutSubTask) { p.Request = nil }), "no AddSyncTaskRequest"},
		{"put: no pid", put(func(p *pb.PutSubTask) { p.Request.Pid = nil }), "no tid or no pid"},
		{"put: db not decimal", put(func(p *pb.PutSubTask) { p.Db = "pool1" }), `db "pool1" is not a pool id in decimal`},
		{"put: db with a leading zero", put(func(p *pb.PutSubTask) { p.Db = "01" }), `db "01" is not a pool id`},
		{"put: db not the tid", put(func(p *pb.PutSubTask) { p.Db = "2" }), `db "2" is not the tid 1`},
		{"put: empty name", put(func(p *pb.PutSubTask) { p.Name = "" }), "name is empty"},
		{"put: long name", put(func(p *pb.PutSubTask) { p.Name = strings.Repeat("n", MaxNameLen+1) }), "name is 129 bytes, at most 128"},
		{"put: name not UTF-8", put(func(p *pb.PutSubTask) { p.Name = "\xff" }), "name is not UTF-8"},
		{"put: name with a newline", put(func(p *pb.PutSubTask) { p.Name = "a\nb" }), "control character"},
		{"put: no mode", put(func(p *pb.PutSubTask) { p.Request.Mode = nil }), "mode is missing"},
		{"put: unknown mode", put(func(p *pb.PutSubTask) { p.Request.Mode = dspb.SyncMode(7).Enum() }), "unknown mode 7"},
		{"put: start_ts for kFull", put(func(p *pb.PutSubTask) { p.Request.StartTs = proto.Uint64(5) }), "start_ts 5 is only for kIncrementalByTimestamp"},
		{"put: incremental from a snapshot point", put(func(p *pb.PutSubTask) {
			p.Request.Mode = dspb.SyncMode_kIncrementalByTimestamp.Enum()
			p.Request.SyncPoint = &dspb.SyncPoint{Type: dspb.SyncType_kSNAPSHOT.Enum(), Pk: proto.String("3"), Offset: proto.Uint64(0)}
		}), "its sync point must be the very start or kBINLOG"},
		{"put: absurd start_ts", put(func(p *pb.PutSubTask) {
			p.Request.Mode, p.Request.SyncPoint = dspb.SyncMode_kIncrementalByTimestamp.Enum(), binlogAt(1)
			p.Request.StartTs = proto.Uint64(MaxUnixMs + 1)
		}), "is not a time in milliseconds"},
		{"put: no sync point", put(func(p *pb.PutSubTask) { p.Request.SyncPoint = nil }), "sync point is missing"},
		{"put: empty token", put(func(p *pb.PutSubTask) { p.Request.Token = proto.String("") }), "token is empty"},
		{"put: long token", put(func(p *pb.PutSubTask) { p.Request.Token = proto.String(strings.Repeat("t", MaxTokenLen+1)) }), "token is 65 bytes"},
		{"put: no dest", put(func(p *pb.PutSubTask) { p.Request.Dest = nil }), "dest is empty"},
		{"put: long dest", put(func(p *pb.PutSubTask) { p.Request.Dest = proto.String(strings.Repeat("d", MaxDestLen+1)) }), "dest is 1025 bytes"},
		{"put: no tablet endpoint", put(func(p *pb.PutSubTask) { p.Request.TabletEndpoint = nil }), "tablet_endpoint is empty"},
		{"put: long des endpoint", put(func(p *pb.PutSubTask) { p.Request.DesEndpoint = proto.String(strings.Repeat("e", MaxEndpointLen+1)) }), "des_endpoint is 257 bytes"},
		{"put: no time", put(func(p *pb.PutSubTask) { p.UpdateMs = 0 }), "update_ms 0 is not a time"},
		{"put: negative time", put(func(p *pb.PutSubTask) { p.UpdateMs = -5 }), "update_ms -5 is not a time"},
		{"point: no type", put(func(p *pb.PutSubTask) { p.Request.SyncPoint = &dspb.SyncPoint{} }), "sync point has no type"},
		{"point: unknown type", put(func(p *pb.PutSubTask) { p.Request.SyncPoint.Type = dspb.SyncType(9).Enum() }), "unknown type 9"},
		{"point: ts set", put(func(p *pb.PutSubTask) { p.Request.SyncPoint.Ts = proto.Uint64(1) }), "ts is not used"},
		{"point: pk without offset", put(func(p *pb.PutSubTask) { p.Request.SyncPoint.Pk = proto.String("3") }), "pk and offset come together"},
		{"point: pk not a chunk id", put(func(p *pb.PutSubTask) {
			p.Request.SyncPoint = snapAt(3, 0)
			p.Request.SyncPoint.Pk = proto.String("-3")
		}),
			`pk "-3" is not a chunk id in decimal`},
		{"point: snapshot offset too big", put(func(p *pb.PutSubTask) { p.Request.SyncPoint = snapAt(3, MaxSnapshotOffset+1) }), "offset 4294967296 is beyond"},
		{"point: binlog index 0", put(func(p *pb.PutSubTask) { p.Request.SyncPoint = binlogAt(0) }), "offset 0 is not a log index"},
		{"point: binlog absurd index", put(func(p *pb.PutSubTask) { p.Request.SyncPoint = binlogAt(MaxLogIndex + 1) }), "is not a log index"},
		{"point: binlog with pk", put(func(p *pb.PutSubTask) { p.Request.SyncPoint = binlogAt(3); p.Request.SyncPoint.Pk = proto.String("1") }), "pk is not used"},
		{"advance: no ref", adv(func(a *pb.Advance) { a.Ref = nil }), "no sub-task ref"},
		{"advance: empty token", adv(func(a *pb.Advance) { a.Ref.Token = "" }), "token is empty"},
		{"advance: no start", adv(func(a *pb.Advance) { a.Start = nil }), "start point: sync point is missing"},
		{"advance: bad next", adv(func(a *pb.Advance) { a.Next = binlogAt(0) }), "next point: kBINLOG sync point"},
		{"advance: backwards in the snapshot", adv(func(a *pb.Advance) { a.Start, a.Next = snapAt(5, 0), snapAt(4, 9) }),
			"next point snapshot chunk 4 offset 9 is before start point snapshot chunk 5 offset 0"},
		{"advance: backwards to the snapshot", adv(func(a *pb.Advance) { a.Start, a.Next = binlogAt(5), snapAt(9, 0) }), "is before start point binlog index 5"},
		{"advance: backwards in the binlog", adv(func(a *pb.Advance) { a.Start, a.Next = binlogAt(5), binlogAt(4) }), "is before start point"},
		{"advance: records without progress", adv(func(a *pb.Advance) { a.Next = snapStart() }), "1 records in a packet that does not move the point"},
		{"advance: absurd count", adv(func(a *pb.Advance) { a.Count = MaxPacketCount + 1 }), "count 4294967297 is beyond"},
		{"advance: finished in the snapshot", adv(func(a *pb.Advance) { a.Finished = true }), "a finished packet ends in the binlog"},
		{"advance: no time", adv(func(a *pb.Advance) { a.UpdateMs = 0 }), "update_ms 0"},
		{"touch: no ref", &pb.Op{Op: &pb.Op_Touch{Touch: &pb.Touch{UpdateMs: 1}}}, "no sub-task ref"},
		{"touch: absurd time", &pb.Op{Op: &pb.Op_Touch{Touch: &pb.Touch{Ref: ref(1, 1, tok1), UpdateMs: MaxUnixMs + 1}}}, "is not a time"},
		{"advance: negative start time", adv(func(a *pb.Advance) { a.StartStateMs = -1 }), "start_state_ms -1 is not a time"},
		{"advance: absurd covered time", adv(func(a *pb.Advance) { a.CoveredMs = MaxUnixMs + 1 }), "covered_ms 253402300800000 is not a time"},
		{"touch: bad point", touch(func(o *pb.Touch) { o.At = binlogAt(0) }), "point: kBINLOG sync point"},
		{"touch: covered without a point", touch(func(o *pb.Touch) { o.At = nil }), "covered_index 9 and covered_ms 2000 without a binlog point"},
		{"touch: covered at a snapshot point", touch(func(o *pb.Touch) { o.At = snapAt(3, 0) }), "without a binlog point"},
		{"touch: covered below the point", touch(func(o *pb.Touch) { o.CoveredIndex = 3 }), "covered_index 3 is below binlog point 5"},
		{"touch: negative covered time", touch(func(o *pb.Touch) { o.CoveredMs = -2 }), "covered_ms -2 is not a time"},
		{"set status: RUNNING", &pb.Op{Op: &pb.Op_SetStatus{SetStatus: &pb.SetStatus{Ref: ref(1, 1, tok1), Status: pb.Status_RUNNING}}}, "status RUNNING: only FAILED and REASSIGNING"},
		{"set status: SUCCESS", &pb.Op{Op: &pb.Op_SetStatus{SetStatus: &pb.SetStatus{Ref: ref(1, 1, tok1), Status: pb.Status_SUCCESS}}}, "status SUCCESS"},
		{"set status: unknown", &pb.Op{Op: &pb.Op_SetStatus{SetStatus: &pb.SetStatus{Ref: ref(1, 1, tok1), Status: pb.Status(17)}}}, "status 17"},
		{"set status: long message", &pb.Op{Op: &pb.Op_SetStatus{SetStatus: &pb.SetStatus{Ref: ref(1, 1, tok1), Status: pb.Status_FAILED,
			Message: strings.Repeat("m", MaxMessageLen+1)}}}, "message is 1025 bytes"},
		{"binlog end: 0", &pb.Op{Op: &pb.Op_SetBinlogEnd{SetBinlogEnd: &pb.SetBinlogEnd{Ref: ref(1, 1, tok1)}}}, "index 0 is not a log index"},
		{"binlog end: absurd", &pb.Op{Op: &pb.Op_SetBinlogEnd{SetBinlogEnd: &pb.SetBinlogEnd{Ref: ref(1, 1, tok1), Index: MaxLogIndex}}}, "is not a log index"},
		{"delete: db not decimal", &pb.Op{Op: &pb.Op_DeleteTask{DeleteTask: &pb.DeleteTask{Db: "x", Name: "t"}}}, `db "x" is not a pool id`},
		{"delete: no name", &pb.Op{Op: &pb.Op_DeleteTask{DeleteTask: &pb.DeleteTask{Db: "1"}}}, "name is empty"},
		{"delete: bad export id", &pb.Op{Op: &pb.Op_DeleteTask{DeleteTask: &pb.DeleteTask{Db: "1", Name: "t", ExportId: "ABC"}}}, `export id "ABC" is not 32 lowercase hex digits`},
		{"put: another task's name in the request", put(func(p *pb.PutSubTask) { p.Request.TaskName = proto.String("u") }), `put sub-task 1/1 of task "t": the request names task "u"`},
		{"put: bad export id", put(func(p *pb.PutSubTask) { p.Request.ExportId = proto.String(strings.Repeat("g", ExportIDLen)) }), "is not 32 lowercase hex digits"},
		{"put: short export id", put(func(p *pb.PutSubTask) { p.Request.ExportId = proto.String("abc") }), "is not 32 lowercase hex digits"},
		{"advance: name with a newline", adv(func(a *pb.Advance) { a.Ref.Name = "a\nb" }), "control character"},
		{"advance: absurd written time", adv(func(a *pb.Advance) { a.WrittenAtMs = -1 }), "written_at_ms -1 is not a time"},
		{"touch: absurd written time", touch(func(o *pb.Touch) { o.WrittenAtMs = MaxUnixMs + 1 }), "written_at_ms 253402300800000 is not a time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateOp(tt.op)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("validate: %v, want an error saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
			if b, err := encodeOp(tt.op); b != nil || err == nil {
				t.Fatalf("encoded %d bytes, %v", len(b), err)
			}
		})
	}
	// The valid ops the tests build pass.
	for _, op := range []*pb.Op{put(func(*pb.PutSubTask) {}), adv(func(*pb.Advance) {}), touch(func(*pb.Touch) {}),
		put(func(p *pb.PutSubTask) {
			p.Request.TaskName, p.Request.ExportId = proto.String("t"), proto.String(NewExportID())
		}),
		adv(func(a *pb.Advance) { a.Ref.Name, a.WrittenAtMs = "t", 1000 }),
		touch(func(o *pb.Touch) { o.CoveredIndex = 4 }), touch(func(o *pb.Touch) { o.At, o.CoveredIndex, o.CoveredMs = snapAt(3, 0), 0, 0 })} {
		if err := validateOp(op); err != nil {
			t.Errorf("valid op refused: %v", err)
		}
	}
}

// An op that admission would refuse but that is in the log anyway (an
// older proposer, a bug) is refused when it applies and changes nothing.
func TestApplyRefusesInvalidOp(t *testing.T) {
	m := created(t, dspb.SyncMode_kFull, snapStart())
	bad := &pb.Op{Op: &pb.Op_Advance{Advance: advance(1, 1, tok1, snapStart(), snapAt(1, 0), 1, 0, false)}}
	payload, err := proto.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := m.Apply(2, payload).(Result)
	if !ok || !errors.Is(res.Err, ErrInvalidOp) || !strings.Contains(res.Err.Error(), "update_ms 0") || m.Applied() != 1 {
		t.Fatalf("applied an invalid op: %v, state at %d", res.Err, m.Applied())
	}
}

// An op this version cannot decode stops the replica rather than being
// skipped (skipping could diverge from a replica that knows it).
func TestUndecodableOpIsFatal(t *testing.T) {
	m := newMachine(t)
	unknown := []byte{0x42, 0x00} // field 8, length 0: no op this version knows
	for _, payload := range [][]byte{{0xff, 0xff}, unknown, nil} {
		if _, ok := m.Apply(1, payload).(*copyset.FatalError); !ok {
			t.Errorf("payload %x: %v, want a FatalError", payload, m.Apply(1, payload))
		}
	}
}

// The encoders put the sync op header in front.
func TestEncodedOpHeader(t *testing.T) {
	kind, payload, err := copyset.DecodeOp(EncodeDeleteAll())
	if err != nil || kind != kinds.Sync {
		t.Fatalf("kind %d, %v", kind, err)
	}
	op := &pb.Op{}
	if err := proto.Unmarshal(payload, op); err != nil || op.GetDeleteAll() == nil {
		t.Fatalf("payload %v, %v", op, err)
	}
}

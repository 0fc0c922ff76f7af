package datasync

import (
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// A task-wide put retried after its answer was lost finds the sub-task its
// first attempt made: the machine refuses it as the same task, and that
// refusal (with the record holding the put's token) is the put's success.
// Any other refusal, or a record with another token, is not.
func TestCommittedBefore(t *testing.T) {
	put := putReq("t", 1, 1, tok1, dspb.SyncMode_kFull, snapStart(), 1000)
	op := &pb.Op{Op: &pb.Op_Put{Put: put}}
	m := newMachine(t)
	first := apply(t, m, 1, must(t)(EncodePutSubTask(put)))
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	// The answer proposeLocal builds from the retried put's apply result.
	again := apply(t, m, 2, must(t)(EncodePutSubTask(put)))
	resp := &pb.ProposeResponse{Code: -1, Msg: again.Err.Error(), Record: again.Record}
	if !committedBefore(op, resp) {
		t.Fatalf("the retry's refusal %v is not taken as the first attempt's success", resp)
	}
	other := putReq("t", 1, 1, tok2, dspb.SyncMode_kFull, snapStart(), 1000)
	for _, c := range []struct {
		what string
		op   *pb.Op
		resp *pb.ProposeResponse
	}{
		{"success", op, &pb.ProposeResponse{Record: again.Record}},
		{"another token's sub-task", &pb.Op{Op: &pb.Op_Put{Put: other}}, resp},
		{"another refusal", op, &pb.ProposeResponse{Code: -1, Msg: ErrTaskExists.Error(), Record: again.Record}},
		{"not leader", op, &pb.ProposeResponse{Code: -1, Msg: ErrSameTask.Error(), Record: again.Record, NotLeader: true}},
		{"a removal", &pb.Op{Op: &pb.Op_DeleteAll{DeleteAll: &pb.DeleteAll{}}}, resp},
	} {
		if committedBefore(c.op, c.resp) {
			t.Errorf("%s: taken as a put that committed before", c.what)
		}
	}
}

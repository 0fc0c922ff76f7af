package dm_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/dm"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	"github.com/chunkraft/chunkraft/internal/testwait"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// A source op the target refuses (NOSPACE) pauses the share at that op's
// position; `binlog skip` there resumes it without the op, `binlog
// replace` applies other ops instead, `binlog inject` other ops before
// it; inject, list and revert work on a position ahead; bad requests are refused with the reason and change
// nothing.
func TestHandleError(t *testing.T) {
	c := chunkservertest.Start(t, 3, func(cfg *chunkserver.Config) {
		cfg.Sync.SendInterval = 200 * time.Millisecond
		cfg.DM.ResumeBackoffMin, cfg.DM.ResumeBackoffMax = 200*time.Millisecond, 400*time.Millisecond
	})
	src, dst := c.Group, copyset.NewGroupID(2, 1)
	createCopyset(t, c, dst)
	write(t, c, src, 1, 1, 0, 0x01)
	startMigration(t, c, src, dst)
	testwait.Until(t, 30*time.Second, func() error {
		if u := share(t, c, dst, "mig").GetUnit(); u != dmpb.UnitType_Sync {
			return fmt.Errorf("unit %v", u)
		}
		return nil
	})
	worker := dmpb.NewWorkerClient(c.Conns[0])
	handle := func(op dmpb.ErrorOp, pos string, ops ...string) *dmpb.CommonWorkerResponse {
		t.Helper()
		r, err := worker.HandleError(context.Background(), &dmpb.HandleWorkerErrorRequest{Op: op, Task: "mig", BinlogPos: pos, Sqls: ops})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Bad requests change nothing.
	before := share(t, c, dst, "mig")
	for _, tc := range []struct {
		op   dmpb.ErrorOp
		pos  string
		ops  []string
		want string
	}{
		{dmpb.ErrorOp_Skip, "", nil, "no error to handle"},
		{dmpb.ErrorOp_Skip, "1/1:12", nil, "no '.'"},
		{dmpb.ErrorOp_Skip, "2/1:12.0", nil, "is in pool 2"},
		{dmpb.ErrorOp_Skip, "1/9:12.0", nil, "no share applying source copyset 1/9"},
		{dmpb.ErrorOp_Skip, "1/1:1.0", nil, "applied 1.0 already"},
		{dmpb.ErrorOp_Replace, "1/1:999999.0", nil, "needs the ops"},
		{dmpb.ErrorOp_Replace, "1/1:999999.0", []string{"write 7 0 4096 sn=x data=zero"}, "column 19"},
		{dmpb.ErrorOp_Inject, "", []string{"noop"}, "needs a binlog position"},
		{dmpb.ErrorOp_Revert, "1/1:999999.0", nil, "has no operator at 999999.0"},
		{dmpb.ErrorOp_InvalidErrorOp, "", nil, "does not exist"},
	} {
		r := handle(tc.op, tc.pos, tc.ops...)
		if r.GetResult() || !strings.Contains(r.GetMsg(), tc.want) {
			t.Errorf("%v %q %q: %v, want a refusal saying %q", tc.op, tc.pos, tc.ops, r, tc.want)
		}
	}
	if r, err := worker.HandleError(context.Background(), &dmpb.HandleWorkerErrorRequest{Op: dmpb.ErrorOp_Skip, Task: "nope"}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "no sub task with name nope has started") {
		t.Errorf("an unknown task: %v %v", r, err)
	}
	if after := share(t, c, dst, "mig"); len(after.GetOperators()) != 0 || after.GetUpdatedIndex() != before.GetUpdatedIndex() && after.GetStage() != dmpb.Stage_Running {
		t.Fatalf("refused requests changed the share: %v", after)
	}

	// inject, list and revert at a position ahead.
	ahead := "1/1:999999.0"
	if r := handle(dmpb.ErrorOp_Inject, ahead, "write 9 0 4096 sn=1 data=zero; noop"); !r.GetResult() {
		t.Fatalf("inject: %v", r)
	}
	r := handle(dmpb.ErrorOp_List, "")
	var listed []dm.OperatorView
	if err := json.Unmarshal([]byte(r.GetMsg()), &listed); err != nil || !r.GetResult() || len(listed) != 1 ||
		listed[0].Position != ahead || listed[0].Op != "Inject" || len(listed[0].Ops) != 2 {
		t.Fatalf("list: %v (%v)", r, err)
	}
	if r := handle(dmpb.ErrorOp_Revert, ahead); !r.GetResult() {
		t.Fatalf("revert: %v", r)
	}
	if r := handle(dmpb.ErrorOp_List, ""); r.GetMsg() != "[]" {
		t.Fatalf("list after revert: %v", r)
	}

	// The target's leader runs out of space; the source, led elsewhere,
	// takes a write the share cannot apply: it pauses at its position.
	full := func(on bool) { diskFull(c, dst, on) }
	moveSourceLeader(t, c, src, dst)
	pausedAt := func() string {
		t.Helper()
		var at string
		testwait.Until(t, 30*time.Second, func() error {
			sh := share(t, c, dst, "mig")
			if sh.GetErrorAt() == nil || sh.GetStage() != dmpb.Stage_Paused {
				return fmt.Errorf("share %v, error at %v", sh.GetStage(), sh.GetErrorAt())
			}
			at = dm.Position{Pool: 1, Copyset: 1, At: sh.GetErrorAt()}.String()
			return nil
		})
		return at
	}
	full(true)
	write(t, c, src, 7, 1, 0, 0x77)
	skipped := pausedAt()
	if r := handle(dmpb.ErrorOp_Skip, ""); !r.GetResult() || !strings.Contains(r.GetMsg(), "Skip at "+skipped) {
		t.Fatalf("skip at the error: %v", r)
	}
	full(false)
	write(t, c, src, 7, 1, 1, 0x78)
	testwait.Until(t, 30*time.Second, func() error {
		return chunkIs(t, c, dst, 7, map[int]byte{0: 0, 1: 0x78})
	})

	// replace: another write at the next error's position.
	full(true)
	write(t, c, src, 7, 1, 2, 0x79)
	replaced := pausedAt()
	data := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x5a}, 4096))
	if r := handle(dmpb.ErrorOp_Replace, replaced, "write 7 8192 4096 sn=1 data=b64:"+data); !r.GetResult() {
		t.Fatalf("replace: %v", r)
	}
	full(false)
	testwait.Until(t, 30*time.Second, func() error {
		return chunkIs(t, c, dst, 7, map[int]byte{0: 0, 1: 0x78, 2: 0x5a})
	})

	// inject: ops before the op at the next error's position, which then
	// applies too.
	full(true)
	write(t, c, src, 7, 1, 3, 0x7a)
	injected := pausedAt()
	data = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x6b}, 8192))
	if r := handle(dmpb.ErrorOp_Inject, injected, "write 7 16384 8192 sn=1 data=b64:"+data); !r.GetResult() {
		t.Fatalf("inject: %v", r)
	}
	full(false)
	testwait.Until(t, 30*time.Second, func() error {
		return chunkIs(t, c, dst, 7, map[int]byte{0: 0, 1: 0x78, 2: 0x5a, 3: 0x7a, 4: 0x6b, 5: 0x6b})
	})
	sh := share(t, c, dst, "mig")
	if sh.GetStage() != dmpb.Stage_Running || len(sh.GetOperators()) != 0 || sh.GetErrorAt() != nil {
		t.Fatalf("share after the handled errors: %v", sh)
	}
}

// moveSourceLeader makes copyset src led by a server that does not lead
// dst.
func moveSourceLeader(t *testing.T, c *chunkservertest.Cluster, src, dst copyset.GroupID) {
	t.Helper()
	testwait.Until(t, 30*time.Second, func() error {
		ls, ld := leaderOf(t, c, src), leaderOf(t, c, dst)
		if ls != ld {
			return nil
		}
		to := (ld + 1) % len(c.Servers)
		if err := c.Servers[ls].Copysets().Get(src).TransferLeader(context.Background(), c.Servers[to].Local()); err != nil {
			return err
		}
		return errors.New("both copysets led by one server")
	})
}

// diskFull makes the leader of copyset g report no free space (its
// admission refuses writes), or every server report what it has.
func diskFull(c *chunkservertest.Cluster, g copyset.GroupID, on bool) {
	for _, i := range c.Up() {
		admit := c.Servers[i].Chunks().Admission()
		if on && c.Servers[i].Copysets().Get(g).IsLeader() {
			admit.SetDiskFree(func(string) (uint64, error) { return 0, nil })
		} else {
			admit.SetDiskFree(nil)
		}
	}
}

// chunkIs checks blocks of chunk id on g's leader: block -> the byte all
// its 4 KiB hold.
func chunkIs(t *testing.T, c *chunkservertest.Cluster, g copyset.GroupID, id uint64, blocks map[int]byte) error {
	t.Helper()
	n := c.Servers[leaderOf(t, c, g)].Copysets().Get(g)
	st, err := chunkread.Of(n)
	if err != nil {
		return err
	}
	var buf chunkread.ImageBuffers
	im, err := st.ChunkImage(id, &buf)
	if err != nil {
		return fmt.Errorf("chunk %d: %w", id, err)
	}
	for b, want := range blocks {
		got := im.Data[b*4096 : (b+1)*4096]
		if !bytes.Equal(got, bytes.Repeat([]byte{want}, 4096)) {
			return fmt.Errorf("chunk %d block %d holds %#x..., want %#x", id, b, got[0], want)
		}
	}
	return nil
}

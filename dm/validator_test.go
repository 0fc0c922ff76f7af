package dm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// The validator of a task with a cluster source (mode full, row-error-delay
// 2 s): every chunk compared and equal once caught up; a chunk written on
// all the while gives no row over 60 s; one byte changed on the target's
// replicas of a chunk gives exactly one row, which ignore-error, a restart
// of the target's leader, resolve-error and clear-error act on as said;
// the cutover point; bad requests are refused and change nothing.
func TestValidator(t *testing.T) {
	a := chunkservertest.Start(t, 3)
	b := chunkservertest.Start(t, 3)
	ctx := context.Background()
	dst := copyset.NewGroupID(2, 1)
	createCopyset(t, b, dst)
	for chunk := uint64(1); chunk <= 3; chunk++ {
		write(t, a, a.Group, chunk, 1, uint32(chunk), byte(chunk))
	}
	var seeds []string
	for _, srv := range a.Servers {
		seeds = append(seeds, "'"+srv.Local().Addr()+"'")
	}
	task := fmt.Sprintf("name: mig\ntask-mode: all\nsource:\n  cluster: [%s]\n  pool: 1\n  relay: file://%s\n  send-interval: 200ms\ntarget-pool: 2\nvalidator:\n  mode: full\n  row-error-delay: 2s\n",
		strings.Join(seeds, ", "), filepath.Join(t.TempDir(), "relay"))
	if r, err := pb.NewDMControlClient(b.Conns[0]).StartTask(ctx, &pb.StartTaskRequest{Task: task}); err != nil || !r.GetResult() {
		t.Fatalf("start-task: %v %v", r, err)
	}
	w := dmpb.NewWorkerClient(b.Conns[1])
	vstatus := func() (*dmpb.ValidationStatus, error) {
		r, err := w.GetWorkerValidatorStatus(ctx, &dmpb.GetValidationStatusRequest{TaskName: "mig"})
		if err != nil {
			return nil, err
		}
		if len(r.GetValidators()) != 1 {
			return nil, fmt.Errorf("validators %v", r.GetValidators())
		}
		return r.GetValidators()[0], nil
	}
	rows := func(state dmpb.ValidateErrorState) []*dmpb.ValidationError {
		t.Helper()
		r, err := w.GetValidatorError(ctx, &dmpb.GetValidationErrorRequest{TaskName: "mig", ErrState: state})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetError()
	}
	// caughtUp waits for a pass that compared every chunk, all equal.
	caughtUp := func() {
		t.Helper()
		testwait.Until(t, 60*time.Second, func() error {
			v, err := vstatus()
			if err != nil {
				return err
			}
			if v.GetStage() != dmpb.Stage_Running || !strings.HasPrefix(v.GetProcessedRowsStatus(), "compared 3, equal 3") ||
				!strings.HasPrefix(v.GetPendingRowsStatus(), "pending 0, differing 0") {
				return fmt.Errorf("validator %v", v)
			}
			return nil
		})
	}
	caughtUp()
	// morePasses waits until the validator has made n more passes.
	morePasses := func(n uint64) {
		t.Helper()
		passes := func() (uint64, error) {
			v, err := vstatus()
			if err != nil {
				return 0, err
			}
			var p, d, k uint64
			_, err = fmt.Sscanf(v.GetPendingRowsStatus(), "pending %d, differing %d (last pass, %d passes)", &p, &d, &k)
			return k, err
		}
		var from uint64
		testwait.Until(t, 30*time.Second, func() (err error) { from, err = passes(); return err })
		testwait.Until(t, 60*time.Second, func() error {
			k, err := passes()
			if err == nil && k < from+n {
				err = fmt.Errorf("%d passes, waiting for %d", k, from+n)
			}
			return err
		})
	}

	// Writes to chunk 1 all the while: pending at times, never a row.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			write(t, a, a.Group, 1, 1, uint32(i%8), byte(i))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if got := rows(dmpb.ValidateErrorState_InvalidErr); len(got) != 0 {
			close(stop)
			wg.Wait()
			t.Fatalf("a row for a chunk under writes: %v", got)
		}
		morePasses(1)
	}
	close(stop)
	wg.Wait()
	caughtUp()

	// One byte of chunk 2 changed on every target replica.
	path := func(i int) string {
		return strings.Replace(b.ChunkPath(i, 2), b.Group.String(), dst.String(), 1)
	}
	flip := func() {
		t.Helper()
		for i := range b.Servers {
			f, err := os.OpenFile(path(i), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			var one [1]byte
			const at = 4096 + 4096*2 + 7 // a byte of block 2 (chunk 2 was written there)
			if _, err := f.ReadAt(one[:], at); err != nil {
				t.Fatal(err)
			}
			one[0] ^= 0xff
			if _, err := f.WriteAt(one[:], at); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
	flip()
	var row *dmpb.ValidationError
	testwait.Until(t, 30*time.Second, func() error {
		got := rows(dmpb.ValidateErrorState_NewErr)
		if len(got) != 1 {
			return fmt.Errorf("rows %v", got)
		}
		row = got[0]
		return nil
	})
	if row.GetSrcTable() != "2" || row.GetSource() != "pool-1/copyset-1" || row.GetErrorType() == "" {
		t.Fatalf("the row: %v", row)
	}
	// Still one over three more passes.
	morePasses(3)
	if got := rows(dmpb.ValidateErrorState_InvalidErr); len(got) != 1 {
		t.Fatalf("rows after more passes: %v", got)
	}

	// Bad requests change nothing.
	var id uint64
	fmt.Sscan(row.GetId(), &id)
	operate := func(op dmpb.ValidationErrOp, id uint64, all bool) *dmpb.OperateValidationErrorResponse {
		t.Helper()
		r, err := w.OperateValidatorError(ctx, &dmpb.OperateValidationErrorRequest{Op: op, TaskName: "mig", ErrId: id, IsAllError: all})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, tc := range []struct {
		op   dmpb.ValidationErrOp
		id   uint64
		all  bool
		want string
	}{
		{dmpb.ValidationErrOp_IgnoreErrOp, id + 1000, false, "no validation error"},
		{dmpb.ValidationErrOp_IgnoreErrOp, id, true, "exactly one"},
		{dmpb.ValidationErrOp_IgnoreErrOp, 0, false, "exactly one"},
		{dmpb.ValidationErrOp_InvalidErrOp, id, false, "want IgnoreErrOp"},
	} {
		if r := operate(tc.op, tc.id, tc.all); r.GetResult() || !strings.Contains(r.GetMsg(), tc.want) {
			t.Errorf("%v %d %v: %v, want a refusal saying %q", tc.op, tc.id, tc.all, r, tc.want)
		}
	}
	if _, err := w.GetValidatorError(ctx, &dmpb.GetValidationErrorRequest{TaskName: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("an unknown task: %v, want NotFound", err)
	}
	if r, err := w.UpdateValidator(ctx, &dmpb.UpdateValidationWorkerRequest{TaskName: "mig", BinlogGTID: "x:1-2"}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "no GTIDs") {
		t.Fatalf("a GTID cutover: %v %v", r, err)
	}
	if r, err := w.UpdateValidator(ctx, &dmpb.UpdateValidationWorkerRequest{TaskName: "mig", BinlogPos: "1/9:5.0"}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "no share applying source copyset 1/9") {
		t.Fatalf("a cutover in another copyset: %v %v", r, err)
	}
	if got := rows(dmpb.ValidateErrorState_NewErr); len(got) != 1 || got[0].GetId() != row.GetId() {
		t.Fatalf("refused requests changed the rows: %v", got)
	}

	// Ignored: no new row while the chunk still differs, across a
	// restart of the target's leader.
	if r := operate(dmpb.ValidationErrOp_IgnoreErrOp, id, false); !r.GetResult() {
		t.Fatalf("ignore-error: %v", r)
	}
	leader := leaderOf(t, b, dst)
	b.Stop(leader)
	b.Restart(leader)
	testwait.Until(t, 30*time.Second, func() error {
		r, err := w.GetValidatorError(ctx, &dmpb.GetValidationErrorRequest{TaskName: "mig"})
		if err != nil {
			return err
		}
		if got := r.GetError(); len(got) != 1 || got[0].GetId() != row.GetId() || got[0].GetStatus() != dmpb.ValidateErrorState_IgnoredErr {
			return fmt.Errorf("rows after the restart: %v", got)
		}
		return nil
	})
	// The block rewritten on the source (and so on the target), resolved
	// and cleared: no rows, every chunk equal.
	write(t, a, a.Group, 2, 1, 2, 0x22)
	caughtUp()
	if r := operate(dmpb.ValidationErrOp_ResolveErrOp, 0, true); !r.GetResult() {
		t.Fatalf("resolve-error --all: %v", r)
	}
	if got := rows(dmpb.ValidateErrorState_ResolvedErr); len(got) != 1 {
		t.Fatalf("resolved rows: %v", got)
	}
	if r := operate(dmpb.ValidationErrOp_ClearErrOp, id, false); !r.GetResult() {
		t.Fatalf("clear-error: %v", r)
	}
	morePasses(5) // past the row delay
	if got := rows(dmpb.ValidateErrorState_InvalidErr); len(got) != 0 {
		t.Fatalf("rows after clear-error: %v", got)
	}

	// The cutover point: reached once the validator has compared past it.
	sh := share(t, b, dst, "mig")
	at := fmt.Sprintf("1/1:%d.0", sh.GetCheckpoint().GetSourceIndex())
	if r, err := w.UpdateValidator(ctx, &dmpb.UpdateValidationWorkerRequest{TaskName: "mig", BinlogPos: at}); err != nil || !r.GetResult() {
		t.Fatalf("update-validator: %v %v", r, err)
	}
	write(t, a, a.Group, 3, 1, 0, 9)
	reached := func(point string) {
		t.Helper()
		testwait.Until(t, 60*time.Second, func() error {
			v, err := vstatus()
			if err != nil {
				return err
			}
			if v.GetCutoverBinlogPos() != point+" (reached)" {
				return fmt.Errorf("validator %v", v)
			}
			return nil
		})
	}
	reached(at)
	// A time: reached by a pass begun at or after it.
	now := time.Now().UTC().Add(time.Second).Format(time.RFC3339)
	if r, err := w.UpdateValidator(ctx, &dmpb.UpdateValidationWorkerRequest{TaskName: "mig", BinlogPos: now}); err != nil || !r.GetResult() {
		t.Fatalf("update-validator at a time: %v %v", r, err)
	}
	reached(now) // with no write since: an idle source reaches it too
	// The task's cutover fence: none yet, so not reached.
	if r, err := w.UpdateValidator(ctx, &dmpb.UpdateValidationWorkerRequest{TaskName: "mig", BinlogPos: "cutover"}); err != nil || !r.GetResult() {
		t.Fatalf("update-validator at the cutover: %v %v", r, err)
	}
	morePasses(3)
	if v, err := vstatus(); err != nil || v.GetCutoverBinlogPos() != "cutover" {
		t.Fatalf("validator with a cutover point at the fence, before any cutover: %v %v", v, err)
	}
	if r, err := w.UpdateValidator(ctx, &dmpb.UpdateValidationWorkerRequest{TaskName: "mig", BinlogPos: "soon"}); err != nil || r.GetResult() || !strings.Contains(r.GetMsg(), "a time (RFC 3339)") {
		t.Fatalf("update-validator at \"soon\": %v %v", r, err)
	}
}

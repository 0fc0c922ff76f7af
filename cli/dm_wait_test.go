package cli

import (
	"strings"
	"testing"

	dmworkerpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

func TestDMWaitDoneAndStuck(t *testing.T) {
	errs := func(level string) *dmworkerpb.ProcessResult {
		return &dmworkerpb.ProcessResult{Errors: []*dmworkerpb.ProcessError{{ErrCode: 46004, ErrLevel: level, Message: "read packet"}}}
	}
	synced := func(b bool) *dmworkerpb.SubTaskStatus_Sync {
		return &dmworkerpb.SubTaskStatus_Sync{Sync: &dmworkerpb.SyncStatus{Synced: b}}
	}
	for _, tc := range []struct {
		name  string
		st    *dmworkerpb.SubTaskStatus
		done  bool
		stuck string // "" or a part of why
	}{
		{"finished", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Finished, Unit: dmworkerpb.UnitType_Load}, true, ""},
		{"loading", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Running, Unit: dmworkerpb.UnitType_Load}, false, ""},
		{"in Sync, behind", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Running, Unit: dmworkerpb.UnitType_Sync, Status: synced(false)}, false, ""},
		{"in Sync, synced", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Running, Unit: dmworkerpb.UnitType_Sync, Status: synced(true)}, true, ""},
		{"paused, synced", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Paused, Unit: dmworkerpb.UnitType_Sync, Status: synced(true), Result: errs("medium")}, false, ""},
		{"paused, resumable", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Paused, Unit: dmworkerpb.UnitType_Load, Result: errs("medium")}, false, ""},
		{"paused, not resumable", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Paused, Unit: dmworkerpb.UnitType_Load, Result: errs("high")}, false, "auto-resume does not resume: [code=46004"},
		{"paused by a user", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Pausing, Unit: dmworkerpb.UnitType_Load, Result: &dmworkerpb.ProcessResult{IsCanceled: true}}, false, "paused by a user"},
		{"stopping", &dmworkerpb.SubTaskStatus{Stage: dmworkerpb.Stage_Stopping, Unit: dmworkerpb.UnitType_Load}, false, "it is Stopping"},
	} {
		if got := dmWaitDone(tc.st); got != tc.done {
			t.Errorf("%s: done %v, want %v", tc.name, got, tc.done)
		}
		got := dmWaitStuck(tc.st)
		if (tc.stuck == "") != (got == "") || !strings.Contains(got, tc.stuck) {
			t.Errorf("%s: stuck %q, want %q", tc.name, got, tc.stuck)
		}
	}
}

package copyset

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
)

// TestTrailingBytes: a compaction keeps the fewer of TrailingLogs entries
// and TrailingBytes bytes of entries, never less than a pin holds, and a
// reload of the bounds takes effect at the next compaction.
func TestTrailingBytes(t *testing.T) {
	const trailing = 8 << 10 // about 8 entries of proposeBig
	s, n := startSingleWith(t, t.TempDir(), NewGroupID(1, 1), func(o *RaftOptions) {
		o.TrailingLogs, o.TrailingBytes = 1000, trailing
		o.MaxPinnedBytes = 64 << 10 // fine samples of the entry sizes (logsize.go)
	})
	defer s.stop()
	ctx := context.Background()
	last := proposeBig(t, n, 40)
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	kept := func() uint64 { return last + 1 - firstIndex(t, n) }
	if k := kept(); k > trailing/1000 || k < trailing/1000-2 {
		t.Fatalf("%d entries of ~1 KiB kept after a snapshot (last %d), want about %d", k, last, trailing/1000)
	}
	if st := n.Status(); st.LogBytes > trailing || st.LogBytes < trailing/2 {
		t.Fatalf("log bytes %d, want about %d", st.LogBytes, trailing)
	}

	// A pin further back than the trailing bytes keeps its entries.
	p := last - 2
	pin, err := n.PinLog("test", p)
	if err != nil {
		t.Fatal(err)
	}
	last = proposeBig(t, n, 20)
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if first := firstIndex(t, n); first != p {
		t.Fatalf("first index %d with a pin at %d", first, p)
	}
	pin.Release()

	// The entries bound is the smaller one now.
	if err := n.ReloadRaft(RaftReload{TrailingLogs: 3}); err != nil {
		t.Fatal(err)
	}
	if got := n.RaftSettings(); got.TrailingLogs != 3 || got.TrailingBytes != trailing {
		t.Fatalf("settings after reload %+v", got)
	}
	last = proposeBig(t, n, 5)
	if err := n.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if k := kept(); k != 3 {
		t.Fatalf("%d entries kept with trailing logs 3 (last %d)", k, last)
	}
}

// TestSnapshotBytes: once the entries stored since the last snapshot hold
// SnapshotBytes, the replica takes a snapshot by itself (raft's entry
// threshold and interval never fire here) and compacts its log; a reload
// of the bound applies to the entries stored next.
func TestSnapshotBytes(t *testing.T) {
	s, n := startSingleWith(t, t.TempDir(), NewGroupID(1, 1), func(o *RaftOptions) {
		o.SnapshotBytes, o.TrailingBytes = 16<<10, 4<<10
		o.MaxPinnedBytes = 64 << 10
	})
	defer s.stop()
	proposeBig(t, n, 10) // ~10 KiB: below the bound
	if st := n.Status(); st.SnapshotsByBytes != 0 {
		t.Fatalf("%d snapshots after 10 KiB of entries", st.SnapshotsByBytes)
	}
	last := proposeBig(t, n, 10)
	if err := testwait.For(10*time.Second, func() error {
		if st := n.Status(); st.SnapshotsByBytes != 1 || st.FirstIndex < last-8 {
			return fmt.Errorf("%d snapshots by bytes, first index %d (last %d)", st.SnapshotsByBytes, st.FirstIndex, last)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.ReloadRaft(RaftReload{SnapshotBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	proposeBig(t, n, 40)
	if st := n.Status(); st.SnapshotsByBytes != 1 {
		t.Fatalf("%d snapshots by bytes after raising the bound", st.SnapshotsByBytes)
	}
}

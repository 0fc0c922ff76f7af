package disagg

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	coprocessor "github.com/chunkraft/chunkraft/proto/kvproto/coprocessor"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
)

// Page ids split back into chunk and block.
func TestPageID(t *testing.T) {
	for _, c := range []struct {
		chunk uint64
		block uint32
	}{{0, 0}, {1, 4095}, {1 << 40, 7}} {
		if ch, b := SplitPageID(PageID(c.chunk, c.block)); ch != c.chunk || b != c.block {
			t.Errorf("PageID(%d, %d) splits into %d, %d", c.chunk, c.block, ch, b)
		}
	}
}

// Region ranges are chunk ids as 8-byte big-endian keys.
func TestChunkRanges(t *testing.T) {
	be := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	r, err := chunkRanges(&coprocessor.RegionInfo{Ranges: []*coprocessor.KeyRange{{Start: be(3), End: be(9)}, {Start: be(20)}}})
	if err != nil || len(r) != 2 || r[0].GetLo() != 3 || r[0].GetHi() != 9 || r[1].GetLo() != 20 || r[1].GetHi() != 0 {
		t.Fatalf("ranges %v %v", r, err)
	}
	if r, err := chunkRanges(&coprocessor.RegionInfo{}); err != nil || len(r) != 1 || r[0].GetLo() != 0 || r[0].GetHi() != 0 {
		t.Fatalf("no ranges: %v %v", r, err)
	}
	for _, bad := range []*coprocessor.KeyRange{{Start: []byte("abc")}, {Start: be(5), End: be(5)}, {End: []byte{1}}} {
		if _, err := chunkRanges(&coprocessor.RegionInfo{Ranges: []*coprocessor.KeyRange{bad}}); err == nil {
			t.Errorf("range %v accepted", bad)
		}
	}
}

// A task is its meta's identity fields: the same meta, the same key.
func TestTaskKey(t *testing.T) {
	a := taskKey(&dpb.DisaggTaskMeta{StartTs: 1, TaskId: 2, ExecutorId: "x"})
	if a != taskKey(&dpb.DisaggTaskMeta{StartTs: 1, TaskId: 2, ExecutorId: "x"}) || a == taskKey(&dpb.DisaggTaskMeta{StartTs: 1, TaskId: 3, ExecutorId: "x"}) {
		t.Fatal("task keys do not follow the meta")
	}
}

// The bounds are checked.
func TestViewConfigValidate(t *testing.T) {
	if err := DefaultViewConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	c := DefaultViewConfig()
	c.PacketBytes = 10
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "packet_bytes") {
		t.Fatalf("packet_bytes 10: %v", err)
	}
	c = DefaultViewConfig()
	c.CancelTimeout = 0
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cancel_timeout") {
		t.Fatalf("cancel_timeout 0: %v", err)
	}
}

// A key's lock is exclusive, a wait ends with its context, and an entry
// goes with its last holder or waiter.
func TestKeyLocks(t *testing.T) {
	var l keyLocks[string]
	unlock, err := l.lock(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.lock(t.Context(), "b")
	if err != nil {
		t.Fatalf("another key: %v", err)
	}
	other()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.lock(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a held key: %v", err)
	}
	unlock()
	unlock() // once
	again, err := l.lock(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	again()
	if len(l.locks) != 0 {
		t.Fatalf("%d entries left", len(l.locks))
	}
}

package chunkserver

import (
	"testing"

	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// TestLogPinMetrics: a pin on a copyset shows on its server's registry as
// one pin holding the entries from it to the last index, next to the
// configured bound; releasing it brings the figures back to 0.
func TestLogPinMetrics(t *testing.T) {
	c := startTestCluster(t, 3, func(cfg *Config) { cfg.Raft.MaxPinnedEntries, cfg.Sync.MaxRetainedBytes = 1000, 5<<20 })
	l := c.Leader(t)
	want := func(got map[string]map[string]float64, name string, v float64) {
		t.Helper()
		if g, ok := got[name][""]; !ok || g != v {
			t.Fatalf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	got := c.scrape(t, l)
	for _, name := range []string{"chunkraft_log_pins", "chunkraft_log_pin_max_lag_entries", "chunkraft_log_pin_max_lag_bytes", "chunkraft_log_pinned_entries", "chunkraft_log_pins_capped_total"} {
		want(got, name, 0)
	}
	want(got, "chunkraft_max_pinned_entries", 1000)
	want(got, "chunkraft_max_retained_bytes", 5<<20)

	n := c.Node(l)
	c.Write(t, 1, 1, 0, block(1), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	at := n.Status().CommittedIndex
	pin, err := n.PinLog("test", at)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c.Write(t, 1, 1, 0, block(byte(i+2)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	lag := float64(n.Status().LastIndex + 1 - at)
	got = c.scrape(t, l)
	want(got, "chunkraft_log_pins", 1)
	want(got, "chunkraft_log_pin_max_lag_entries", lag)
	want(got, "chunkraft_log_pinned_entries", lag)
	// At least the 3 writes after the pin; at most the 4 from it, plus the
	// counting's precision (a sample gap, 1/256 of the bound, and an entry).
	w := float64(len(block(1)))
	if b := got["chunkraft_log_pin_max_lag_bytes"][""]; b < 3*w || b > 5*w+(5<<20)/256+4096 {
		t.Fatalf("chunkraft_log_pin_max_lag_bytes = %v, want about the 4 writes of %v bytes pinned", b, w)
	}
	pin.Release()
	got = c.scrape(t, l)
	want(got, "chunkraft_log_pins", 0)
	want(got, "chunkraft_log_pin_max_lag_entries", 0)
}

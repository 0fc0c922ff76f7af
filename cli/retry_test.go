package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// refusedBound is the upper bound a test allows for a command against
// servers that all refuse connections: refusedGrace plus a generous margin
// for a loaded machine (it is a behaviour bound, not a performance figure).
const refusedBound = 5 * time.Second

// TestEveryServerRefusingFailsFast: when every server refuses connections,
// leader-routed, per-server and leader-finding calls fail within about
// refusedGrace, not at the 15 s timeout, and name the servers.
func TestEveryServerRefusingFailsFast(t *testing.T) {
	dead := []string{deadAddr(t), deadAddr(t), deadAddr(t)}
	c := newTestClient(t, dead, 15*time.Second, time.Second)
	ctx := context.Background()
	sorted := slices.Sorted(slices.Values(dead))
	want := "every server refuses connections: " + strings.Join(sorted, ", ")

	for name, call := range map[string]func() error{
		"write": func() error { return c.WriteChunk(ctx, testChunk, 0, block("x"), 1) },
		"get leader": func() error {
			_, err := c.GetLeader(ctx, testChunk.CopysetID)
			return err
		},
		"transfer leader": func() error {
			_, err := c.TransferLeader(ctx, testChunk.CopysetID, dead[1])
			return err
		},
		"config set": func() error {
			_, err := c.Config(ctx, ConfigSet, dead[0], "log_level", "debug")
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := call()
			if d := time.Since(start); d > refusedBound {
				t.Errorf("failed after %s, want within about %s", d, refusedGrace)
			}
			switch {
			case err == nil:
				t.Error("succeeded against closed ports")
			case name == "config set":
				if !strings.Contains(err.Error(), "connection refused") {
					t.Errorf("%v, want it to say connection refused", err)
				}
			case !strings.HasSuffix(err.Error(), ": "+want):
				t.Errorf("%v, want it to end with %q", err, want)
			}
		})
	}
}

// TestPeerAddNamesServersNotAsked: peer add, which needs the copyset's
// current peers, says which servers it could not ask.
func TestPeerAddNamesServersNotAsked(t *testing.T) {
	dead := []string{deadAddr(t), deadAddr(t)}
	_, err := run(t, dead, nil, "peer", "add", "--pool", "1", "--copyset", "1", "--peer", dead[0])
	want := "(2 of 2 servers could not be asked: " + dead[0] + ": unreachable: connection refused; " + dead[1] + ": unreachable: connection refused)"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("peer add with every server down: %v, want it to end with %s", err, want)
	}
}

// TestRefusingOrNotHostingFailsFast: servers that refuse connections and
// servers that do not host the copyset leave nothing to wait for either.
func TestRefusingOrNotHostingFailsFast(t *testing.T) {
	t.Parallel()
	fc := newFakeCluster(t, 2)
	fc.with(func() { fc.notHosted[0], fc.notHosted[1] = true, true })
	dead := deadAddr(t)
	c := newTestClient(t, append(fc.addrs(), dead), 15*time.Second, time.Second)
	start := time.Now()
	_, err := c.ReadChunk(context.Background(), testChunk, 0, BlockSize)
	want := "read pool 1 copyset 3 chunk 9: connection refused by " + dead + "; the other 2 servers do not host copyset 1/3"
	if err == nil || err.Error() != want {
		t.Errorf("read: %v, want %s", err, want)
	}
	if d := time.Since(start); d > refusedBound {
		t.Errorf("failed after %s, want within about %s", d, refusedGrace)
	}
}

// TestUnknownCopysetIsOneLine: a copyset no server hosts is named once,
// with the status a server would give, not once per server.
func TestUnknownCopysetIsOneLine(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.with(func() { fc.notHosted[0], fc.notHosted[1], fc.notHosted[2] = true, true, true })
	_, err := run(t, fc.addrs(), nil, "chunk", "read", "--pool", "1", "--copyset", "999", "--chunk", "1", "--size", "4k")
	want := "read pool 1 copyset 999 chunk 1: COPYSET_NOTEXIST: copyset 1/999 is hosted by none of the 3 servers"
	if err == nil || err.Error() != want {
		t.Errorf("read of an unknown copyset: %v, want %s", err, want)
	}
	if !IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST) {
		t.Errorf("error %v does not carry COPYSET_NOTEXIST", err)
	}
}

// TestRestartingServersAreRetried: refusals shorter than refusedGrace, and
// failures other than refusals however long, are still retried.
func TestRestartingServersAreRetried(t *testing.T) {
	t.Run("every server down briefly", func(t *testing.T) {
		t.Parallel()
		addr := deadAddr(t)
		c := newTestClient(t, []string{addr}, 15*time.Second, time.Second)
		done := make(chan error, 1)
		go func() { done <- c.WriteChunk(context.Background(), testChunk, 0, block("back"), 1) }()
		time.Sleep(refusedGrace / 3)
		newFakeClusterAt(t, []string{addr}) // the server listens again
		if err := <-done; err != nil {
			t.Errorf("write across a restart of %s: %v", addr, err)
		}
	})
	t.Run("leader killed, election longer than the grace", func(t *testing.T) {
		t.Parallel()
		fc := newFakeCluster(t, 3)
		c := newTestClient(t, fc.addrs(), 15*time.Second, time.Second)
		writeRead(t, c, testChunk, "before") // caches server 0 as the leader
		fc.servers[0].gs.Stop()              // its port is closed now
		fc.setLeader(-1)                     // the others have no leader yet
		go func() {
			time.Sleep(refusedGrace + 500*time.Millisecond)
			fc.setLeader(1)
		}()
		start := time.Now()
		writeRead(t, c, testChunk, "after")
		if d := time.Since(start); d < refusedGrace {
			t.Errorf("wrote after %s, before the new leader was elected", d)
		}
	})
}

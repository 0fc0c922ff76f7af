package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

func newTestClient(t *testing.T, servers []string, timeout, attempt time.Duration) *Client {
	t.Helper()
	c, err := New(Options{Servers: servers, Timeout: timeout, AttemptTimeout: attempt})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var testChunk = ChunkID{CopysetID: CopysetID{Pool: 1, Copyset: 3}, Chunk: 9}

func writeRead(t *testing.T, c *Client, id ChunkID, payload string) {
	t.Helper()
	ctx := context.Background()
	data := block(payload)
	if err := c.WriteChunk(ctx, id, 4096, data, 1); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := c.ReadChunk(ctx, id, 4096, uint32(len(data)))
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("read %q, want %q", got, payload)
	}
}

func TestFollowsRedirectHint(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	fc.with(func() { fc.stale, fc.staleTo = 3, 0 }) // first discovery round names server 0
	c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)

	writeRead(t, c, testChunk, "hello")
	if n := fc.count(0, "WriteChunk"); n != 1 {
		t.Errorf("server 0 saw %d writes, want 1 (the redirected one)", n)
	}
	if n := fc.count(2, "WriteChunk"); n != 1 {
		t.Errorf("leader saw %d writes, want 1", n)
	}
	if n := fc.count(1, "WriteChunk"); n != 0 {
		t.Errorf("server 1 saw %d writes, want 0", n)
	}
	if got, _ := c.CachedLeader(testChunk.CopysetID); got != fc.servers[2].id {
		t.Errorf("cached leader %q, want %q", got, fc.servers[2].id)
	}
	// The read went straight to the cached leader.
	if n := fc.count(0, "ReadChunk") + fc.count(1, "ReadChunk"); n != 0 {
		t.Errorf("followers saw %d reads, want 0", n)
	}
}

func TestRetriesAfterLeaderChange(t *testing.T) {
	for _, hints := range []bool{true, false} {
		name := "with-hint"
		if !hints {
			name = "without-hint"
		}
		t.Run(name, func(t *testing.T) {
			fc := newFakeCluster(t, 3)
			fc.setLeader(2)
			c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)
			writeRead(t, c, testChunk, "one")

			fc.with(func() { fc.leader, fc.hints = 1, hints })
			time.Sleep(100 * time.Millisecond) // let discovery calls cut short by the first answer land
			getLeaders := fc.count(0, "GetLeader") + fc.count(1, "GetLeader") + fc.count(2, "GetLeader")
			writeRead(t, c, testChunk, "two")
			if n := fc.count(1, "WriteChunk"); n != 1 {
				t.Errorf("new leader saw %d writes, want 1", n)
			}
			again := fc.count(0, "GetLeader") + fc.count(1, "GetLeader") + fc.count(2, "GetLeader")
			if hints && again != getLeaders {
				t.Errorf("hint given, but the client asked GetLeader %d more times", again-getLeaders)
			}
			if !hints && again == getLeaders {
				t.Errorf("no hint given, but the client did not ask GetLeader again")
			}
		})
	}
}

func TestWaitsForElection(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(-1)
	c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)
	go func() {
		time.Sleep(300 * time.Millisecond)
		fc.setLeader(1)
	}()
	start := time.Now()
	writeRead(t, c, testChunk, "after election")
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("succeeded after %s, before there was a leader", d)
	}
}

func TestCopysetNotExistTriesOthers(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	fc.with(func() {
		fc.notHosted[0] = true
		fc.stale, fc.staleTo = 2, 0 // servers 1 and 2 first name server 0
	})
	servers := append([]string{deadAddr(t)}, fc.addrs()...)
	c := newTestClient(t, servers, 5*time.Second, time.Second)
	writeRead(t, c, testChunk, "elsewhere")
	// Stale answers can outlive the first round (calls cut short when another
	// server answered first), so server 0 may be tried more than once.
	if n := fc.count(0, "WriteChunk"); n < 1 {
		t.Errorf("server 0 saw %d writes, want at least 1 (answered COPYSET_NOTEXIST)", n)
	}
}

func TestNoLeaderFailsWithinDeadline(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(-1)
	c := newTestClient(t, fc.addrs(), 600*time.Millisecond, 200*time.Millisecond)
	start := time.Now()
	err := c.WriteChunk(context.Background(), testChunk, 0, block("x"), 1)
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("write succeeded without a leader")
	}
	if elapsed > 2*time.Second {
		t.Errorf("failed after %s, deadline was 600ms", elapsed)
	}
	var g *GaveUpError
	if !errors.As(err, &g) {
		t.Errorf("error %v is not a GaveUpError", err)
	}
	msg := err.Error()
	for _, want := range []string{"write pool 1 copyset 3 chunk 9", "no leader found", "Unavailable: no leader"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if _, err := c.GetLeader(context.Background(), testChunk.CopysetID); err == nil {
		t.Error("GetLeader succeeded without a leader")
	}
}

func TestInvalidRequestNotRetried(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	fc.with(func() { fc.invalid = true })
	c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)
	err := c.WriteChunk(context.Background(), testChunk, 0, block("refused"), 1)
	if err == nil {
		t.Fatal("write the server refuses succeeded")
	}
	if want := "write pool 1 copyset 3 chunk 9: CHUNK_OP_STATUS_INVALID_REQUEST"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if !IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST) {
		t.Error("IsChunkStatus(INVALID_REQUEST) is false")
	}
	if n := fc.count(1, "WriteChunk"); n != 1 {
		t.Errorf("leader saw %d writes, want exactly 1", n)
	}

	_, err = c.ReadChunk(context.Background(), ChunkID{CopysetID: testChunk.CopysetID, Chunk: 77}, 0, 4096)
	if !IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST) {
		t.Errorf("read of a missing chunk: %v, want CHUNK_NOTEXIST", err)
	}
	if n := fc.count(1, "ReadChunk"); n != 1 {
		t.Errorf("leader saw %d reads, want exactly 1", n)
	}
}

func TestStalledLeaderCostsOneAttempt(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	fc.with(func() { fc.stall[0] = true }) // SIGSTOPped leader: accepts, never answers
	c := newTestClient(t, fc.addrs(), 5*time.Second, 200*time.Millisecond)
	go func() {
		time.Sleep(300 * time.Millisecond)
		fc.setLeader(1) // the others elect a new leader
	}()
	start := time.Now()
	writeRead(t, c, testChunk, "survived")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %s; attempts on the stalled leader should time out after 200ms", d)
	}
}

func TestCallerCancel(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(-1)
	c := newTestClient(t, fc.addrs(), 10*time.Second, time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err := c.WriteChunk(ctx, testChunk, 0, block("x"), 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v, want the caller's deadline", err)
	}
}

func TestDeleteAndInfo(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)
	ctx := context.Background()
	writeRead(t, c, testChunk, "doomed")
	sns, err := c.GetChunkInfo(ctx, testChunk)
	if err != nil || len(sns) != 1 || sns[0] != 1 {
		t.Fatalf("GetChunkInfo = %v, %v; want [1]", sns, err)
	}
	if err := c.DeleteChunk(ctx, testChunk, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadChunk(ctx, testChunk, 0, BlockSize); !IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST) {
		t.Errorf("read after delete: %v", err)
	}
}

func TestTransferLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)
	cs := testChunk.CopysetID
	c.setLeader(cs, fc.servers[1].id) // stale cache: first attempt is refused
	from, err := c.TransferLeader(context.Background(), cs, fc.servers[2].addr())
	if err != nil {
		t.Fatal(err)
	}
	if from != fc.servers[0].id {
		t.Errorf("from %q, want %q", from, fc.servers[0].id)
	}
	if got := fc.getLeader(); got != 2 {
		t.Errorf("leader is server %d, want 2", got)
	}
	if got, _ := c.CachedLeader(cs); got != fc.servers[2].id {
		t.Errorf("cached leader %q, want %q", got, fc.servers[2].id)
	}
	// Already the leader: no RPC.
	before := fc.count(2, "TransferLeader")
	if _, err := c.TransferLeader(context.Background(), cs, fc.servers[2].id); err != nil {
		t.Fatal(err)
	}
	if fc.count(2, "TransferLeader") != before {
		t.Error("transfer to the current leader sent an RPC")
	}
}

func TestCreateCopysets(t *testing.T) {
	fc := newFakeCluster(t, 3)
	c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)
	ctx := context.Background()
	cs := []CopysetID{{1, 1}, {1, 2}, {1, 3}}
	res, err := c.CreateCopysets(ctx, cs, fc.addrs())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if created, existed, failed := r.Counts(); created != 3 || existed != 0 || failed != 0 {
			t.Errorf("%s: created %d existed %d failed %d", r.Copyset, created, existed, failed)
		}
	}
	want := []string{fc.servers[0].id, fc.servers[1].id, fc.servers[2].id}
	fc.with(func() {
		for i := range 3 {
			if got := strings.Join(fc.created[CopysetID{1, 2}][i], ","); got != strings.Join(want, ",") {
				t.Errorf("server %d got peers %s, want %v", i, got, want)
			}
		}
	})
	res, err = c.CreateCopysets(ctx, cs, fc.addrs())
	if err != nil {
		t.Fatal(err)
	}
	if _, existed, _ := res[0].Counts(); existed != 3 {
		t.Errorf("second create: %d peers existed, want 3", existed)
	}

	// One peer down: the copyset is reported failed, within the deadline.
	quick := newTestClient(t, fc.addrs(), 500*time.Millisecond, 200*time.Millisecond)
	r, err := quick.CreateCopyset(ctx, CopysetID{1, 9}, []string{fc.servers[0].addr(), deadAddr(t)})
	if err == nil {
		t.Fatal("create with a dead peer succeeded")
	}
	if created, _, failed := r.Counts(); created != 1 || failed != 1 {
		t.Errorf("created %d failed %d, want 1 and 1", created, failed)
	}
}

func TestCopysetStatusRows(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	fc.with(func() { fc.notHosted[1] = true })
	dead := deadAddr(t)
	c := newTestClient(t, append(fc.addrs(), dead), 5*time.Second, 500*time.Millisecond)
	rows, err := c.CopysetStatus(context.Background(), CopysetID{1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	if !rows[0].Hosted || StateName(rows[0].State) != "Follower" || rows[0].Leader != fc.servers[2].id {
		t.Errorf("row 0: %+v", rows[0])
	}
	if rows[1].Hosted || rows[1].Err != nil {
		t.Errorf("row 1 (not hosted): %+v", rows[1])
	}
	if !rows[2].Hosted || StateName(rows[2].State) != "Leader" || rows[2].Committed != 10 {
		t.Errorf("row 2: %+v", rows[2])
	}
	if rows[3].Err == nil || rows[3].Server != dead {
		t.Errorf("row 3 (dead): %+v", rows[3])
	}
}

func TestLargeChunkRoundTrip(t *testing.T) {
	fc := newFakeCluster(t, 1)
	c := newTestClient(t, fc.addrs(), 10*time.Second, 5*time.Second)
	data := bytes.Repeat([]byte("0123456789abcdef"), fakeChunkSize/16)
	ctx := context.Background()
	if err := c.WriteChunk(ctx, testChunk, 0, data, 1); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadChunk(ctx, testChunk, 0, fakeChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Error("16 MiB round trip differs")
	}
}

func TestNotHostedAnywhereFailsFast(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.with(func() { fc.notHosted[0], fc.notHosted[1], fc.notHosted[2] = true, true, true })
	c := newTestClient(t, fc.addrs(), 10*time.Second, time.Second)
	start := time.Now()
	err := c.WriteChunk(context.Background(), testChunk, 0, block("x"), 1)
	if err == nil || err.Error() != "write pool 1 copyset 3 chunk 9: COPYSET_NOTEXIST: copyset 1/3 is hosted by none of the 3 servers" {
		t.Fatalf("write to a copyset no server hosts: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %s; every server said NotFound, so there is nothing to wait for", d)
	}
}

package cli

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

func TestParseCloneLocation(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want CloneLocation
		bad  string // part of the error
	}{
		{in: "1/3/9:0@cs", want: CloneLocation{Kind: LocationCS, Source: ChunkID{CopysetID{1, 3}, 9}}},
		{in: "2/16/77:8192@cs", want: CloneLocation{Kind: LocationCS, Source: ChunkID{CopysetID{2, 16}, 77}, Offset: 8192}},
		{in: "vol/chunk-1@s3", want: CloneLocation{Kind: LocationS3, Object: "vol/chunk-1"}},
		{in: "a@b@s3", want: CloneLocation{Kind: LocationS3, Object: "a@b"}},
		{in: "a:b@s3", want: CloneLocation{Kind: LocationS3, Object: "a:b"}},
		{in: "", bad: "empty location"},
		{in: "1/3/9:0", bad: "no @cs or @s3 suffix"},
		{in: "1/3/9:0@nfs", bad: `unknown kind "nfs"`},
		{in: "1/3:0@cs", bad: "want <pool>/<copyset>/<chunkId>:<offset>@cs"},
		{in: "1/3/9/1:0@cs", bad: "want <pool>/<copyset>/<chunkId>:<offset>@cs"},
		{in: "1/3/9@cs", bad: "no :<offset>"},
		{in: "1/3/9:x@cs", bad: `offset "x" is not a number`},
		{in: "1/3/9:100@cs", bad: "multiple of 4096"},
		{in: "1/3/9:16777216@cs", bad: "below 16 MiB"},
		{in: "x/3/9:0@cs", bad: "must be numbers"},
		{in: "1/4294967296/9:0@cs", bad: "must be numbers"},
		{in: "@s3", bad: "invalid object name: empty"},
		{in: "../etc@s3", bad: `".." element`},
		{in: "a//b@s3", bad: "empty element"},
		{in: "/a@s3", bad: "starts with '/'"},
		{in: "a\n@s3", bad: "control character"},
		{in: strings.Repeat("a", 3001) + "@s3", bad: "max 3000"},
	} {
		got, err := ParseCloneLocation(tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("ParseCloneLocation(%.40q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.bad)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseCloneLocation(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if got.String() != tc.in {
			t.Errorf("CloneLocation(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestCompareHashes(t *testing.T) {
	ok := func(h string) ReplicaHash {
		return ReplicaHash{Hosted: true, Replied: true, Hash: h, Applied: 10, HasApplied: true}
	}
	at := func(h string, applied int64) ReplicaHash {
		return ReplicaHash{Hosted: true, Replied: true, Hash: h, Applied: applied, HasApplied: true}
	}
	noIndex := func(h string) ReplicaHash { return ReplicaHash{Hosted: true, Replied: true, Hash: h} }
	absent := ReplicaHash{Replied: true, Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_COPYSET_NOTEXIST}
	failed := ReplicaHash{Hosted: true, Err: errors.New("down")}
	for _, tc := range []struct {
		name       string
		rows       []ReplicaHash
		consistent bool
		hash       string
		mismatch   []bool
		unsettled  bool
	}{
		{"agree", []ReplicaHash{ok("1"), ok("1"), ok("1")}, true, "1", []bool{false, false, false}, false},
		{"one differs", []ReplicaHash{ok("1"), ok("2"), ok("1")}, false, "1", []bool{false, true, false}, false},
		{"tie", []ReplicaHash{ok("1"), absent, ok("2")}, false, "", []bool{true, false, true}, false},
		{"all differ", []ReplicaHash{ok("1"), ok("2"), ok("3")}, false, "", []bool{true, true, true}, false},
		{"not hosted ignored", []ReplicaHash{absent, ok("1"), ok("1")}, true, "1", []bool{false, false, false}, false},
		{"a failure is not consistent", []ReplicaHash{ok("1"), failed, ok("1")}, false, "1", []bool{false, false, false}, false},
		{"nobody hosts it", []ReplicaHash{absent, absent}, false, "", []bool{false, false}, false},
		// Replicas that differ at different applied indices are not called
		// different: the followers have not applied the leader's last write.
		{"followers behind", []ReplicaHash{at("2", 11), at("1", 10), at("1", 10)}, false, "1", []bool{false, false, false}, true},
		{"two at one index differ", []ReplicaHash{at("2", 11), at("1", 11), at("1", 10)}, false, "1", []bool{true, false, false}, false},
		{"equal at different indices", []ReplicaHash{at("1", 11), at("1", 10)}, true, "1", []bool{false, false}, false},
		{"no index reported", []ReplicaHash{noIndex("1"), noIndex("2"), noIndex("1")}, false, "1", []bool{false, false, false}, true},
	} {
		hc := CompareHashes(tc.rows)
		if hc.Consistent != tc.consistent || hc.Hash != tc.hash || !reflect.DeepEqual(hc.Mismatch, tc.mismatch) || hc.Unsettled != tc.unsettled {
			t.Errorf("%s: %+v; want consistent %v hash %q mismatch %v", tc.name, hc, tc.consistent, tc.hash, tc.mismatch)
		}
	}
}

// The new leader-routed ops use the same leader discovery, redirects and
// caching as WriteChunk.
func TestNewOpsFollowLeader(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	fc.with(func() { fc.stale, fc.staleTo = 3, 0 }) // the first round names server 0
	c := newTestClient(t, fc.addrs(), 5*time.Second, time.Second)
	ctx := context.Background()
	src := ChunkID{CopysetID: testChunk.CopysetID, Chunk: 1}
	clone := ChunkID{CopysetID: testChunk.CopysetID, Chunk: 2}

	if err := c.CreateCloneChunk(ctx, clone, "1/3/1:0@cs", 1, 0); err != nil {
		t.Fatal(err)
	}
	if n0, n2 := fc.count(0, "CreateCloneChunk"), fc.count(2, "CreateCloneChunk"); n0 != 1 || n2 != 1 {
		t.Errorf("CreateCloneChunk calls: server 0 %d (redirected), leader %d; want 1 and 1", n0, n2)
	}
	if err := c.RecoverChunk(ctx, clone, 0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteChunk(ctx, src, 0, block("v1"), 1); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteChunkFenced(ctx, src, 0, block("v2"), 2, Fence{FileID: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadChunkSnapshot(ctx, src, 1, 0, BlockSize)
	if err != nil || !bytes.Equal(got, block("v1")) {
		t.Fatalf("ReadChunkSnapshot = %q, %v; want v1", got, err)
	}
	if sns, err := c.GetChunkInfo(ctx, src); err != nil || !reflect.DeepEqual(sns, []uint64{2, 1}) {
		t.Errorf("GetChunkInfo = %v, %v; want [2 1]", sns, err)
	}
	if err := c.DeleteChunkSnapshotOrCorrectSn(ctx, src, 2); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteChunkFenced(ctx, src, 0, Fence{FileID: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"RecoverChunk", "WriteChunk", "ReadChunkSnapshot", "DeleteChunkSnapshotOrCorrectSn", "DeleteChunk"} {
		if n := fc.count(0, m) + fc.count(1, m); n != 0 {
			t.Errorf("followers saw %d %s calls; the leader was cached", n, m)
		}
	}
	// A bad location never reaches a server.
	before := totalCalls(fc, "CreateCloneChunk")
	if err := c.CreateCloneChunk(ctx, clone, "nope", 1, 0); err == nil || !strings.HasPrefix(err.Error(), "clone pool 1 copyset 3 chunk 2: bad location") {
		t.Errorf("bad location: %v", err)
	}
	if totalCalls(fc, "CreateCloneChunk") != before {
		t.Error("a bad location was sent")
	}
}

func TestUpdateEpochAndHashesPerServer(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(-1) // per-server calls need no leader
	fc.with(func() { fc.stall[1] = true })
	c := newTestClient(t, fc.addrs(), 800*time.Millisecond, 200*time.Millisecond)
	ctx := context.Background()

	start := time.Now()
	rows, err := c.UpdateEpoch(ctx, 7, 4)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("UpdateEpoch took %s with an 800ms timeout", d)
	}
	if err == nil || !strings.Contains(err.Error(), "failed on 1 of 3 servers: "+fc.servers[1].addr()+": gave up after") {
		t.Errorf("UpdateEpoch with a stalled server: %v", err)
	}
	if len(rows) != 3 || rows[0].Err != nil || !rows[0].Replied || rows[1].Replied || rows[1].Err == nil || rows[2].Err != nil {
		t.Errorf("rows: %+v", rows)
	}
	var g *GaveUpError
	if !errors.As(rows[1].Err, &g) {
		t.Errorf("stalled server error %v is not a GaveUpError", rows[1].Err)
	}
	if n := fc.count(1, "UpdateEpoch"); n < 2 {
		t.Errorf("stalled server was asked %d times, want retries", n)
	}

	fc.with(func() { fc.stall[1] = false })
	hashes, err := c.ChunkHashes(ctx, testChunk, 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range hashes {
		if !h.Hosted || !h.Replied || h.Hash != "0" || h.Err != nil || h.Server != fc.servers[i].addr() {
			t.Errorf("hash row %d: %+v", i, h)
		}
	}
	if hc := CompareHashes(hashes); !hc.Consistent || hc.Replicas != 3 {
		t.Errorf("CompareHashes: %+v", hc)
	}
	// A final status other than SUCCESS is a failed row.
	hashes, _ = c.ChunkHashes(ctx, testChunk, 0, 0)
	if !IsChunkStatus(hashes[0].Err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST) || !hashes[0].Hosted {
		t.Errorf("hash with length 0: %+v", hashes[0])
	}
}

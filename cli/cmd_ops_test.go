package cli

import (
	"bytes"
	"encoding/json"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// chunkArgs are the --pool/--copyset/--chunk flags of pool 1 copyset 3.
func chunkArgs(chunk int) []string {
	return []string{"--pool", "1", "--copyset", "3", "--chunk", strconv.Itoa(chunk)}
}

func cmdArgs(head []string, chunk int, tail ...string) []string {
	return append(append(append([]string(nil), head...), chunkArgs(chunk)...), tail...)
}

func totalCalls(fc *fakeCluster, method string) int {
	n := 0
	for i := range fc.servers {
		n += fc.count(i, method)
	}
	return n
}

func TestCommandEpochFence(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	srv := fc.addrs()
	write := []string{"chunk", "write"}

	out := mustRun(t, srv, nil, "epoch", "update", "--file-id", "5", "--epoch", "2")
	if n := strings.Count(out, "CHUNK_OP_STATUS_SUCCESS"); n != 3 || !strings.HasPrefix(out, "SERVER") {
		t.Errorf("epoch update output:\n%s", out)
	}
	fc.with(func() {
		for i := range 3 {
			if got := fc.epochs[i][5]; got != 2 {
				t.Errorf("server %d holds epoch %d of file 5, want 2", i, got)
			}
		}
	})

	// An older epoch is refused, once, and the status is named.
	_, err := run(t, srv, block("old"), cmdArgs(write, 9, "--file-id", "5", "--epoch", "1")...)
	if err == nil || !strings.HasPrefix(err.Error(), "write pool 1 copyset 3 chunk 9: CHUNK_OP_STATUS_EPOCH_TOO_OLD") {
		t.Fatalf("fenced write with an old epoch: %v", err)
	}
	if !IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD) {
		t.Errorf("error %v does not carry EPOCH_TOO_OLD", err)
	}
	if n := totalCalls(fc, "WriteChunk"); n != 1 {
		t.Errorf("%d WriteChunk calls, want 1 (EPOCH_TOO_OLD is final)", n)
	}
	fc.with(func() {
		if _, ok := fc.chunks[ChunkID{CopysetID: CopysetID{1, 3}, Chunk: 9}]; ok {
			t.Error("the refused write created the chunk")
		}
	})

	// The current epoch passes; both fields go on the wire.
	out = mustRun(t, srv, block("new"), append([]string{"-o", "json"}, cmdArgs(write, 9, "--file-id", "5", "--epoch", "2")...)...)
	var j chunkIOJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Fence == nil || *j.Fence != (Fence{FileID: 5, Epoch: 2}) {
		t.Errorf("fenced write json: %v\n%s", err, out)
	}
	if r := fc.lastRequest("WriteChunk"); r.FileId == nil || r.GetFileId() != 5 || r.Epoch == nil || r.GetEpoch() != 2 {
		t.Errorf("write request fileId %v epoch %v, want 5 and 2", r.FileId, r.Epoch)
	}
	out = mustRun(t, srv, block("new"), cmdArgs(write, 9, "--file-id", "5", "--epoch", "3")...)
	if !strings.Contains(out, "FILE-ID") || !strings.Contains(out, "EPOCH") {
		t.Errorf("fenced write table:\n%s", out)
	}
	// Without the flags, no fence is sent.
	mustRun(t, srv, block("free"), cmdArgs(write, 9)...)
	if r := fc.lastRequest("WriteChunk"); r.FileId != nil || r.Epoch != nil {
		t.Errorf("unfenced write sent fileId %v epoch %v", r.FileId, r.Epoch)
	}

	// Delete is fenced the same way.
	_, err = run(t, srv, nil, cmdArgs([]string{"chunk", "delete"}, 9, "--file-id", "5", "--epoch", "1")...)
	if err == nil || !strings.Contains(err.Error(), "CHUNK_OP_STATUS_EPOCH_TOO_OLD") {
		t.Fatalf("fenced delete with an old epoch: %v", err)
	}
	mustRun(t, srv, nil, cmdArgs([]string{"chunk", "delete"}, 9, "--file-id", "5", "--epoch", "2")...)
	if r := fc.lastRequest("DeleteChunk"); r.GetFileId() != 5 || r.GetEpoch() != 2 {
		t.Errorf("delete request fileId %v epoch %v", r.FileId, r.Epoch)
	}
}

func TestCommandEpochUpdateRefused(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.with(func() { fc.epochs[1][5] = 3 }) // server 1 already has a newer epoch
	srv := fc.addrs()

	out, err := run(t, srv, nil, "epoch", "update", "--file-id", "5", "--epoch", "2")
	if err == nil {
		t.Fatal("epoch update refused by a server succeeded")
	}
	want := "update epoch of file 5 to 2: failed on 1 of 3 servers: " + srv[1] + ": CHUNK_OP_STATUS_EPOCH_TOO_OLD"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[2], srv[1]) || !strings.Contains(lines[2], "EPOCH_TOO_OLD") ||
		!strings.Contains(lines[1], "SUCCESS") || !strings.Contains(lines[3], "SUCCESS") {
		t.Errorf("table:\n%s", out)
	}
	fc.with(func() {
		if fc.epochs[0][5] != 2 || fc.epochs[2][5] != 2 || fc.epochs[1][5] != 3 {
			t.Errorf("epochs after update: %d %d %d, want 2 3 2", fc.epochs[0][5], fc.epochs[1][5], fc.epochs[2][5])
		}
	})

	// JSON, and an unreachable server (retried until --timeout).
	dead := deadAddr(t)
	out, err = run(t, append(srv, dead), nil, "-o", "json", "--timeout", "500ms", "--attempt-timeout", "200ms",
		"epoch", "update", "--file-id", "6", "--epoch", "1")
	if err == nil || !strings.Contains(err.Error(), dead+": gave up after") {
		t.Errorf("epoch update with a dead server: %v", err)
	}
	var j epochUpdateJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.FileID != 6 || j.Epoch != 1 || len(j.Servers) != 4 {
		t.Fatalf("epoch update json: %v\n%s", err, out)
	}
	for i, s := range j.Servers[:3] {
		if s.Status != "CHUNK_OP_STATUS_SUCCESS" || s.Error != "" || s.Server != srv[i] {
			t.Errorf("server %d: %+v", i, s)
		}
	}
	if s := j.Servers[3]; s.Server != dead || s.Status != "" || !strings.Contains(s.Error, "unreachable") {
		t.Errorf("dead server: %+v", s)
	}
}

func TestCommandSnapshots(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(2)
	srv := fc.addrs()
	v1, v2 := bytes.Repeat([]byte{1}, 8192), bytes.Repeat([]byte{2}, 4096)

	mustRun(t, srv, v1, cmdArgs([]string{"chunk", "write"}, 9, "--sn", "1")...)
	mustRun(t, srv, v2, cmdArgs([]string{"chunk", "write"}, 9, "--sn", "2", "--offset", "4k")...)

	out := mustRun(t, srv, nil, cmdArgs([]string{"chunk", "info"}, 9)...)
	if !strings.Contains(out, "[2 1]") {
		t.Errorf("chunk info after a COW write:\n%s", out)
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "info"}, 9)...)
	var info chunkInfoJSON
	if err := json.Unmarshal([]byte(out), &info); err != nil || !info.Exists || len(info.Sn) != 2 || info.Sn[0] != 2 || info.Sn[1] != 1 {
		t.Errorf("chunk info json: %v\n%s", err, out)
	}

	// The old version, raw on stdout; the chunk itself has the new bytes.
	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "snapshot-read"}, 9, "--sn", "1", "--size", "8k")...)
	if !bytes.Equal([]byte(out), v1) {
		t.Errorf("snapshot-read returned %d bytes, not the sn 1 version", len(out))
	}
	if r := fc.lastRequest("ReadChunkSnapshot"); r.GetSn() != 1 || r.GetOffset() != 0 || r.GetSize() != 8192 {
		t.Errorf("snapshot read request: %v", r)
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "read"}, 9, "--offset", "4k", "--size", "4k")...)
	if !bytes.Equal([]byte(out), v2) {
		t.Error("chunk read does not return the sn 2 bytes")
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "snapshot-read"}, 9, "--sn", "1", "--offset", "4k", "--size", "4k")...)
	var j chunkIOJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || !bytes.Equal(j.Data, v1[:4096]) || j.Sn != 1 || j.Offset != 4096 {
		t.Errorf("snapshot-read json: %v\n%s", err, out)
	}
	dst := filepath.Join(t.TempDir(), "snap")
	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "snapshot-read"}, 9, "--sn", "1", "--size", "8k", "--out", dst)...)
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, v1) || !strings.Contains(out, dst) || !strings.Contains(out, "SN") {
		t.Errorf("snapshot-read --out:\n%s", out)
	}
	_, err := run(t, srv, nil, cmdArgs([]string{"chunk", "snapshot-read"}, 9, "--sn", "7", "--size", "4k")...)
	if err == nil || err.Error() != "read snapshot sn 7 of pool 1 copyset 3 chunk 9: CHUNK_OP_STATUS_CHUNK_NOTEXIST" {
		t.Errorf("snapshot-read of a missing version: %v", err)
	}

	// An older sn is BACKWARD: final, one attempt.
	before := totalCalls(fc, "WriteChunk")
	_, err = run(t, srv, block("x"), cmdArgs([]string{"chunk", "write"}, 9, "--sn", "1")...)
	if !IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_BACKWARD) {
		t.Errorf("write with an older sn: %v", err)
	}
	if n := totalCalls(fc, "WriteChunk") - before; n != 1 {
		t.Errorf("%d WriteChunk calls for a BACKWARD write, want 1", n)
	}

	// delete-snapshot drops the snapshot.
	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "delete-snapshot"}, 9, "--corrected-sn", "2")...)
	if !strings.Contains(out, "CORRECTED-SN") || !strings.Contains(out, "done") {
		t.Errorf("delete-snapshot output:\n%s", out)
	}
	r := fc.lastRequest("DeleteChunkSnapshotOrCorrectSn")
	if r.GetOpType() != chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_DELETE_SNAP || r.CorrectedSn == nil || r.GetCorrectedSn() != 2 {
		t.Errorf("delete-snapshot request: %v", r)
	}
	if out := mustRun(t, srv, nil, cmdArgs([]string{"chunk", "info"}, 9)...); !strings.Contains(out, "[2]") {
		t.Errorf("chunk info after delete-snapshot:\n%s", out)
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "delete-snapshot"}, 9, "--corrected-sn", "0")...)
	var ds deleteSnapshotJSON
	if err := json.Unmarshal([]byte(out), &ds); err != nil || ds.CorrectedSn != 0 || ds.Chunk != 9 {
		t.Errorf("delete-snapshot json: %v\n%s", err, out)
	}
	if r := fc.lastRequest("DeleteChunkSnapshotOrCorrectSn"); r.CorrectedSn == nil {
		t.Error("--corrected-sn 0 was not sent")
	}

	// A missing chunk: [] and said so; JSON exists=false; exit 0.
	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "info"}, 77)...)
	if !strings.Contains(out, "[] (chunk does not exist)") {
		t.Errorf("chunk info of a missing chunk:\n%s", out)
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "info"}, 77)...)
	info = chunkInfoJSON{}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Exists || info.Sn == nil || len(info.Sn) != 0 {
		t.Errorf("chunk info json of a missing chunk: %v\n%s", err, out)
	}
}

func TestCommandCloneRecover(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(0)
	srv := fc.addrs()
	src := make([]byte, 16384)
	for i := range src {
		src[i] = byte(i / 7)
	}
	mustRun(t, srv, src, cmdArgs([]string{"chunk", "write"}, 9)...)

	out := mustRun(t, srv, nil, cmdArgs([]string{"chunk", "clone"}, 10, "--location", "1/3/9:0@cs")...)
	if !strings.Contains(out, "LOCATION") || !strings.Contains(out, "1/3/9:0@cs") {
		t.Errorf("clone output:\n%s", out)
	}
	r := fc.lastRequest("CreateCloneChunk")
	if r.GetOpType() != chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_CREATE_CLONE || r.GetSn() != 1 || r.CorrectedSn == nil ||
		r.GetCorrectedSn() != 0 || r.GetSize() != 16<<20 || r.GetLocation() != "1/3/9:0@cs" || r.GetChunkId() != 10 {
		t.Errorf("clone request: %v", r)
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "read"}, 10, "--size", "16k")...)
	if !bytes.Equal([]byte(out), src) {
		t.Error("clone does not read the source's bytes")
	}
	// Idempotent; a different source is CHUNK_EXIST.
	mustRun(t, srv, nil, cmdArgs([]string{"chunk", "clone"}, 10, "--location", "1/3/9:0@cs")...)
	_, err := run(t, srv, nil, cmdArgs([]string{"chunk", "clone"}, 10, "--location", "1/3/9:4096@cs")...)
	if err == nil || err.Error() != "clone pool 1 copyset 3 chunk 10: CHUNK_OP_STATUS_CHUNK_EXIST" {
		t.Errorf("clone over another clone: %v", err)
	}

	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "clone"}, 11, "--location", "vol/img-1@s3", "--sn", "3", "--corrected-sn", "2")...)
	var cj cloneJSON
	if err := json.Unmarshal([]byte(out), &cj); err != nil || cj.Location != "vol/img-1@s3" || cj.Sn != 3 || cj.CorrectedSn != 2 || cj.Size != 16<<20 {
		t.Errorf("clone json: %v\n%s", err, out)
	}
	if r := fc.lastRequest("CreateCloneChunk"); r.GetSn() != 3 || r.GetCorrectedSn() != 2 || r.GetLocation() != "vol/img-1@s3" {
		t.Errorf("s3 clone request: %v", r)
	}

	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "recover"}, 10, "--offset", "4k", "--size", "8k")...)
	if !strings.Contains(out, "recovered") {
		t.Errorf("recover output:\n%s", out)
	}
	r = fc.lastRequest("RecoverChunk")
	if r.GetOpType() != chunkserverpb.CHUNK_OP_TYPE_CHUNK_OP_RECOVER || r.GetOffset() != 4096 || r.GetSize() != 8192 || r.GetChunkId() != 10 {
		t.Errorf("recover request: %v", r)
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "recover"}, 10, "--size", "4k")...)
	var rj recoverJSON
	if err := json.Unmarshal([]byte(out), &rj); err != nil || rj.Size != 4096 || rj.Offset != 0 || rj.Result != "recovered" {
		t.Errorf("recover json: %v\n%s", err, out)
	}
	_, err = run(t, srv, nil, cmdArgs([]string{"chunk", "recover"}, 99, "--size", "4k")...)
	if err == nil || err.Error() != "recover pool 1 copyset 3 chunk 99: CHUNK_OP_STATUS_CHUNK_NOTEXIST" {
		t.Errorf("recover of a missing chunk: %v", err)
	}
}

func crc32c(b []byte) string {
	return strconv.FormatUint(uint64(crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))), 10)
}

func TestCommandHash(t *testing.T) {
	fc := newFakeCluster(t, 3)
	fc.setLeader(1)
	srv := fc.addrs()
	data := block(strings.Repeat("chunkraft", 1000))
	mustRun(t, srv, data, cmdArgs([]string{"chunk", "write"}, 9)...)
	whole := make([]byte, 16<<20)
	copy(whole, data)

	out := mustRun(t, srv, nil, cmdArgs([]string{"chunk", "hash"}, 9)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Count(out, crc32c(whole)) != 3 || strings.Count(out, " ok") != 3 {
		t.Errorf("hash of consistent replicas:\n%s", out)
	}
	out = mustRun(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "hash"}, 9, "--offset", "4k", "--length", "4k")...)
	var j chunkHashJSON
	if err := json.Unmarshal([]byte(out), &j); err != nil || !j.Consistent || len(j.Replicas) != 3 || j.Offset != 4096 || j.Length != 4096 {
		t.Fatalf("hash json: %v\n%s", err, out)
	}
	for i, r := range j.Replicas {
		if r.Server != srv[i] || r.Status != "CHUNK_OP_STATUS_SUCCESS" || r.Hash != crc32c(whole[4096:8192]) || r.Mismatch {
			t.Errorf("replica %d: %+v", i, r)
		}
	}

	// Server 2's copy differs: marked, named, non-zero exit.
	fc.with(func() { fc.corrupt[2] = true })
	out, err := run(t, srv, nil, cmdArgs([]string{"chunk", "hash"}, 9)...)
	if err == nil || !strings.Contains(err.Error(), "replicas disagree") || !strings.Contains(err.Error(), "mismatch on "+srv[2]) {
		t.Errorf("hash with a diverged replica: %v", err)
	}
	if err != nil && strings.Contains(err.Error(), srv[0]) {
		t.Errorf("error names a good replica: %v", err)
	}
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.Contains(lines[3], "MISMATCH") || strings.Contains(lines[1]+lines[2], "MISMATCH") {
		t.Errorf("hash table with a diverged replica:\n%s", out)
	}
	out, _ = run(t, srv, nil, cmdArgs([]string{"-o", "json", "chunk", "hash"}, 9)...)
	j = chunkHashJSON{}
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Consistent || !j.Replicas[2].Mismatch || j.Replicas[0].Mismatch || j.Replicas[1].Mismatch {
		t.Errorf("hash json with a diverged replica: %v\n%s", err, out)
	}

	// Server 0 does not host the copyset: skipped. Two replicas that disagree
	// have no majority: both are marked.
	fc.with(func() { fc.notHosted[0] = true })
	out, err = run(t, srv, nil, cmdArgs([]string{"chunk", "hash"}, 9)...)
	if err == nil || strings.Contains(out, srv[0]) || strings.Count(out, "MISMATCH") != 2 {
		t.Errorf("hash with no majority (%v):\n%s", err, out)
	}
	fc.with(func() { fc.corrupt[2] = false })
	out = mustRun(t, srv, nil, cmdArgs([]string{"chunk", "hash"}, 9)...)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || strings.Contains(out, srv[0]) {
		t.Errorf("hash with a server not hosting the copyset:\n%s", out)
	}

	// A missing chunk hashes to 0 everywhere; that is consistent.
	out = mustRun(t, srv, nil, "-o", "json", "chunk", "hash", "--pool", "1", "--copyset", "3", "--chunk", "404")
	j = chunkHashJSON{}
	if err := json.Unmarshal([]byte(out), &j); err != nil || !j.Consistent || len(j.Replicas) != 2 || j.Replicas[0].Hash != "0" {
		t.Errorf("hash of a missing chunk: %v\n%s", err, out)
	}

	// An unreachable server may hold a replica: reported, non-zero exit.
	dead := deadAddr(t)
	out, err = run(t, append(srv, dead), nil, "--timeout", "500ms", "--attempt-timeout", "200ms", "chunk", "hash", "--pool", "1", "--copyset", "3", "--chunk", "9")
	if err == nil || !strings.Contains(err.Error(), "1 of 4 servers could not be compared; first: "+dead) {
		t.Errorf("hash with a dead server: %v", err)
	}
	if !strings.Contains(out, "ERROR") || !strings.Contains(out, dead) {
		t.Errorf("hash table with a dead server:\n%s", out)
	}

	// Nobody hosts it.
	fc.with(func() { fc.notHosted[1], fc.notHosted[2] = true, true })
	_, err = run(t, srv, nil, cmdArgs([]string{"chunk", "hash"}, 9)...)
	if err == nil || !strings.Contains(err.Error(), "no server in --servers hosts pool 1 copyset 3") {
		t.Errorf("hash of a copyset nobody hosts: %v", err)
	}
}

func TestCommandOpsFlags(t *testing.T) {
	fc := newFakeCluster(t, 1)
	srv := fc.addrs()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{cmdArgs([]string{"chunk", "write"}, 1, "--file-id", "5"), "--file-id needs --epoch"},
		{cmdArgs([]string{"chunk", "write"}, 1, "--epoch", "5"), "--epoch needs --file-id"},
		{cmdArgs([]string{"chunk", "delete"}, 1, "--epoch", "5"), "--epoch needs --file-id"},
		{cmdArgs([]string{"chunk", "snapshot-read"}, 1, "--size", "4k"), `"sn" not set`},
		{cmdArgs([]string{"chunk", "snapshot-read"}, 1, "--sn", "0", "--size", "4k"), "--sn: must be > 0"},
		{cmdArgs([]string{"chunk", "snapshot-read"}, 1, "--sn", "1"), `"size" not set`},
		{cmdArgs([]string{"chunk", "snapshot-read"}, 1, "--sn", "1", "--size", "4x"), "--size: bad size"},
		{cmdArgs([]string{"chunk", "delete-snapshot"}, 1), `"corrected-sn" not set`},
		{cmdArgs([]string{"chunk", "clone"}, 1), `"location" not set`},
		{cmdArgs([]string{"chunk", "clone"}, 1, "--location", "1/3/9:0@cs", "--sn", "0"), "--sn: must be > 0"},
		{cmdArgs([]string{"chunk", "clone"}, 1, "--location", "1/3/9:0"), "--location: bad location"},
		{cmdArgs([]string{"chunk", "clone"}, 1, "--location", "1/3/9:100@cs"), "multiple of 4096"},
		{cmdArgs([]string{"chunk", "clone"}, 1, "--location", "1/3:0@cs"), "--location: bad location"},
		{cmdArgs([]string{"chunk", "clone"}, 1, "--location", "../x@s3"), `".." element`},
		{cmdArgs([]string{"chunk", "recover"}, 1), `"size" not set`},
		{cmdArgs([]string{"chunk", "hash"}, 1, "--length", "5g"), "--length"},
		{[]string{"epoch", "update", "--file-id", "1"}, `"epoch" not set`},
		{[]string{"epoch", "update", "--epoch", "1"}, `"file-id" not set`},
	} {
		_, err := run(t, srv, []byte("x"), tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("chunkctl %v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
	for _, m := range []string{"WriteChunk", "DeleteChunk", "ReadChunkSnapshot", "CreateCloneChunk", "RecoverChunk", "GetChunkHash", "UpdateEpoch", "GetLeader"} {
		if n := fc.count(0, m); n != 0 {
			t.Errorf("a usage error sent %d %s calls", n, m)
		}
	}
}

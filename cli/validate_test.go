package cli

import (
	"strings"
	"testing"
)

// TestBadInputNothingSent: chunk I/O that breaks a rule of the chunk
// geometry, an sn of 0 or --size is refused with one line naming the rule,
// and nothing is sent to any server.
func TestBadInputNothingSent(t *testing.T) {
	fc := newFakeCluster(t, 3)
	srv := fc.addrs()
	const w, r = "write pool 1 copyset 3 chunk 9: ", "read pool 1 copyset 3 chunk 9: "
	page := block("x")
	for _, tc := range []struct {
		stdin []byte
		args  []string
		want  string
	}{
		{page, cmdArgs([]string{"chunk", "write"}, 9, "--offset", "100"), w + "offset 100 is not a multiple of 4096"},
		{[]byte("x"), cmdArgs([]string{"chunk", "write"}, 9), w + "size 1 is not a multiple of 4096"},
		{page, cmdArgs([]string{"chunk", "write"}, 9, "--offset", "16m"), w + "offset 16777216 + size 4096 ends at 16781312, beyond the end of the 16 MiB chunk (16777216)"},
		{page, cmdArgs([]string{"chunk", "write"}, 9, "--sn", "0"), w + "sn 0: sequence numbers start at 1"},
		{page, cmdArgs([]string{"chunk", "write"}, 9, "--size", "8k"), "--size 8192, but stdin holds 4096 bytes"},
		{page, cmdArgs([]string{"chunk", "write"}, 9, "--size", "0"), "--size 0: nothing to write"},
		{make([]byte, ChunkSize+BlockSize), cmdArgs([]string{"chunk", "write"}, 9), "stdin: more than 16777216 bytes, the 16 MiB of a chunk; write it in pieces"},
		{nil, cmdArgs([]string{"chunk", "read"}, 9, "--size", "0"), r + "size is 0: want a multiple of 4096, at most the 16 MiB chunk"},
		{nil, cmdArgs([]string{"chunk", "read"}, 9, "--size", "100"), r + "size 100 is not a multiple of 4096"},
		{nil, cmdArgs([]string{"chunk", "read"}, 9, "--size", "17m"), r + "size 17825792 is larger than the 16 MiB chunk"},
		{nil, cmdArgs([]string{"chunk", "read"}, 9, "--offset", "12k", "--size", "16m"), r + "offset 12288 + size 16777216 ends at 16789504, beyond the end of the 16 MiB chunk (16777216)"},
		{nil, cmdArgs([]string{"chunk", "snapshot-read"}, 9, "--sn", "1", "--offset", "1", "--size", "4k"), "read snapshot sn 1 of pool 1 copyset 3 chunk 9: offset 1 is not a multiple of 4096"},
		{nil, cmdArgs([]string{"chunk", "recover"}, 9, "--size", "6k"), "recover pool 1 copyset 3 chunk 9: size 6144 is not a multiple of 4096"},
		{nil, cmdArgs([]string{"chunk", "hash"}, 9, "--offset", "4k"), "hash pool 1 copyset 3 chunk 9: offset 4096 + length 16777216 ends at 16781312, beyond the end of the 16 MiB chunk (16777216)"},
		{nil, cmdArgs([]string{"scan", "repair"}, 9, "--offset", "4k", "--length", "1k"), "repair pool 1 copyset 3 chunk 9: length 1024 is not a multiple of 4096"},
		{nil, []string{"chunk", "info", "--pool", "1", "--copyset", "1-3", "--chunk", "9"}, `invalid argument "1-3" for "--copyset" flag: this command takes one copyset id, not a list or a range`},
		{nil, []string{"cluster", "status", "--copyset", "5-3"}, `--copyset: range "5-3" ends before it starts`},
	} {
		_, err := run(t, srv, tc.stdin, tc.args...)
		if err == nil || err.Error() != tc.want {
			t.Errorf("chunkctl %s: error %v, want %s", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	for _, m := range []string{"WriteChunk", "ReadChunk", "ReadChunkSnapshot", "RecoverChunk", "GetChunkHash", "GetChunkInfo", "GetLeader", "GetCopysetStatus"} {
		if n := totalCalls(fc, m); n != 0 {
			t.Errorf("bad input sent %d %s calls", n, m)
		}
	}
}

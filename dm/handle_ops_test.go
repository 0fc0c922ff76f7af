package dm

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
)

func TestParseChunkOps(t *testing.T) {
	block := bytes.Repeat([]byte{7}, 4096)
	b64 := base64.StdEncoding.EncodeToString(block)
	ok := []struct {
		in   []string
		want []*pb.ChunkOp
	}{
		{[]string{"noop"}, []*pb.ChunkOp{{Kind: pb.ChunkOp_NOOP}}},
		{[]string{"write 7 8192 4096 sn=3 data=zero"}, []*pb.ChunkOp{{Kind: pb.ChunkOp_WRITE, Chunk: 7, Offset: 8192, Length: 4096, Sn: 3}}},
		{[]string{"write 7 0 4096 sn=3 csn=2 data=b64:" + b64}, []*pb.ChunkOp{{Kind: pb.ChunkOp_WRITE, Chunk: 7, Length: 4096, Sn: 3, CorrectedSn: 2, Data: block}}},
		{[]string{"  delete 9 sn=4 ; delete-snap 9 csn=5;"}, []*pb.ChunkOp{{Kind: pb.ChunkOp_DELETE, Chunk: 9, Sn: 4}, {Kind: pb.ChunkOp_DELETE_SNAP, Chunk: 9, CorrectedSn: 5}}},
		{[]string{"noop", "delete 1 sn=0"}, []*pb.ChunkOp{{Kind: pb.ChunkOp_NOOP}, {Kind: pb.ChunkOp_DELETE, Chunk: 1}}},
	}
	for _, tc := range ok {
		got, err := ParseChunkOps(tc.in)
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("%q: %v, %v", tc.in, got, err)
			continue
		}
		for i := range got {
			if !proto.Equal(got[i], tc.want[i]) {
				t.Errorf("%q: op %d is %v, want %v", tc.in, i, got[i], tc.want[i])
			}
		}
	}
	bad := []struct{ in, want string }{
		{"erase 7", `column 1: unknown op "erase"`},
		{"write 7 0 4096 sn=x data=zero", `column 19: sn "x" is not a number`},
		{"write 7 100 4096 sn=1 data=zero", "column 9: offset 100 is not a multiple of 4096"},
		{"write 7 0 100 sn=1 data=zero", "column 11: length 100"},
		{"write 7 0 131072 sn=1 data=zero", "at most 65536"},
		{"write 7 16773120 8192 sn=1 data=zero", "past the chunk"},
		{"write 7 0 4096 data=zero", "sn=<n> is missing"},
		{"write 7 0 4096 sn=1", "data=zero|b64:<base64> is missing"},
		{"write 7 0 4096 sn=1 data=b64:AAAA", "data is 3 bytes, the length says 4096"},
		{"write 7 0 4096 sn=1 data=b64:!!", "bad base64"},
		{"write 7 0 4096 sn=1 data=ones", `data "ones"`},
		{"write 7 0 4096 sn=1 sn=2 data=zero", "column 21: sn given twice"},
		{"write 7 0 4096 sn=1 color=red data=zero", `column 21: unknown key "color"`},
		{"write 7 0", "too few fields"},
		{"delete 7", "too few fields"},
		{"delete x sn=1", `column 8: chunk "x" is not a number`},
		{"delete 7 csn=1", `unknown key "csn"`},
		{"delete-snap 7 sn=1", `unknown key "sn"`},
		{"noop now", "column 6: noop takes nothing"},
		{"noop; erase 1", `column 7: unknown op "erase"`},
	}
	for _, tc := range bad {
		if _, err := ParseChunkOps([]string{tc.in}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParseChunkOps([]string{"noop", "erase 1"}); err == nil || !strings.HasPrefix(err.Error(), "op 2: ") {
		t.Errorf("the second of two ops: %v", err)
	}
}

func TestParsePosition(t *testing.T) {
	p, err := ParsePosition("1/3:1042.2")
	if err != nil || p.Pool != 1 || p.Copyset != 3 || p.At.GetIndex() != 1042 || p.At.GetOp() != 2 || p.String() != "1/3:1042.2" {
		t.Fatalf("1/3:1042.2: %v %v", p, err)
	}
	for in, want := range map[string]string{
		"1/3":        "no ':'",
		"13:1042.2":  "no '/'",
		"1/3:1042":   "no '.'",
		"0/3:1042.0": "not a pool id",
		"1/x:1042.0": "not a copyset id",
		"1/3:0.0":    "not a log index",
		"1/3:9.-1":   "not an op position",
	} {
		if _, err := ParsePosition(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

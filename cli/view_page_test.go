package cli

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// FuzzDecodePage: decodePage accepts exactly what proto.Unmarshal accepts
// into a Page and gives the same page.
func FuzzDecodePage(f *testing.F) {
	for _, p := range []*vpb.Page{
		{},
		{PageId: 5<<20 | 3, ChunkId: 5, Offset: 3 * 4096, Data: bytes.Repeat([]byte{7}, 4096), Crc32C: 0xdeadbeef},
		{PageId: 1, Data: []byte{}},
	} {
		b, err := proto.Marshal(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, b...)) // every field twice: the last wins
	}
	f.Add([]byte{0x08})                   // a tag without its value
	f.Add([]byte{0x22, 0x05, 1, 2})       // data shorter than its length
	f.Add([]byte{0x30, 0x01, 0x08, 0x02}) // an unknown field, then page_id
	f.Add([]byte{0x0d, 1, 2, 3, 4})       // page_id as fixed32: skipped
	f.Fuzz(func(t *testing.T, b []byte) {
		want := &vpb.Page{}
		werr := proto.Unmarshal(b, want)
		got := &vpb.Page{}
		gerr := decodePage(b, got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("proto.Unmarshal: %v, decodePage: %v", werr, gerr)
		}
		if werr != nil {
			return
		}
		if got.GetPageId() != want.GetPageId() || got.GetChunkId() != want.GetChunkId() || got.GetOffset() != want.GetOffset() ||
			!bytes.Equal(got.GetData(), want.GetData()) || got.GetCrc32C() != want.GetCrc32C() {
			t.Fatalf("decodePage = %v, proto.Unmarshal = %v", got, want)
		}
	})
}

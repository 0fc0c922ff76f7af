package cli

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// decodePage decodes an encoded Page (a PagesPacket's page) into p as
// proto.Unmarshal does, except that p.Data aliases b instead of a copy:
// a fetch decodes every page of a segment, and the copy with its
// allocation cost chunkctl more than the crc check. Unknown fields, and
// known ones of another wire type, are skipped; a repeated field keeps
// its last value.
func decodePage(b []byte, p *vpb.Page) error {
	p.Reset()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		if !num.IsValid() {
			return fmt.Errorf("page: invalid field number %d", num)
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			p.PageId, n = protowire.ConsumeVarint(b)
		case num == 2 && typ == protowire.VarintType:
			p.ChunkId, n = protowire.ConsumeVarint(b)
		case num == 3 && typ == protowire.VarintType:
			var v uint64
			v, n = protowire.ConsumeVarint(b)
			p.Offset = uint32(v)
		case num == 4 && typ == protowire.BytesType:
			p.Data, n = protowire.ConsumeBytes(b)
		case num == 5 && typ == protowire.Fixed32Type:
			p.Crc32C, n = protowire.ConsumeFixed32(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
	}
	return nil
}

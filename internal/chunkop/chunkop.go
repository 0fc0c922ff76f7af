package chunkop

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// PreImage is the pre-image a write op carries for the read views of its
// chunk (chunkstore/datastore.PreImage): blocks from block Lo on, as the
// leader read them, and the newest view of the chunk then.
type PreImage struct {
	ViewSeq uint64
	Lo      uint32
	Data    []byte
}

// preFlag, set in the request length, says a pre-image trailer follows
// the data.
const preFlag = 1 << 31

// ownerFlag, set in the request length, says an owner trailer ends the
// op (after the pre-image trailer, if any).
const ownerFlag = 1 << 30

// preFooter is the trailer's fixed end: ViewSeq, Lo, len(Data).
const preFooter = 16

// ownerFooter is the owner trailer's fixed end: len(owner).
const ownerFooter = 2

// MaxOwner bounds an owner's length in bytes.
const MaxOwner = 1<<16 - 1

// Encode builds the replicated op for req carrying data, and pre when it
// is not nil. The request is marshalled without its data field (set aside
// for the call, so the payload is copied once, into the op) and req is
// left as it was.
func Encode(req *pb.ChunkRequest, data []byte, pre *PreImage) ([]byte, error) {
	return EncodeOwned(req, data, pre, "")
}

// EncodeOwned is Encode for an op proposed by owner, the holder of a
// write fence (chunkstore/write_fence.go): the op carries the owner, so
// that every replica decides alike whether the fence in force at its
// index lets it through. An empty owner is Encode's op, byte for byte.
func EncodeOwned(req *pb.ChunkRequest, data []byte, pre *PreImage, owner string) ([]byte, error) {
	if pre != nil || owner != "" {
		parts, err := EncodeOwnedParts(req, data, pre, owner)
		if err != nil {
			return nil, err
		}
		return bytes.Join(parts, nil), nil
	}
	head, err := encodeHead(req, 0)
	if err != nil || len(data) == 0 {
		return head, err
	}
	// bytes.Join allocates exactly the op without clearing it first, where a
	// make would zero a 1 MiB payload only to overwrite it.
	return bytes.Join([][]byte{head, data}, nil), nil
}

// EncodeOwnedParts is EncodeOwned's op as the parts it is the
// concatenation of, the first holding its op header; data and pre.Data
// are parts of their own, not copied (copyset.Node.ProposeGroupParts
// copies them once, into the entry).
func EncodeOwnedParts(req *pb.ChunkRequest, data []byte, pre *PreImage, owner string) ([][]byte, error) {
	if len(owner) > MaxOwner {
		return nil, fmt.Errorf("encode chunk op: owner of %d bytes, at most %d", len(owner), MaxOwner)
	}
	var flags uint32
	if pre != nil {
		flags |= preFlag
	}
	if owner != "" {
		flags |= ownerFlag
	}
	head, err := encodeHead(req, flags)
	if err != nil {
		return nil, err
	}
	parts := append(make([][]byte, 0, 6), head)
	if len(data) > 0 || flags != 0 {
		parts = append(parts, data)
	}
	if pre != nil {
		foot := binary.BigEndian.AppendUint64(make([]byte, 0, preFooter), pre.ViewSeq)
		foot = binary.BigEndian.AppendUint32(foot, pre.Lo)
		foot = binary.BigEndian.AppendUint32(foot, uint32(len(pre.Data)))
		parts = append(parts, pre.Data, foot)
	}
	if owner != "" {
		parts = append(parts, []byte(owner), binary.BigEndian.AppendUint16(nil, uint16(len(owner))))
	}
	return parts, nil
}

// encodeHead is an op's op header, its request's length word with flags,
// and the request marshalled without its data field (set aside for the
// call: req is left as it was).
func encodeHead(req *pb.ChunkRequest, flags uint32) ([]byte, error) {
	saved := req.Data
	req.Data = nil
	size := proto.Size(req)
	head := make([]byte, copyset.OpHeaderLen+4, copyset.OpHeaderLen+4+size)
	head, err := proto.MarshalOptions{}.MarshalAppend(head, req)
	req.Data = saved
	if err != nil {
		return nil, fmt.Errorf("encode chunk op: %w", err)
	}
	copyset.PutOpHeader(head, kinds.Chunk)
	binary.BigEndian.PutUint32(head[copyset.OpHeaderLen:], uint32(len(head)-copyset.OpHeaderLen-4)|flags)
	return head, nil
}

// Decode is the inverse of Encode on the payload (without the
// copyset op header). data and pre.Data alias payload; pre is nil when
// the op carries none. An owner the op carries is left out (DecodeOwned).
func Decode(payload []byte) (*pb.ChunkRequest, []byte, *PreImage, error) {
	req, data, pre, _, err := DecodeOwned(payload)
	return req, data, pre, err
}

// DecodeOwned is Decode that also returns the op's owner (EncodeOwned;
// "" when it carries none).
func DecodeOwned(payload []byte) (*pb.ChunkRequest, []byte, *PreImage, string, error) {
	if len(payload) < 4 {
		return nil, nil, nil, "", fmt.Errorf("decode chunk op: %d bytes, want at least 4", len(payload))
	}
	n := binary.BigEndian.Uint32(payload)
	withPre, withOwner := n&preFlag != 0, n&ownerFlag != 0
	n &^= preFlag | ownerFlag
	if uint64(n) > uint64(len(payload)-4) {
		return nil, nil, nil, "", fmt.Errorf("decode chunk op: request length %d exceeds payload %d", n, len(payload)-4)
	}
	req := &pb.ChunkRequest{}
	if err := proto.Unmarshal(payload[4:4+n], req); err != nil {
		return nil, nil, nil, "", fmt.Errorf("decode chunk op: %w", err)
	}
	data := payload[4+n:]
	var owner string
	if withOwner {
		if len(data) < ownerFooter {
			return nil, nil, nil, "", fmt.Errorf("decode chunk op: %d bytes after the request, want an owner trailer of at least %d", len(data), ownerFooter)
		}
		end := len(data) - ownerFooter
		on := int(binary.BigEndian.Uint16(data[end:]))
		if on == 0 || on > end {
			return nil, nil, nil, "", fmt.Errorf("decode chunk op: owner of %d bytes, %d after the request", on, end)
		}
		owner, data = string(data[end-on:end]), data[:end-on]
	}
	if !withPre {
		return req, data, nil, owner, nil
	}
	if len(data) < preFooter {
		return nil, nil, nil, "", fmt.Errorf("decode chunk op: %d bytes after the request, want a pre-image trailer of at least %d", len(data), preFooter)
	}
	foot := data[len(data)-preFooter:]
	pre := &PreImage{ViewSeq: binary.BigEndian.Uint64(foot), Lo: binary.BigEndian.Uint32(foot[8:])}
	pn := binary.BigEndian.Uint32(foot[12:])
	if uint64(pn) > uint64(len(data)-preFooter) {
		return nil, nil, nil, "", fmt.Errorf("decode chunk op: pre-image of %d bytes exceeds the %d after the request", pn, len(data)-preFooter)
	}
	end := len(data) - preFooter
	pre.Data = data[end-int(pn) : end]
	return req, data[:end-int(pn)], pre, owner, nil
}

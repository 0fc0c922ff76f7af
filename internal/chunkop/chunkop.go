package chunkop

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/encoding/protowire"
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
	return decodeOwned(payload, nil)
}

// A Decoder decodes ops as DecodeOwned does into a request of its own that
// it reuses, whose optional scalar fields point to values held in the
// Decoder: decoding them allocates nothing, where a fresh request takes an
// allocation per field. The request is proto.Equal to DecodeOwned's and
// valid until the Decoder's next decode. A Decoder is not safe for
// concurrent use; its zero value is ready.
type Decoder struct {
	req  pb.ChunkRequest
	vals decoderVals
}

// decoderVals holds the values a Decoder's request points to.
type decoderVals struct {
	logicPoolID, copysetID, offset, size, retryTimes                                       uint32
	chunkID, appliedIndex, sn, correctedSn, cloneOffset, timeoutMs, retryUs, fileID, epoch uint64
	readMetaPage                                                                           bool
}

// DecodeOwned is the package's DecodeOwned with the request held by d.
func (d *Decoder) DecodeOwned(payload []byte) (*pb.ChunkRequest, []byte, *PreImage, string, error) {
	return decodeOwned(payload, d)
}

// Field numbers of ChunkRequest (curve/chunkserver/chunk.proto) whose
// values a Decoder holds, and of its required fields.
const (
	fOpType, fLogicPoolID, fCopysetID, fChunkID, fAppliedIndex, fOffset, fSize = 1, 2, 3, 4, 5, 6, 7
	fSn, fCorrectedSn, fCloneOffset, fTimeoutMs, fRetryTimes, fRetryUs         = 9, 10, 13, 14, 15, 16
	fReadMetaPage, fFileID, fEpoch                                             = 17, 18, 19

	requiredFields = 1<<fOpType | 1<<fLogicPoolID | 1<<fCopysetID | 1<<fChunkID
)

// unmarshal decodes b into d's request. Its scalar fields are pointed at
// d's values before a merging proto.Unmarshal, which then writes through
// them instead of allocating, and the fields b does not carry (with a
// varint) are set back to nil. A b without every required field, or that
// the merge refuses, is decoded by proto.Unmarshal into a fresh request,
// which reports it exactly as DecodeOwned does.
func (d *Decoder) unmarshal(b []byte) (*pb.ChunkRequest, error) {
	present, ok := varintFields(b)
	if !ok || present&requiredFields != requiredFields {
		return unmarshalRequest(b)
	}
	r, v := &d.req, &d.vals
	r.Reset()
	*v = decoderVals{}
	r.LogicPoolId, r.CopysetId, r.Offset, r.Size, r.SendScanMapRetryTimes = &v.logicPoolID, &v.copysetID, &v.offset, &v.size, &v.retryTimes
	r.ChunkId, r.AppliedIndex, r.Sn, r.CorrectedSn = &v.chunkID, &v.appliedIndex, &v.sn, &v.correctedSn
	r.CloneFileOffset, r.SendScanMapTimeoutMs, r.SendScanMapRetryIntervalUs = &v.cloneOffset, &v.timeoutMs, &v.retryUs
	r.FileId, r.Epoch, r.ReadMetaPage = &v.fileID, &v.epoch, &v.readMetaPage
	if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(b, r); err != nil {
		return unmarshalRequest(b)
	}
	has := func(num int) bool { return present&(1<<num) != 0 }
	if !has(fLogicPoolID) {
		r.LogicPoolId = nil
	}
	if !has(fCopysetID) {
		r.CopysetId = nil
	}
	if !has(fChunkID) {
		r.ChunkId = nil
	}
	if !has(fAppliedIndex) {
		r.AppliedIndex = nil
	}
	if !has(fOffset) {
		r.Offset = nil
	}
	if !has(fSize) {
		r.Size = nil
	}
	if !has(fSn) {
		r.Sn = nil
	}
	if !has(fCorrectedSn) {
		r.CorrectedSn = nil
	}
	if !has(fCloneOffset) {
		r.CloneFileOffset = nil
	}
	if !has(fTimeoutMs) {
		r.SendScanMapTimeoutMs = nil
	}
	if !has(fRetryTimes) {
		r.SendScanMapRetryTimes = nil
	}
	if !has(fRetryUs) {
		r.SendScanMapRetryIntervalUs = nil
	}
	if !has(fReadMetaPage) {
		r.ReadMetaPage = nil
	}
	if !has(fFileID) {
		r.FileId = nil
	}
	if !has(fEpoch) {
		r.Epoch = nil
	}
	return r, nil
}

// varintFields is the set of field numbers below 64 that b, a message's
// encoding, carries with the varint wire type (the only one
// proto.Unmarshal stores in a scalar field of these types; with another,
// the field goes to the unknown fields). ok is false when b is malformed.
func varintFields(b []byte) (present uint64, ok bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
		if typ == protowire.VarintType && num < 64 {
			present |= 1 << num
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return 0, false
		}
		b = b[n:]
	}
	return present, true
}

// unmarshalRequest decodes b into a fresh request.
func unmarshalRequest(b []byte) (*pb.ChunkRequest, error) {
	req := &pb.ChunkRequest{}
	if err := proto.Unmarshal(b, req); err != nil {
		return nil, err
	}
	return req, nil
}

// decodeOwned is DecodeOwned, with the request decoded by d when it is
// not nil.
func decodeOwned(payload []byte, d *Decoder) (*pb.ChunkRequest, []byte, *PreImage, string, error) {
	if len(payload) < 4 {
		return nil, nil, nil, "", fmt.Errorf("decode chunk op: %d bytes, want at least 4", len(payload))
	}
	n := binary.BigEndian.Uint32(payload)
	withPre, withOwner := n&preFlag != 0, n&ownerFlag != 0
	n &^= preFlag | ownerFlag
	if uint64(n) > uint64(len(payload)-4) {
		return nil, nil, nil, "", fmt.Errorf("decode chunk op: request length %d exceeds payload %d", n, len(payload)-4)
	}
	var req *pb.ChunkRequest
	var err error
	if d != nil {
		req, err = d.unmarshal(payload[4 : 4+n])
	} else {
		req, err = unmarshalRequest(payload[4 : 4+n])
	}
	if err != nil {
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

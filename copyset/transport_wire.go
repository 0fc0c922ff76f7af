// The raft transport's wire encoding: wireCodec, the gRPC codec registered
// as "proto", which marshals and parses AppendEntriesRequest by hand
// (aliasing entry payloads instead of copying them) and hands every other
// message to gRPC's default codec. Converting raft's types to the raftpb
// messages is transport_codec.go's.

package copyset

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/chunkraft/chunkraft/internal/grpcbuf"
	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// A zero-copy gRPC codec for the raft transport's AppendEntriesRequest.
//
// gRPC's default proto codec copies every replicated entry twice on its way
// through the transport: Marshal encodes the request (entry payloads
// included) into one contiguous buffer, and Unmarshal's proto.Unmarshal
// copies every bytes field out of the receive buffer. wireCodec replaces the
// default codec process-wide under the same name, "proto" (the vtprotobuf
// pattern), and special-cases only *raftpb.AppendEntriesRequest, alone or
// in the *raftpb.AppendEntriesBatch of the AppendEntriesStream:
//
//   - Marshal hand-encodes the request into exactly the bytes proto.Marshal
//     produces, as a mem.BufferSlice whose large entry payloads are the
//     caller's slices themselves (no copy); only the framing between them is
//     written into a small (pooled) buffer.
//   - Unmarshal hand-parses the received message with entries' Data and
//     Extensions aliasing it: in place when gRPC received it in one
//     well-fitting buffer, else after copying it once into an exact-size
//     allocation. Either buffer is never recycled (grpcbuf.Hold): the
//     entries keep it alive and the GC reclaims it.
//
// Every other message type, and every AppendEntriesRequest input the hand
// parser does not fully understand (unknown fields, unexpected wire types,
// malformed bytes), goes to the original codec, so the wire format and the
// decoded values never differ from gRPC's default codec: peers running the
// default codec, and every other gRPC service of the process, are
// unaffected.

// wireAliasMin is the smallest entry payload (Data or Extensions) Marshal
// sends by reference; smaller ones are copied into the framing buffer, which
// costs less than the extra iovec and buffer bookkeeping of a separate
// segment.
const wireAliasMin = 1 << 10

func init() {
	// This package imports grpc's encoding/proto, so its init (which
	// registers the default codec) ran before this one.
	orig := encoding.GetCodecV2(protoenc.Name)
	if orig == nil {
		panic("copyset: gRPC's default proto codec is not registered")
	}
	encoding.RegisterCodecV2(&wireCodec{orig: orig})
}

// wireCodec is the encoding.CodecV2 registered as "proto" by this package.
// It is stateless apart from orig, the codec it replaced, and so safe for
// concurrent use as gRPC requires.
//
// Invariant: for every message and every input, it produces the same bytes
// and the same decoded values (proto.Equal) as orig; it differs only in
// which memory the results share (see Marshal and Unmarshal).
type wireCodec struct {
	orig encoding.CodecV2
}

// Name implements encoding.CodecV2: the name of gRPC's default codec, which
// wireCodec replaces.
func (c *wireCodec) Name() string { return protoenc.Name }

// Marshal implements encoding.CodecV2. For a *raftpb.AppendEntriesRequest,
// alone or in an AppendEntriesBatch, the returned BufferSlice aliases every entry's Data and Extensions of at
// least wireAliasMin bytes instead of copying them.
//
// Aliasing is safe because raft never mutates a log entry after handing it
// to the transport (entries come from the log cache or the log store and are
// immutable; see transport_codec.go). gRPC's SendMsg returns before the
// HTTP/2 writer has sent the payload: the transport holds the BufferSlice
// (Ref'd) and reads it asynchronously, then Frees it. A mem.SliceBuffer's
// Ref and Free are no-ops, so the aliased slices stay valid simply because
// the BufferSlice references them (the GC keeps them alive) and nobody
// writes to them. The framing segments are slices of one buffer (pooled if
// large) that share its reference count: gRPC's Free of the last segment
// returns it to the pool. A small message's framing, segments and slice
// are one allocation instead (wireFrame), which the GC reclaims.
func (c *wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *raftpb.AppendEntriesRequest:
		if m != nil && !appendEntriesHasUnknown(m) {
			out, err := marshalAppendEntries(m, mem.DefaultBufferPool())
			if err != nil {
				return nil, fmt.Errorf("copyset: marshal AppendEntriesRequest: %w", err)
			}
			return out, nil
		}
	case *raftpb.AppendEntriesBatch:
		if m != nil && !appendBatchHasUnknown(m) {
			out, err := marshalAppendBatch(m, mem.DefaultBufferPool())
			if err != nil {
				return nil, fmt.Errorf("copyset: marshal AppendEntriesBatch: %w", err)
			}
			return out, nil
		}
	}
	return c.orig.Marshal(v)
}

// Unmarshal implements encoding.CodecV2. For a *raftpb.AppendEntriesRequest
// (alone or in an AppendEntriesBatch) it sets entries' Data and Extensions
// to alias the received message (see grpcbuf.Hold) instead of copying them,
// each cap-limited so that an append by a consumer reallocates instead of
// overwriting the next field. Header and leader bytes are copied, since
// raft may keep them long after the entries are gone.
func (c *wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	var parse func(b []byte) (aliased, ok bool)
	switch m := v.(type) {
	case *raftpb.AppendEntriesRequest:
		if m != nil {
			parse = func(b []byte) (bool, bool) { return unmarshalAppendEntries(b, m, nil) }
		}
	case *raftpb.AppendEntriesBatch:
		if m != nil {
			parse = func(b []byte) (bool, bool) { return unmarshalAppendBatch(b, m) }
		}
	}
	if parse == nil {
		return c.orig.Unmarshal(data, v)
	}
	b, ref := grpcbuf.Hold(data)
	aliased, ok := parse(b)
	if ok {
		if ref != nil && !aliased {
			ref.Free() // nothing points into it: let gRPC recycle it
		}
		return nil
	}
	// Not understood: decode the same bytes with the original (copying)
	// codec. proto.Unmarshal resets the message first, so once it returns
	// nothing in it points into b.
	err := c.orig.Unmarshal(data, v)
	if ref != nil {
		ref.Free()
	}
	if err != nil {
		return fmt.Errorf("copyset: unmarshal %T: %w", v, err)
	}
	return nil
}

// appendBatchHasUnknown reports whether m or a request in it carries
// unknown fields, or a request is nil (proto.Marshal's business).
func appendBatchHasUnknown(m *raftpb.AppendEntriesBatch) bool {
	if len(m.ProtoReflect().GetUnknown()) != 0 {
		return true
	}
	for _, r := range m.Requests {
		if r == nil || appendEntriesHasUnknown(r) {
			return true
		}
	}
	return false
}

// appendEntriesHasUnknown reports whether m or a message in it carries
// unknown fields, which proto.Marshal would append and marshalAppendEntries
// does not write.
func appendEntriesHasUnknown(m *raftpb.AppendEntriesRequest) bool {
	if len(m.ProtoReflect().GetUnknown()) != 0 {
		return true
	}
	if m.Header != nil && len(m.Header.ProtoReflect().GetUnknown()) != 0 {
		return true
	}
	for _, l := range m.Entries {
		if l != nil && len(l.ProtoReflect().GetUnknown()) != 0 {
			return true
		}
	}
	return false
}

// Field numbers of chunkraft.raft messages (raft.proto).
const (
	hdrProtocolVersion protowire.Number = 1
	hdrID              protowire.Number = 2
	hdrAddr            protowire.Number = 3

	logIndex      protowire.Number = 1
	logTerm       protowire.Number = 2
	logType       protowire.Number = 3
	logData       protowire.Number = 4
	logExtensions protowire.Number = 5
	logAppendedAt protowire.Number = 6

	aeGroup             protowire.Number = 1
	aeHeader            protowire.Number = 2
	aeTerm              protowire.Number = 3
	aeLeader            protowire.Number = 4
	aePrevLogEntry      protowire.Number = 5
	aePrevLogTerm       protowire.Number = 6
	aeEntries           protowire.Number = 7
	aeLeaderCommitIndex protowire.Number = 8

	abRequests protowire.Number = 1
)

// sizeVarintField is the encoded size of a proto3 varint field: 0 for the
// zero value, which proto3 does not send.
func sizeVarintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// sizeBytesField is the encoded size of a proto3 bytes field of n bytes: 0
// when empty, which proto3 does not send.
func sizeBytesField(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// sizeMessageField is the encoded size of a present message field whose
// body is n bytes (sent even when n is 0).
func sizeMessageField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// headerBodySize is the encoded size of h's fields.
func headerBodySize(h *raftpb.RPCHeader) int {
	return sizeVarintField(hdrProtocolVersion, uint64(h.ProtocolVersion)) +
		sizeBytesField(hdrID, len(h.Id)) +
		sizeBytesField(hdrAddr, len(h.Addr))
}

// logBodySize is the encoded size of l's fields; a nil entry encodes as an
// empty message, as in proto.Marshal.
func logBodySize(l *raftpb.Log) int {
	if l == nil {
		return 0
	}
	return sizeVarintField(logIndex, l.Index) +
		sizeVarintField(logTerm, l.Term) +
		sizeVarintField(logType, uint64(l.Type)) +
		sizeBytesField(logData, len(l.Data)) +
		sizeBytesField(logExtensions, len(l.Extensions)) +
		sizeVarintField(logAppendedAt, uint64(l.AppendedAt))
}

// aliasedLen is how many of b's bytes Marshal sends by reference.
func aliasedLen(b []byte) int {
	if len(b) >= wireAliasMin {
		return len(b)
	}
	return 0
}

// errWireSize reports a disagreement between the size pass and the encoding
// pass of marshalAppendEntries (a bug, never expected).
var errWireSize = errors.New("encoded size differs from computed size")

// wireWriter assembles a BufferSlice from framing bytes, written into one
// buffer of exactly size bytes, interleaved with aliased payloads.
//
// Invariants: buf is the framing buffer's bytes (root's, or frame's)
// truncated to the bytes written so far and is appended to in place (it
// never outgrows size when the size pass is right; finish detects when it
// did); out holds one reference per element; framing bytes before cut are
// in out. Exactly one of root and frame is set.
type wireWriter struct {
	root  mem.Buffer // owns the framing bytes; finish drops its reference
	frame *wireFrame // holds the framing bytes and the segments instead
	size  int        // framing bytes, from the size pass
	buf   []byte
	cut   int
	out   mem.BufferSlice
	err   error
}

// Limits of a message whose BufferSlice is built in a wireFrame: framing
// of at most wireFrameBytes and at most wireFrameSegs segments (four
// aliased payloads with framing around each).
const (
	wireFrameBytes = 256
	wireFrameSegs  = 9
)

// wireFrame is the storage of a small message's whole BufferSlice, one
// allocation: its framing bytes, its segments and the slice's array. The
// GC reclaims it once gRPC drops the BufferSlice.
type wireFrame struct {
	buf  [wireFrameBytes]byte
	segs [wireFrameSegs]wireSeg
	out  [wireFrameSegs]mem.Buffer
}

// wireSeg is one segment of a wireFrame: a mem.SliceBuffer (Ref and Free do
// nothing, the GC owns the bytes) that *wireSeg, by embedding it, also
// makes a mem.Buffer, so a segment goes into the BufferSlice as a pointer
// into the frame instead of a SliceBuffer boxed in an allocation of its
// own.
type wireSeg struct{ mem.SliceBuffer }

var _ mem.Buffer = (*wireSeg)(nil)

// init prepares w for size framing bytes and nAliased aliased payloads.
// A message within the wireFrame limits is built in a frame; other
// framing of at most mem's pooling threshold is a plain allocation, larger
// framing (many small entries) comes from pool.
func (w *wireWriter) init(size, nAliased int, pool mem.BufferPool) {
	if size <= wireFrameBytes && 2*nAliased+1 <= wireFrameSegs {
		f := &wireFrame{}
		*w = wireWriter{frame: f, size: size, buf: f.buf[:0], out: f.out[:0]}
		return
	}
	*w = wireWriter{size: size, out: make(mem.BufferSlice, 0, 2*nAliased+1)}
	if mem.IsBelowBufferPoolingThreshold(size) {
		w.root = mem.SliceBuffer(make([]byte, size))
	} else {
		w.root = mem.NewBuffer(pool.Get(size), pool)
	}
	w.buf = w.root.ReadOnlyData()[:0]
}

// segment returns b as a segment of the BufferSlice: in the frame while
// it has room, else as a SliceBuffer of its own.
func (w *wireWriter) segment(b []byte) mem.Buffer {
	if f := w.frame; f != nil && len(w.out) < len(f.segs) {
		s := &f.segs[len(w.out)]
		s.SliceBuffer = b
		return s
	}
	return mem.SliceBuffer(b)
}

// varint writes a proto3 varint field (nothing for 0).
func (w *wireWriter) varint(num protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	w.buf = protowire.AppendTag(w.buf, num, protowire.VarintType)
	w.buf = protowire.AppendVarint(w.buf, v)
}

// bytes writes a proto3 bytes field (nothing when empty) by copying b into
// the framing.
func (w *wireWriter) bytes(num protowire.Number, b []byte) {
	if len(b) == 0 {
		return
	}
	w.buf = protowire.AppendTag(w.buf, num, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(len(b)))
	w.buf = append(w.buf, b...)
}

// payload writes an entry payload field (nothing when empty), referencing b
// instead of copying it when aliasedLen(b) says so.
func (w *wireWriter) payload(num protowire.Number, b []byte) {
	if aliasedLen(b) == 0 {
		w.bytes(num, b)
		return
	}
	w.buf = protowire.AppendTag(w.buf, num, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(len(b)))
	w.flush()
	w.out = append(w.out, w.segment(b))
}

// message writes the tag and length of a message field whose body (n
// bytes) the caller writes next.
func (w *wireWriter) message(num protowire.Number, n int) {
	w.buf = protowire.AppendTag(w.buf, num, protowire.BytesType)
	w.buf = protowire.AppendVarint(w.buf, uint64(n))
}

// flush appends the framing written since the last cut to out, as a slice
// of root sharing its reference count.
func (w *wireWriter) flush() {
	if w.err != nil {
		return
	}
	end := len(w.buf)
	if end > w.size {
		w.err = errWireSize
		return
	}
	if end > w.cut {
		if w.frame != nil {
			w.out = append(w.out, w.segment(w.buf[w.cut:end:end]))
		} else {
			w.out = append(w.out, w.root.Slice(w.cut, end))
		}
		w.cut = end
	}
}

// finish flushes the rest of the framing, drops the writer's own reference
// to root and returns the message; on error it frees everything.
func (w *wireWriter) finish() (mem.BufferSlice, error) {
	w.flush()
	if w.err == nil && len(w.buf) != w.size {
		w.err = errWireSize
	}
	if w.root != nil {
		w.root.Free()
	}
	if w.err != nil {
		w.out.Free()
		return nil, w.err
	}
	return w.out, nil
}

// aeSize is the size pass of an AppendEntriesRequest's encoding.
type aeSize struct {
	framing  int // bytes written into the framing buffer
	aliased  int // bytes of the payloads sent by reference
	nAliased int // payloads sent by reference
	header   int // the header's body
}

// full is the request's encoded size.
func (s aeSize) full() int { return s.framing + s.aliased }

func sizeAppendEntries(m *raftpb.AppendEntriesRequest) aeSize {
	var s aeSize
	s.framing = sizeVarintField(aeGroup, m.Group)
	if m.Header != nil {
		s.header = headerBodySize(m.Header)
		s.framing += sizeMessageField(aeHeader, s.header)
	}
	s.framing += sizeVarintField(aeTerm, m.Term) +
		sizeBytesField(aeLeader, len(m.Leader)) +
		sizeVarintField(aePrevLogEntry, m.PrevLogEntry) +
		sizeVarintField(aePrevLogTerm, m.PrevLogTerm)
	for _, l := range m.Entries {
		s.framing += sizeMessageField(aeEntries, logBodySize(l))
		if l == nil {
			continue
		}
		for _, b := range [2][]byte{l.Data, l.Extensions} {
			if n := aliasedLen(b); n > 0 {
				s.framing -= n
				s.aliased += n
				s.nAliased++
			}
		}
	}
	s.framing += sizeVarintField(aeLeaderCommitIndex, m.LeaderCommitIndex)
	return s
}

// marshalAppendEntries encodes m exactly as proto.Marshal does (fields in
// field-number order, proto3 zero values omitted, a present Header sent
// even when empty, a nil entry sent as an empty message); m must have no
// unknown fields. Entries' Data and Extensions of at least wireAliasMin
// bytes are referenced, not copied (see wireCodec.Marshal for why that is
// safe); the header's and leader's bytes, small, are always copied.
func marshalAppendEntries(m *raftpb.AppendEntriesRequest, pool mem.BufferPool) (mem.BufferSlice, error) {
	s := sizeAppendEntries(m)
	if s.full() == 0 {
		return nil, nil // the empty message (an aliased field needs a tag)
	}
	var w wireWriter
	w.init(s.framing, s.nAliased, pool)
	w.appendEntries(m, s)
	return w.finish()
}

// marshalAppendBatch encodes m as proto.Marshal does, each request as
// marshalAppendEntries does; m's requests must be non-nil and m and they
// must have no unknown fields.
func marshalAppendBatch(m *raftpb.AppendEntriesBatch, pool mem.BufferPool) (mem.BufferSlice, error) {
	sizes := make([]aeSize, len(m.Requests))
	framing, nAliased := 0, 0
	for i, r := range m.Requests {
		s := sizeAppendEntries(r)
		sizes[i] = s
		framing += sizeMessageField(abRequests, s.full()) - s.aliased
		nAliased += s.nAliased
	}
	if framing == 0 {
		return nil, nil
	}
	var w wireWriter
	w.init(framing, nAliased, pool)
	for i, r := range m.Requests {
		w.message(abRequests, sizes[i].full())
		w.appendEntries(r, sizes[i])
	}
	return w.finish()
}

// appendEntries writes m, whose size pass is s, in field-number order.
func (w *wireWriter) appendEntries(m *raftpb.AppendEntriesRequest, s aeSize) {
	w.varint(aeGroup, m.Group)
	if h := m.Header; h != nil {
		w.message(aeHeader, s.header)
		w.varint(hdrProtocolVersion, uint64(h.ProtocolVersion))
		w.bytes(hdrID, h.Id)
		w.bytes(hdrAddr, h.Addr)
	}
	w.varint(aeTerm, m.Term)
	w.bytes(aeLeader, m.Leader)
	w.varint(aePrevLogEntry, m.PrevLogEntry)
	w.varint(aePrevLogTerm, m.PrevLogTerm)
	for _, l := range m.Entries {
		w.message(aeEntries, logBodySize(l))
		if l == nil {
			continue
		}
		w.varint(logIndex, l.Index)
		w.varint(logTerm, l.Term)
		w.varint(logType, uint64(l.Type))
		w.payload(logData, l.Data)
		w.payload(logExtensions, l.Extensions)
		w.varint(logAppendedAt, uint64(l.AppendedAt))
	}
	w.varint(aeLeaderCommitIndex, m.LeaderCommitIndex)
}

// unmarshalAppendBatch parses b into m (reset first), each request as
// unmarshalAppendEntries does; aliased and ok as there.
func unmarshalAppendBatch(b []byte, m *raftpb.AppendEntriesBatch) (aliased, ok bool) {
	m.Reset()
	n := 0
	walkFields(b, func(num protowire.Number, _ protowire.Type, _ uint64, _ []byte) bool {
		if num == abRequests {
			n++
		}
		return true
	})
	if n > 1 {
		m.Requests = make([]*raftpb.AppendEntriesRequest, 0, n)
	}
	ok = walkFields(b, func(num protowire.Number, typ protowire.Type, _ uint64, p []byte) bool {
		if num != abRequests || typ != protowire.BytesType {
			return false
		}
		w := &aeRequestWire{}
		a, ok := unmarshalAppendEntries(p, &w.req, &w.parts)
		aliased = aliased || a
		if n == 1 {
			w.lone[0] = &w.req
			m.Requests = w.lone[:]
		} else {
			m.Requests = append(m.Requests, &w.req)
		}
		return ok
	})
	return aliased, ok
}

// aeParts is the storage unmarshalAppendEntries fills a request's header,
// its copied bytes when they fit and, when it has one entry (as most
// have), that entry and the array of its entries slice from: one
// allocation for all of them.
type aeParts struct {
	hdr   raftpb.RPCHeader
	log   [1]raftpb.Log
	logs  [1]*raftpb.Log
	bytes [96]byte
}

// aeRequestWire is a request of an AppendEntriesBatch with its parts and,
// for a batch of one request, the array of the batch's requests slice, in
// one allocation.
type aeRequestWire struct {
	req   raftpb.AppendEntriesRequest
	parts aeParts
	lone  [1]*raftpb.AppendEntriesRequest
}

// unmarshalAppendEntries parses b into m (reset first), with entries' Data
// and Extensions aliasing b (cap-limited) and all other bytes fields copied
// (into parts, or one allocation). parts, if not nil, is fresh storage for
// m's header, copied bytes and lone entry. It reports aliased when some
// entry points into b, and ok=false when b holds anything but well-formed
// known fields with their declared wire types: the caller then decodes b
// with proto.Unmarshal instead (m is left in an unspecified state). For
// every b it accepts, m ends up proto.Equal to what proto.Unmarshal
// produces: scalars and bytes fields take the last occurrence, a repeated
// header merges into the first, every entries field appends an entry, and
// an empty bytes field decodes as nil.
func unmarshalAppendEntries(b []byte, m *raftpb.AppendEntriesRequest, parts *aeParts) (aliased, ok bool) {
	m.Reset()
	n, copied, ok := countEntries(b)
	if !ok {
		return false, false
	}
	if parts == nil {
		parts = &aeParts{}
	}
	var backing []raftpb.Log
	switch {
	case n == 1:
		backing, m.Entries = parts.log[:], parts.logs[:0]
	case n > 1:
		backing = make([]raftpb.Log, n)
		m.Entries = make([]*raftpb.Log, 0, n)
	}
	var arena []byte // the copied bytes fields
	switch {
	case copied > len(parts.bytes):
		arena = make([]byte, 0, copied)
	case copied > 0:
		arena = parts.bytes[:0:copied]
	}
	ok = walkFields(b, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) bool {
		switch {
		case typ == protowire.VarintType && num == aeGroup:
			m.Group = v
		case typ == protowire.VarintType && num == aeTerm:
			m.Term = v
		case typ == protowire.VarintType && num == aePrevLogEntry:
			m.PrevLogEntry = v
		case typ == protowire.VarintType && num == aePrevLogTerm:
			m.PrevLogTerm = v
		case typ == protowire.VarintType && num == aeLeaderCommitIndex:
			m.LeaderCommitIndex = v
		case typ == protowire.BytesType && num == aeHeader:
			if m.Header == nil {
				m.Header = &parts.hdr
			}
			return unmarshalHeader(p, m.Header, &arena)
		case typ == protowire.BytesType && num == aeLeader:
			m.Leader = copyInto(&arena, p)
		case typ == protowire.BytesType && num == aeEntries:
			l := &backing[len(m.Entries)]
			a, ok := unmarshalLog(p, l)
			aliased = aliased || a
			m.Entries = append(m.Entries, l)
			return ok
		default:
			return false
		}
		return true
	})
	return aliased, ok
}

// countEntries counts the entries fields of an AppendEntriesRequest
// encoding, so that unmarshalAppendEntries allocates all entries at once,
// and bounds the bytes it copies by the size of the header and leader
// fields. ok is false when walkFields refuses b.
func countEntries(b []byte) (n, copied int, ok bool) {
	ok = walkFields(b, func(num protowire.Number, typ protowire.Type, _ uint64, p []byte) bool {
		if typ == protowire.BytesType {
			switch num {
			case aeEntries:
				n++
			case aeHeader, aeLeader:
				copied += len(p)
			}
		}
		return true
	})
	return n, copied, ok
}

// unmarshalHeader merges the RPCHeader encoded in b into h, copying its
// bytes fields into arena; ok as in unmarshalAppendEntries.
func unmarshalHeader(b []byte, h *raftpb.RPCHeader, arena *[]byte) (ok bool) {
	return walkFields(b, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) bool {
		switch {
		case typ == protowire.VarintType && num == hdrProtocolVersion:
			h.ProtocolVersion = int64(v)
		case typ == protowire.BytesType && num == hdrID:
			h.Id = copyInto(arena, p)
		case typ == protowire.BytesType && num == hdrAddr:
			h.Addr = copyInto(arena, p)
		default:
			return false
		}
		return true
	})
}

// unmarshalLog merges the Log encoded in b into l, with Data and Extensions
// aliasing b; aliased and ok as in unmarshalAppendEntries.
func unmarshalLog(b []byte, l *raftpb.Log) (aliased, ok bool) {
	ok = walkFields(b, func(num protowire.Number, typ protowire.Type, v uint64, p []byte) bool {
		switch {
		case typ == protowire.VarintType && num == logIndex:
			l.Index = v
		case typ == protowire.VarintType && num == logTerm:
			l.Term = v
		case typ == protowire.VarintType && num == logType:
			l.Type = uint32(v)
		case typ == protowire.VarintType && num == logAppendedAt:
			l.AppendedAt = int64(v)
		case typ == protowire.BytesType && num == logData:
			l.Data = aliasBytes(p)
			aliased = aliased || l.Data != nil
		case typ == protowire.BytesType && num == logExtensions:
			l.Extensions = aliasBytes(p)
			aliased = aliased || l.Extensions != nil
		default:
			return false
		}
		return true
	})
	return aliased, ok
}

// walkFields calls fn for each field of the protobuf encoding b, in order,
// with its number and wire type and, for a varint field, its value or, for
// a length-delimited field, its contents (aliasing b). It returns false,
// without looking further, at a malformed field, a field of any other wire
// type, or when fn returns false.
func walkFields(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, p []byte) bool) bool {
	for len(b) > 0 {
		num, typ, tn := protowire.ConsumeTag(b)
		if tn < 0 {
			return false
		}
		b = b[tn:]
		var v uint64
		var p []byte
		var vn int
		switch typ {
		case protowire.VarintType:
			v, vn = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			p, vn = protowire.ConsumeBytes(b)
		default:
			return false
		}
		if vn < 0 || !fn(num, typ, v, p) {
			return false
		}
		b = b[vn:]
	}
	return true
}

// aliasBytes returns v with its capacity cut to its length (so appending to
// it never writes into the bytes that follow in the receive buffer), or nil
// when empty, as proto.Unmarshal decodes an empty proto3 bytes field.
func aliasBytes(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v[:len(v):len(v)]
}

// copyInto copies v as proto.Unmarshal does (nil when empty), appending it
// to arena and returning the copy cap-limited, so that appending to one
// copy never writes into the next.
func copyInto(arena *[]byte, v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	at := len(*arena)
	*arena = append(*arena, v...)
	return (*arena)[at:len(*arena):len(*arena)]
}

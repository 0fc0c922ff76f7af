package sharedlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/klauspost/crc32"
)

// Record framing (little endian):
//
//	[0:4)   uint32 payload length n
//	[4:8)   uint32 crc32c (Castagnoli) over bytes [0:4) and [12:21+n)
//	[8:12)  uint32 link: crc32c of (link of the previous record in the
//	        segment, or the segment's salt for its first record; this
//	        record's crc), both as 4 bytes little endian
//	[12]    record type
//	[13:21) uint64 group id
//	[21:21+n) payload
//
// The crc covers the length, type, group and payload, so a torn or
// overwritten record is detected and recovery stops at the end of the valid
// prefix. The crc is computed by the caller, the link by the shard writer
// when it places the record. The link chains every record to the segment
// incarnation (the salt, random per activation of a segment file) and to all
// records before it: a record left in a recycled file by its previous life,
// or one of a torn batch that lies beyond a record rewritten after a crash,
// does not continue the chain and ends the scan, so segment files can be
// preallocated and reused without truncating their tails.
const (
	recHeaderSize = 21
	recLinkOff    = 8
	recTypeOff    = 12
	recGroupOff   = 13
	// maxRecordPayload bounds a single record (one StoreLogs call).
	maxRecordPayload = 1 << 30
)

type recType uint8

const (
	recEntries recType = 1 // payload: uvarint count, count x (uvarint len, entry)
	recDelete  recType = 2 // payload: uvarint min, uvarint max
	recSet     recType = 3 // payload: uvarint keylen, key, value
	recDrop    recType = 4 // payload: empty
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var errCorrupt = errors.New("sharedlog: corrupt record")

// beginRecord appends a header placeholder for a record of type t.
func beginRecord(buf []byte, t recType, group uint64) []byte {
	var h [recHeaderSize]byte
	h[recTypeOff] = byte(t)
	binary.LittleEndian.PutUint64(h[recGroupOff:recHeaderSize], group)
	return append(buf, h[:]...)
}

// finishRecord fills length and crc of the record that is head followed
// by rest (head starts with the header; the record ends with its payload).
// The link is filled by setLink.
func finishRecord(head []byte, rest ...[]byte) {
	n := len(head)
	for _, p := range rest {
		n += len(p)
	}
	binary.LittleEndian.PutUint32(head[0:4], uint32(n-recHeaderSize))
	crc := recordCRC(head[0:4], head[recTypeOff:])
	for _, p := range rest {
		crc = crc32.Update(crc, castagnoli, p)
	}
	binary.LittleEndian.PutUint32(head[4:8], crc)
}

func recordCRC(length, rest []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, length), castagnoli, rest)
}

// linkCRC is the link of a record whose crc is crc and whose predecessor's
// link (or segment salt) is prev: the CRC-32C of prev and crc, each 4 bytes
// little endian. It is computed byte by byte with castagnoli's table, as
// crc32.Update(0, castagnoli, those 8 bytes) computes it, because a buffer
// handed to crc32.Update escapes to the heap: one allocation per record.
func linkCRC(prev, crc uint32) uint32 {
	c := ^uint32(0)
	for _, w := range [2]uint32{prev, crc} {
		for range 4 {
			c = castagnoli[byte(c)^byte(w)] ^ c>>8
			w >>= 8
		}
	}
	return ^c
}

// setLink chains the finished record at the start of rec to prev and returns
// its link.
func setLink(rec []byte, prev uint32) uint32 {
	l := linkCRC(prev, binary.LittleEndian.Uint32(rec[4:8]))
	binary.LittleEndian.PutUint32(rec[recLinkOff:recLinkOff+4], l)
	return l
}

// entryRef locates one encoded raft.Log inside a record: off is relative to
// the start of the record (its header included), n is the encoded length.
type entryRef struct {
	index uint64
	off   uint32
	n     uint32
}

// op is the decoded, state-changing content of a record.
type op struct {
	kind  recType
	group uint64
	ents  []entryRef // recEntries
	min   uint64     // recDelete
	max   uint64     // recDelete
	key   string     // recSet
	val   []byte     // recSet
}

// Entry encoding:
//
//	uvarint Index, uvarint Term, byte Type, byte flags,
//	[varint AppendedAt.UnixNano() if flags&1],
//	uvarint len(Extensions), Extensions, Data (the rest).
const flagAppendedAt = 1

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

func varintLen(x int64) int {
	ux := uint64(x) << 1
	if x < 0 {
		ux = ^ux
	}
	return uvarintLen(ux)
}

func entrySize(l *raft.Log) int {
	n := uvarintLen(l.Index) + uvarintLen(l.Term) + 2
	if !l.AppendedAt.IsZero() {
		n += varintLen(l.AppendedAt.UnixNano())
	}
	n += uvarintLen(uint64(len(l.Extensions))) + len(l.Extensions) + len(l.Data)
	return n
}

func appendEntry(b []byte, l *raft.Log) []byte {
	return append(appendEntryHead(b, l), l.Data...)
}

// appendEntryHead appends the encoding of l up to (not including) its data.
func appendEntryHead(b []byte, l *raft.Log) []byte {
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	var flags byte
	if !l.AppendedAt.IsZero() {
		flags |= flagAppendedAt
	}
	b = append(b, byte(l.Type), flags)
	if flags&flagAppendedAt != 0 {
		b = binary.AppendVarint(b, l.AppendedAt.UnixNano())
	}
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	return append(b, l.Extensions...)
}

// decodeEntry decodes b into l. l.Data and l.Extensions alias b.
func decodeEntry(b []byte, l *raft.Log) error {
	idx, n := binary.Uvarint(b)
	if n <= 0 {
		return errCorrupt
	}
	b = b[n:]
	term, n := binary.Uvarint(b)
	if n <= 0 || len(b) < n+2 {
		return errCorrupt
	}
	b = b[n:]
	typ, flags := raft.LogType(b[0]), b[1]
	b = b[2:]
	var at time.Time
	if flags&flagAppendedAt != 0 {
		ns, n := binary.Varint(b)
		if n <= 0 {
			return errCorrupt
		}
		b = b[n:]
		at = time.Unix(0, ns)
	}
	extLen, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < extLen {
		return errCorrupt
	}
	b = b[n:]
	var ext, data []byte
	if extLen > 0 {
		ext = b[:extLen:extLen]
	}
	b = b[extLen:]
	if len(b) > 0 {
		data = b
	}
	*l = raft.Log{Index: idx, Term: term, Type: typ, Data: data, Extensions: ext, AppendedAt: at}
	return nil
}

// refDataMin is the smallest entry payload encodeEntries references in
// place instead of copying into the record buffer. A variable for tests.
var refDataMin = 64 << 10

// encodeEntries builds one recEntries record for logs, which must have
// strictly increasing indexes. rec is the record's buffer and hold its
// handle (getRecBuf). refs, appended to dst[:0], locates each entry in
// the record.
// When no payload is referenced, parts is nil and rec is the whole record.
// Otherwise the record is the concatenation of parts: slices of rec, with
// every payload of refDataMin bytes or more in between by reference, not
// copied (a 1 MiB entry was copied three times on its way to the disk: into
// the record, into the O_DIRECT buffer and, on a leader, into the op). The
// bytes are the same either way. The referenced payloads must not change
// until the record is written: StoreLogs writes it before it returns, and
// raft does not touch an entry while it stores it. parts[0] begins with the
// header (finishRecord, setLink).
func encodeEntries(group uint64, logs []*raft.Log, dst []entryRef) (rec []byte, hold *[]byte, parts [][]byte, refs []entryRef, err error) {
	size := recHeaderSize + uvarintLen(uint64(len(logs)))
	referenced := 0
	sizes := make([]int, len(logs))
	for i, l := range logs {
		if l == nil {
			return nil, nil, nil, nil, errors.New("sharedlog: nil log entry")
		}
		if i > 0 && l.Index <= logs[i-1].Index {
			return nil, nil, nil, nil, fmt.Errorf("sharedlog: log indexes not increasing (%d after %d)", l.Index, logs[i-1].Index)
		}
		sizes[i] = entrySize(l)
		size += uvarintLen(uint64(sizes[i])) + sizes[i]
		if len(l.Data) >= refDataMin {
			referenced += len(l.Data)
		}
	}
	if size-recHeaderSize > maxRecordPayload {
		return nil, nil, nil, nil, fmt.Errorf("sharedlog: batch of %d bytes exceeds the %d byte record limit", size, maxRecordPayload)
	}
	rec, hold = getRecBuf(size - referenced)
	rec = beginRecord(rec, recEntries, group)
	rec = binary.AppendUvarint(rec, uint64(len(logs)))
	refs = slices.Grow(dst[:0], len(logs))[:len(logs)]
	off, from := 0, 0 // off: record offset of rec[len(rec)]; from: start of rec's unplaced part
	for i, l := range logs {
		rec = binary.AppendUvarint(rec, uint64(sizes[i]))
		refs[i] = entryRef{index: l.Index, off: uint32(off + len(rec)), n: uint32(sizes[i])}
		if len(l.Data) < refDataMin {
			rec = appendEntry(rec, l)
			continue
		}
		rec = appendEntryHead(rec, l)
		parts = append(parts, rec[from:len(rec):len(rec)], l.Data)
		off += len(l.Data)
		from = len(rec)
	}
	if parts == nil {
		finishRecord(rec)
		return rec, hold, nil, refs, nil
	}
	if from < len(rec) {
		parts = append(parts, rec[from:])
	}
	finishRecord(parts[0], parts[1:]...)
	return rec, hold, parts, refs, nil
}

func encodeDelete(group, min, max uint64) []byte {
	rec := beginRecord(make([]byte, 0, recHeaderSize+20), recDelete, group)
	rec = binary.AppendUvarint(rec, min)
	rec = binary.AppendUvarint(rec, max)
	finishRecord(rec)
	return rec
}

func encodeSet(buf []byte, group uint64, key string, val []byte) []byte {
	start := len(buf)
	buf = beginRecord(buf, recSet, group)
	buf = binary.AppendUvarint(buf, uint64(len(key)))
	buf = append(buf, key...)
	buf = append(buf, val...)
	finishRecord(buf[start:])
	return buf
}

func encodeDrop(group uint64) []byte {
	rec := beginRecord(make([]byte, 0, recHeaderSize), recDrop, group)
	finishRecord(rec)
	return rec
}

// decodeOp parses a record whose crc was verified. hdr is the record header,
// payload its payload. Entry offsets are relative to the record start.
func decodeOp(hdr, payload []byte) (op, error) {
	o := op{kind: recType(hdr[recTypeOff]), group: binary.LittleEndian.Uint64(hdr[recGroupOff:recHeaderSize])}
	switch o.kind {
	case recEntries:
		count, n := binary.Uvarint(payload)
		if n <= 0 || count > uint64(len(payload)) {
			return o, errCorrupt
		}
		pos := n
		o.ents = make([]entryRef, 0, count)
		for range count {
			elen, n := binary.Uvarint(payload[pos:])
			if n <= 0 || elen > uint64(len(payload)-pos-n) || elen == 0 {
				return o, errCorrupt
			}
			pos += n
			idx, m := binary.Uvarint(payload[pos : pos+int(elen)])
			if m <= 0 {
				return o, errCorrupt
			}
			if len(o.ents) > 0 && idx <= o.ents[len(o.ents)-1].index {
				return o, errCorrupt
			}
			o.ents = append(o.ents, entryRef{index: idx, off: uint32(recHeaderSize + pos), n: uint32(elen)})
			pos += int(elen)
		}
		if pos != len(payload) {
			return o, errCorrupt
		}
	case recDelete:
		min, n := binary.Uvarint(payload)
		if n <= 0 {
			return o, errCorrupt
		}
		max, m := binary.Uvarint(payload[n:])
		if m <= 0 || n+m != len(payload) {
			return o, errCorrupt
		}
		o.min, o.max = min, max
	case recSet:
		klen, n := binary.Uvarint(payload)
		if n <= 0 || klen > uint64(len(payload)-n) {
			return o, errCorrupt
		}
		o.key = string(payload[n : n+int(klen)])
		o.val = append([]byte{}, payload[n+int(klen):]...)
	case recDrop:
		if len(payload) != 0 {
			return o, errCorrupt
		}
	default:
		return o, errCorrupt
	}
	return o, nil
}

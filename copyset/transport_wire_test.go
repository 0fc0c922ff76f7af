package copyset

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// testWireCodec returns the codec registered as "proto", failing the test
// unless it is this package's wireCodec.
func testWireCodec(tb testing.TB) *wireCodec {
	tb.Helper()
	c, ok := encoding.GetCodecV2(protoenc.Name).(*wireCodec)
	if !ok {
		tb.Fatalf("codec registered as %q is %T, want *wireCodec", protoenc.Name, encoding.GetCodecV2(protoenc.Name))
	}
	return c
}

// inside reports whether sub's first byte lies within buf.
func inside(sub, buf []byte) bool {
	if len(sub) == 0 || len(buf) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(sub)))
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= lo && p < lo+uintptr(len(buf))
}

// splitBuffers cuts b into buffers of at most n bytes, as gRPC hands over a
// message received in several HTTP/2 frames.
func splitBuffers(b []byte, n int) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, mem.SliceBuffer(b[:k]))
		b = b[k:]
	}
	return out
}

func filled(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func wireTestCases() map[string]*raftpb.AppendEntriesRequest {
	hdr := &raftpb.RPCHeader{ProtocolVersion: 3, Id: []byte("leader-id"), Addr: []byte("10.0.0.1:8200")}
	return map[string]*raftpb.AppendEntriesRequest{
		"empty":            {},
		"group only":       {Group: 1<<32 | 7},
		"empty header":     {Header: &raftpb.RPCHeader{}},
		"negative version": {Header: &raftpb.RPCHeader{ProtocolVersion: -1}},
		"heartbeat":        {Group: 5, Header: hdr, Term: 9, Leader: []byte("10.0.0.1:8200")},
		"all header fields": {
			Group: math.MaxUint64, Header: hdr, Term: 1 << 40, Leader: []byte("l"),
			PrevLogEntry: 100, PrevLogTerm: 8, LeaderCommitIndex: 99,
		},
		"empty non-nil bytes": {Header: &raftpb.RPCHeader{Id: []byte{}, Addr: []byte{}}, Leader: []byte{},
			Entries: []*raftpb.Log{{Data: []byte{}, Extensions: []byte{}}}},
		"one empty entry": {Entries: []*raftpb.Log{{}}},
		"nil entry":       {Term: 2, Entries: []*raftpb.Log{nil, {Index: 1, Data: []byte("x")}, nil}},
		"one small entry": {Group: 1, Term: 2, Entries: []*raftpb.Log{
			{Index: 7, Term: 2, Type: 1, Data: []byte("payload"), Extensions: []byte("ext"), AppendedAt: 1_700_000_000_123_456_789},
		}},
		"negative appended_at": {Entries: []*raftpb.Log{{Index: 1, AppendedAt: -5}}},
		"max scalars":          {Entries: []*raftpb.Log{{Index: math.MaxUint64, Term: math.MaxUint64, Type: math.MaxUint32, AppendedAt: math.MinInt64}}},
		"threshold": {Entries: []*raftpb.Log{
			{Index: 1, Data: filled(wireAliasMin-1, 1)},
			{Index: 2, Data: filled(wireAliasMin, 2)},
			{Index: 3, Data: filled(wireAliasMin+1, 3), Extensions: filled(wireAliasMin, 4)},
		}},
		"large header and leader": {Header: &raftpb.RPCHeader{Id: filled(2<<10, 7), Addr: filled(wireAliasMin, 8)},
			Leader: filled(3<<10, 9), Entries: []*raftpb.Log{{Index: 1, Data: filled(2<<10, 1)}}},
		"large extensions only": {Entries: []*raftpb.Log{{Index: 1, Extensions: filled(4<<10, 5)}}},
		"one large entry": {Group: 3, Header: hdr, Term: 4, Leader: []byte("x"), PrevLogEntry: 10, PrevLogTerm: 4,
			LeaderCommitIndex: 10, Entries: []*raftpb.Log{{Index: 11, Term: 4, Type: 0, Data: filled(1<<20, 6)}}},
		"many mixed": func() *raftpb.AppendEntriesRequest {
			m := &raftpb.AppendEntriesRequest{Group: 9, Header: hdr, Term: 5, LeaderCommitIndex: 40}
			for i := range 40 {
				size := []int{0, 1, 100, 4 << 10, 64 << 10, 1000, 1024}[i%7]
				m.Entries = append(m.Entries, &raftpb.Log{
					Index: uint64(i + 1), Term: 5, Type: uint32(i % 3), Data: filled(size, byte(i)),
					AppendedAt: int64(i) * 1e9,
				})
			}
			return m
		}(),
		"many small": func() *raftpb.AppendEntriesRequest {
			m := &raftpb.AppendEntriesRequest{Term: 1}
			for i := range 300 { // framing of > 1 KiB: a pooled buffer
				m.Entries = append(m.Entries, &raftpb.Log{Index: uint64(i + 1), Term: 1, Data: filled(100, byte(i))})
			}
			return m
		}(),
	}
}

// checkWireRoundTrip checks that the codec marshals m to proto.Marshal's
// bytes, aliasing large payloads, and unmarshals those bytes (in one buffer
// and in several) to a message proto.Equal to m whose large payloads alias
// the receive buffer.
func checkWireRoundTrip(t *testing.T, c *wireCodec, m *raftpb.AppendEntriesRequest) {
	t.Helper()
	want, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Marshal(m)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if got := out.Materialize(); !bytes.Equal(got, want) {
		t.Fatalf("Marshal = %x\nproto.Marshal = %x", got, want)
	}
	for i, l := range m.Entries {
		if l == nil {
			continue
		}
		for _, b := range [][]byte{l.Data, l.Extensions} {
			if len(b) < wireAliasMin {
				continue
			}
			found := false
			for _, buf := range out {
				if d := buf.ReadOnlyData(); len(d) > 0 && &d[0] == &b[0] {
					found = true
				}
			}
			if !found {
				t.Errorf("entry %d: payload of %d bytes was copied, not aliased", i, len(b))
			}
		}
	}
	out.Free()

	recv := append(make([]byte, 0, len(want)), want...)                                 // a well-fitting buffer: used in place
	back := &raftpb.AppendEntriesRequest{Group: 77, Entries: []*raftpb.Log{{Index: 1}}} // reset by Unmarshal
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(recv)}, back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if !proto.Equal(back, m) {
		t.Fatalf("Unmarshal = %v, want %v", back, m)
	}
	for i, l := range back.Entries {
		for _, b := range [][]byte{l.Data, l.Extensions} {
			if len(b) > 0 && (!inside(b, recv) || cap(b) != len(b)) {
				t.Errorf("entry %d: payload does not alias the receive buffer (cap %d, len %d)", i, cap(b), len(b))
			}
		}
	}
	if h := back.Header; h != nil && (inside(h.Id, recv) || inside(h.Addr, recv)) || inside(back.Leader, recv) {
		t.Error("header bytes alias the receive buffer; want copies")
	}

	var frames raftpb.AppendEntriesRequest
	if err := c.Unmarshal(splitBuffers(want, 16<<10), &frames); err != nil {
		t.Fatalf("Unmarshal of frames: %v", err)
	}
	if !proto.Equal(&frames, m) {
		t.Fatalf("Unmarshal of frames = %v, want %v", &frames, m)
	}
}

func TestAppendEntriesWireTable(t *testing.T) {
	c := testWireCodec(t)
	for name, m := range wireTestCases() {
		t.Run(name, func(t *testing.T) { checkWireRoundTrip(t, c, m) })
	}
}

// countingPool is a mem.BufferPool that allocates and counts returns.
type countingPool struct{ puts atomic.Int32 }

func (p *countingPool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (p *countingPool) Put(*[]byte) { p.puts.Add(1) }

// TestAppendEntriesWireBufferLifetime: a received buffer that entries alias
// is never returned to its pool, even after gRPC frees its reference; one
// nothing aliases is; one with much spare capacity is copied, not pinned.
func TestAppendEntriesWireBufferLifetime(t *testing.T) {
	c := testWireCodec(t)
	recv := func(m *raftpb.AppendEntriesRequest, spare int) (*raftpb.AppendEntriesRequest, []byte, int32) {
		t.Helper()
		wire, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		pool := &countingPool{}
		b := append(make([]byte, 0, len(wire)+spare), wire...)
		buf := mem.NewBuffer(&b, pool)
		var got raftpb.AppendEntriesRequest
		if err := c.Unmarshal(mem.BufferSlice{buf}, &got); err != nil {
			t.Fatal(err)
		}
		buf.Free() // gRPC's reference, freed when Unmarshal returns
		if !proto.Equal(&got, m) {
			t.Fatalf("Unmarshal = %v, want %v", &got, m)
		}
		return &got, b, pool.puts.Load()
	}

	entries := &raftpb.AppendEntriesRequest{Term: 1, Entries: []*raftpb.Log{{Index: 1, Data: filled(4<<10, 1)}}}
	got, b, puts := recv(entries, 100)
	if puts != 0 || !inside(got.Entries[0].Data, b) {
		t.Errorf("aliased buffer: %d returns to the pool, data inside = %v; want 0, true", puts, inside(got.Entries[0].Data, b))
	}
	got, b, puts = recv(entries, 3*len(b))
	if puts != 1 || inside(got.Entries[0].Data, b) {
		t.Errorf("oversized buffer: %d returns to the pool, data inside = %v; want 1, false", puts, inside(got.Entries[0].Data, b))
	}
	if _, _, puts = recv(&raftpb.AppendEntriesRequest{Term: 1, Leader: filled(2<<10, 2)}, 0); puts != 1 {
		t.Errorf("unaliased buffer: %d returns to the pool, want 1", puts)
	}
	// The fallback path copies, so the buffer goes back too.
	withUnknown := &raftpb.AppendEntriesRequest{Entries: []*raftpb.Log{{Index: 1, Data: filled(4<<10, 1)}}}
	withUnknown.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 30, protowire.VarintType), 1))
	if _, _, puts = recv(withUnknown, 0); puts != 1 {
		t.Errorf("fallback: %d returns to the pool, want 1", puts)
	}
}

// TestAppendEntriesWireOverGRPC sends entries of every size class through a
// real gRPC connection, unary and pipelined, and checks raft receives them
// intact (payloads that arrive in one frame and payloads that span many).
func TestAppendEntriesWireOverGRPC(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := trStartNode(t, TransportOptions{})
	b := trStartNode(t, TransportOptions{})
	ga := trTransport(t, a, 4)
	gb := trTransport(t, b, 4)
	fb := trStartFakeRaft(gb, nil)
	defer fb.Stop()

	req := func(prev uint64, sizes ...int) *raft.AppendEntriesRequest {
		r := &raft.AppendEntriesRequest{RPCHeader: trHeader(a.addr), Term: 2, PrevLogEntry: prev, PrevLogTerm: 2, LeaderCommitIndex: prev}
		for i, n := range sizes {
			l := &raft.Log{Index: prev + uint64(i) + 1, Term: 2, Type: raft.LogCommand, Data: filled(n, byte(i)), AppendedAt: time.Unix(1, int64(i))}
			if i%2 == 1 {
				l.Extensions = filled(n/2, byte(i+1))
			}
			r.Entries = append(r.Entries, l)
		}
		return r
	}
	check := func(want *raft.AppendEntriesRequest) {
		t.Helper()
		rpc := fb.next(t)
		got := rpc.Command.(*raft.AppendEntriesRequest)
		if got.PrevLogEntry != want.PrevLogEntry || len(got.Entries) != len(want.Entries) {
			t.Fatalf("got request prev %d with %d entries, want prev %d with %d", got.PrevLogEntry, len(got.Entries), want.PrevLogEntry, len(want.Entries))
		}
		for i, w := range want.Entries {
			g := got.Entries[i]
			if g.Index != w.Index || g.Term != w.Term || g.Type != w.Type || !bytes.Equal(g.Data, w.Data) ||
				!bytes.Equal(g.Extensions, w.Extensions) || !g.AppendedAt.Equal(w.AppendedAt) {
				t.Errorf("request %d entry %d differs (data %d bytes, want %d)", want.PrevLogEntry, i, len(g.Data), len(w.Data))
			}
		}
		rpc.Respond(&raft.AppendEntriesResponse{Term: 2, Success: true, LastLog: want.PrevLogEntry + uint64(len(want.Entries))}, nil)
	}

	sizes := [][]int{
		{0, 10, wireAliasMin - 1, wireAliasMin},
		{4 << 10},
		{16 << 10, 3, 64<<10 + 1},
		{1<<20 + 3, 4 << 10, 1 << 20},
	}
	for i, sz := range sizes {
		r := req(uint64(10*i+1), sz...)
		done := make(chan error, 1)
		go func() { done <- ga.AppendEntries("b", b.addr, r, &raft.AppendEntriesResponse{}) }()
		check(r)
		if err := <-done; err != nil {
			t.Fatalf("unary AppendEntries %d: %v", i, err)
		}
	}

	p, err := ga.AppendEntriesPipeline("b", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	for i, sz := range sizes {
		r := req(uint64(100+10*i), sz...)
		if _, err := p.AppendEntries(r, &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
		check(r)
		select {
		case f := <-p.Consumer():
			if err := f.Error(); err != nil || !f.Response().Success {
				t.Fatalf("pipelined AppendEntries %d: %v, %+v", i, err, f.Response())
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("pipelined AppendEntries %d: no response", i)
		}
	}
	trWithin(t, 2*time.Second, "pipeline Close", func() { _ = p.Close() })
	fb.Stop()
	a.stop()
	b.stop()
}

// randBytes returns nil, an empty slice or n random bytes of a size drawn
// to hit both sides of wireAliasMin.
func randBytes(r *rand.Rand) []byte {
	switch r.IntN(6) {
	case 0:
		return nil
	case 1:
		return []byte{}
	case 2:
		return filled(r.IntN(16), byte(r.Uint32()))
	case 3:
		return filled(wireAliasMin-2+r.IntN(4), byte(r.Uint32()))
	case 4:
		return filled(r.IntN(8<<10), byte(r.Uint32()))
	default:
		return filled(r.IntN(128<<10), byte(r.Uint32()))
	}
}

// randScalar returns 0 half the time, else a value of random magnitude.
func randScalar(r *rand.Rand) uint64 {
	if r.IntN(2) == 0 {
		return 0
	}
	return r.Uint64() >> r.IntN(64)
}

func TestAppendEntriesWireRandom(t *testing.T) {
	c := testWireCodec(t)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		m := &raftpb.AppendEntriesRequest{
			Group: randScalar(r), Term: randScalar(r), Leader: randBytes(r),
			PrevLogEntry: randScalar(r), PrevLogTerm: randScalar(r), LeaderCommitIndex: randScalar(r),
		}
		if r.IntN(3) > 0 {
			m.Header = &raftpb.RPCHeader{ProtocolVersion: int64(randScalar(r)), Id: randBytes(r), Addr: randBytes(r)}
		}
		for range r.IntN(20) {
			if r.IntN(30) == 0 {
				m.Entries = append(m.Entries, nil)
				continue
			}
			m.Entries = append(m.Entries, &raftpb.Log{
				Index: randScalar(r), Term: randScalar(r), Type: uint32(randScalar(r)),
				Data: randBytes(r), Extensions: randBytes(r), AppendedAt: int64(randScalar(r)),
			})
		}
		t.Run(fmt.Sprint(i), func(t *testing.T) { checkWireRoundTrip(t, c, m) })
	}
}

// TestAppendEntriesWireFallback: inputs the hand parser does not handle
// decode as proto.Unmarshal decodes them, and messages with unknown fields
// marshal as proto.Marshal does; other message types are untouched.
func TestAppendEntriesWireFallback(t *testing.T) {
	c := testWireCodec(t)
	base, err := proto.Marshal(&raftpb.AppendEntriesRequest{
		Group: 1, Header: &raftpb.RPCHeader{Id: []byte("a")}, Term: 2,
		Entries: []*raftpb.Log{{Index: 3, Data: filled(2<<10, 1)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	entry := func(body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, aeEntries, protowire.BytesType), body)
	}
	header := func(body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, aeHeader, protowire.BytesType), body)
	}
	varintField := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	for name, in := range map[string][]byte{
		"unknown top-level field":  cat(base, varintField(9, 5)),
		"unknown entry field":      cat(base, entry(varintField(7, 1))),
		"unknown header field":     cat(base, header(varintField(4, 1))),
		"wrong wire type":          cat(base, protowire.AppendTag(nil, aeTerm, protowire.Fixed64Type), make([]byte, 8)),
		"bytes for varint":         cat(base, entry(protowire.AppendBytes(protowire.AppendTag(nil, logIndex, protowire.BytesType), []byte{1}))),
		"repeated header merges":   cat(base, header(varintField(hdrProtocolVersion, 4))),
		"repeated scalar":          cat(base, varintField(aeTerm, 5), varintField(aeTerm, 6)),
		"empty data after data":    cat(entry(cat(protowire.AppendBytes(protowire.AppendTag(nil, logData, protowire.BytesType), []byte("abc")), protowire.AppendBytes(protowire.AppendTag(nil, logData, protowire.BytesType), nil)))),
		"non-minimal varint":       {0x08, 0x81, 0x80, 0x00},
		"truncated":                base[:len(base)-1],
		"truncated tag":            {0x80},
		"field number zero":        {0x00, 0x01},
		"group":                    {0x4b, 0x4c},
		"overlong length":          cat(protowire.AppendTag(nil, aeEntries, protowire.BytesType), []byte{0xff, 0xff, 0xff, 0xff, 0x0f}),
		"varint overflow":          {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02},
		"unknown field in middle":  cat(varintField(20, 1), base),
		"entry with nested group":  entry([]byte{0x0b, 0x0c}),
		"header with unknown type": header([]byte{0x0d, 1, 2, 3, 4}),
	} {
		t.Run(name, func(t *testing.T) { checkWireUnmarshal(t, c, in) })
	}

	withUnknown := &raftpb.AppendEntriesRequest{}
	if err := proto.Unmarshal(cat(base, entry(varintField(7, 1))), withUnknown); err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(withUnknown)
	out, err := c.Marshal(withUnknown)
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Materialize(); !bytes.Equal(got, want) {
		t.Errorf("Marshal with unknown fields = %x, want %x", got, want)
	}
	out.Free()

	resp := &raftpb.AppendEntriesResponse{Term: 3, Success: true, Error: "e"}
	out, err = c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	var back raftpb.AppendEntriesResponse
	if err := c.Unmarshal(out, &back); err != nil || !proto.Equal(&back, resp) {
		t.Errorf("AppendEntriesResponse round trip = %v, %v", &back, err)
	}
	out.Free()
	if _, err := c.Marshal(struct{}{}); err == nil {
		t.Error("Marshal of a non-message succeeded")
	}
}

// checkWireUnmarshal checks that the codec decodes in exactly as
// proto.Unmarshal does: both fail or both succeed with proto.Equal results.
// It also checks the hand parser alone: whatever it accepts, proto.Unmarshal
// decodes to the same message, which the codec marshals back to
// proto.Marshal's bytes.
func checkWireUnmarshal(t *testing.T, c *wireCodec, in []byte) {
	t.Helper()
	var want raftpb.AppendEntriesRequest
	wantErr := proto.Unmarshal(in, &want)
	var got raftpb.AppendEntriesRequest
	err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(append(make([]byte, 0, len(in)), in...))}, &got)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("Unmarshal(%x) err = %v, proto.Unmarshal err = %v", in, err, wantErr)
	}
	if err == nil && !proto.Equal(&got, &want) {
		t.Fatalf("Unmarshal(%x) = %v, proto.Unmarshal = %v", in, &got, &want)
	}
	var hand raftpb.AppendEntriesRequest
	if _, ok := unmarshalAppendEntries(in, &hand, nil); ok {
		if wantErr != nil {
			t.Fatalf("hand parser accepted %x, proto.Unmarshal: %v", in, wantErr)
		}
		if !proto.Equal(&hand, &want) {
			t.Fatalf("hand parser: %v, proto.Unmarshal = %v", &hand, &want)
		}
		wantWire, err := proto.Marshal(&hand)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Marshal(&hand)
		if err != nil {
			t.Fatal(err)
		}
		if gotWire := out.Materialize(); !bytes.Equal(gotWire, wantWire) {
			t.Fatalf("Marshal = %x, proto.Marshal = %x", gotWire, wantWire)
		}
		out.Free()
	}
}

// FuzzAppendEntriesWire: the codec's AppendEntriesRequest Unmarshal never
// panics and agrees with proto.Unmarshal on every input.
func FuzzAppendEntriesWire(f *testing.F) {
	for _, m := range wireTestCases() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		if len(b) > 64<<10 {
			continue // keep the seed corpus small
		}
		f.Add(b)
		if len(b) > 2 {
			f.Add(b[:len(b)/2])
			f.Add(append(append([]byte(nil), b...), 0x48, 0x01)) // + unknown field 9
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0x3a, 0x00})             // one empty entry
	f.Add([]byte{0x3a, 0x02, 0x22, 0x00}) // entry with empty data
	f.Add([]byte{0x12, 0x02, 0x08, 0x01, 0x12, 0x02, 0x12, 0x00})
	f.Add([]byte{0x3a, 0x05, 0x22, 0x03, 'a', 'b'})
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x3b, 0x3c})
	c := testWireCodec(f)
	f.Fuzz(func(t *testing.T, in []byte) { checkWireUnmarshal(t, c, in) })
}

// BenchmarkAppendEntriesCodec compares the codec with gRPC's default proto
// codec on a request of 16 entries of 64 KiB. "unmarshal" receives the
// message in one buffer, "unmarshal-frames" in 16 KiB buffers (as gRPC
// delivers a message that spans HTTP/2 frames).
func BenchmarkAppendEntriesCodec(b *testing.B) {
	c := testWireCodec(b)
	m := &raftpb.AppendEntriesRequest{
		Group: 1<<32 | 1, Header: &raftpb.RPCHeader{ProtocolVersion: 3, Id: []byte("10.0.0.1:8200:0"), Addr: []byte("10.0.0.1:8200")},
		Term: 3, PrevLogEntry: 1000, PrevLogTerm: 3, LeaderCommitIndex: 999,
	}
	payload := 0
	for i := range 16 {
		m.Entries = append(m.Entries, &raftpb.Log{Index: uint64(1001 + i), Term: 3, Type: 0, Data: filled(64<<10, byte(i)), AppendedAt: 1_700_000_000_000_000_000})
		payload += 64 << 10
	}
	wire, err := proto.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	for _, codec := range []struct {
		name string
		c    encoding.CodecV2
	}{{"hand", c}, {"orig", c.orig}} {
		b.Run(codec.name+"/marshal", func(b *testing.B) {
			b.SetBytes(int64(payload))
			b.ReportAllocs()
			for b.Loop() {
				out, err := codec.c.Marshal(m)
				if err != nil {
					b.Fatal(err)
				}
				out.Free()
			}
		})
		b.Run(codec.name+"/unmarshal", func(b *testing.B) {
			b.SetBytes(int64(payload))
			b.ReportAllocs()
			in := mem.BufferSlice{mem.SliceBuffer(wire)}
			for b.Loop() {
				var got raftpb.AppendEntriesRequest
				if err := codec.c.Unmarshal(in, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(codec.name+"/unmarshal-frames", func(b *testing.B) {
			b.SetBytes(int64(payload))
			b.ReportAllocs()
			in := splitBuffers(wire, 16<<10)
			for b.Loop() {
				var got raftpb.AppendEntriesRequest
				if err := codec.c.Unmarshal(in, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

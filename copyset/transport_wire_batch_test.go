package copyset

import (
	"bytes"
	"slices"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// TestAppendBatchWire: an AppendEntriesBatch marshals to proto.Marshal's
// bytes with large entry payloads aliased, and unmarshals (in one buffer or
// in frames) to an equal batch whose payloads alias the receive buffer.
func TestAppendBatchWire(t *testing.T) {
	c := testWireCodec(t)
	cases := wireTestCases()
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range cases {
			if !yield(k) {
				return
			}
		}
	})
	var all []*raftpb.AppendEntriesRequest
	for _, n := range names {
		all = append(all, cases[n])
	}
	batches := map[string]*raftpb.AppendEntriesBatch{
		"no requests":   {},
		"one empty":     {Requests: []*raftpb.AppendEntriesRequest{{}}},
		"one large":     {Requests: []*raftpb.AppendEntriesRequest{cases["one large entry"]}},
		"every case":    {Requests: all},
		"empty between": {Requests: []*raftpb.AppendEntriesRequest{cases["threshold"], {}, cases["heartbeat"], {}}},
	}
	for name, m := range batches {
		t.Run(name, func(t *testing.T) {
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.Marshal(m)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if got := out.Materialize(); !bytes.Equal(got, want) {
				t.Fatalf("Marshal differs from proto.Marshal (%d vs %d bytes)", len(got), len(want))
			}
			aliased := 0
			for _, r := range m.Requests {
				for _, l := range r.Entries {
					if l == nil {
						continue
					}
					for _, b := range [][]byte{l.Data, l.Extensions} {
						if len(b) < wireAliasMin {
							continue
						}
						for _, buf := range out {
							if d := buf.ReadOnlyData(); len(d) > 0 && &d[0] == &b[0] {
								aliased++
							}
						}
					}
				}
			}
			if want := countAliased(m); aliased != want {
				t.Errorf("%d payloads aliased, want %d", aliased, want)
			}
			out.Free()

			recv := append(make([]byte, 0, len(want)), want...)
			back := &raftpb.AppendEntriesBatch{Requests: []*raftpb.AppendEntriesRequest{{Group: 9}}} // reset by Unmarshal
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(recv)}, back); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if !proto.Equal(back, m) {
				t.Fatal("Unmarshal differs from the batch sent")
			}
			for _, r := range back.Requests {
				for _, l := range r.Entries {
					for _, b := range [][]byte{l.Data, l.Extensions} {
						if len(b) > 0 && (!inside(b, recv) || cap(b) != len(b)) {
							t.Errorf("group %d: a payload does not alias the receive buffer", r.Group)
						}
					}
				}
			}
			var frames raftpb.AppendEntriesBatch
			if err := c.Unmarshal(splitBuffers(want, 16<<10), &frames); err != nil {
				t.Fatalf("Unmarshal of frames: %v", err)
			}
			if !proto.Equal(&frames, m) {
				t.Fatal("Unmarshal of frames differs from the batch sent")
			}
		})
	}
}

func countAliased(m *raftpb.AppendEntriesBatch) int {
	n := 0
	for _, r := range m.Requests {
		n += sizeAppendEntries(r).nAliased
	}
	return n
}

// TestAppendBatchWireFallback: a batch the hand codec does not handle (an
// unknown field, in the batch or in a request) goes through
// gRPC's default codec, with the same bytes and values.
func TestAppendBatchWireFallback(t *testing.T) {
	c := testWireCodec(t)
	good := &raftpb.AppendEntriesRequest{Group: 1, Term: 2, Entries: []*raftpb.Log{{Index: 1, Data: filled(4<<10, 1)}}}
	withUnknown := proto.Clone(good).(*raftpb.AppendEntriesRequest)
	withUnknown.ProtoReflect().SetUnknown([]byte{0x48, 0x01}) // field 9
	batchUnknown := &raftpb.AppendEntriesBatch{Requests: []*raftpb.AppendEntriesRequest{good}}
	batchUnknown.ProtoReflect().SetUnknown([]byte{0x10, 0x05}) // field 2
	for name, m := range map[string]*raftpb.AppendEntriesBatch{
		"unknown in request": {Requests: []*raftpb.AppendEntriesRequest{good, withUnknown}},
		"unknown in batch":   batchUnknown,
	} {
		t.Run(name, func(t *testing.T) {
			want, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			out, err := c.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if got := out.Materialize(); !bytes.Equal(got, want) {
				t.Fatal("Marshal differs from proto.Marshal")
			}
			out.Free()
			var back raftpb.AppendEntriesBatch
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, &back); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&back, m) {
				t.Fatal("Unmarshal differs from proto.Unmarshal")
			}
		})
	}
	// Malformed input fails as proto.Unmarshal fails.
	var back raftpb.AppendEntriesBatch
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x05, 0x08})}, &back); err == nil {
		t.Fatal("a truncated batch decoded without error")
	}
}

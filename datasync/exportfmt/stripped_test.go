package exportfmt

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// withBody rebuilds packet p (decoded) around body, its header's length
// and crc made to match, so that the body's own decoding is what is
// tested.
func withBody(p *Packet, body []byte) []byte {
	h := proto.CloneOf(p.Header)
	h.BodyLength, h.BodyCrc32C = uint64(len(body)), Checksum(body)
	return reencode(h, body)
}

// agree fails unless Verify accepts b exactly when Decode does, with the
// same error (but for how a wire-format error is worded), and then the same header and the same records less data;
// and unless DecodeAlias accepts and refuses alike and gives the same
// packet as Decode, data included.
func agree(t *testing.T, what string, b []byte) bool {
	t.Helper()
	d, derr := Decode(b)
	v, verr := Verify(b)
	a, aerr := DecodeAlias(b)
	switch {
	case (aerr == nil) != (verr == nil) || (aerr != nil && aerr.Error() != verr.Error()):
		t.Fatalf("%s: DecodeAlias says %v, Verify %v", what, aerr, verr)
	case aerr == nil && (!proto.Equal(a.Header, d.Header) || a.Size != d.Size || len(a.Records) != len(d.Records)):
		t.Fatalf("%s: DecodeAlias gives %v (%d records), Decode %v (%d)", what, a.Header, len(a.Records), d.Header, len(d.Records))
	case aerr == nil:
		for i := range a.Records {
			if !proto.Equal(a.Records[i], d.Records[i]) {
				t.Fatalf("%s: record %d: DecodeAlias %v, Decode %v", what, i, a.Records[i], d.Records[i])
			}
		}
	}
	switch {
	case (derr == nil) != (verr == nil):
		t.Fatalf("%s: Decode says %v, Verify %v", what, derr, verr)
	case derr != nil:
		// A wire-format error is worded by proto.Unmarshal in one and by
		// the walk in the other; every other refusal is the same.
		if !strings.Contains(derr.Error(), "proto:") && derr.Error() != verr.Error() {
			t.Fatalf("%s: Decode says %q, Verify %q", what, derr, verr)
		}
		return false
	case !proto.Equal(d.Header, v.Header) || d.Size != v.Size || d.Start != v.Start || d.Next != v.Next:
		t.Fatalf("%s: Decode gives %v, Verify %v", what, d.Header, v.Header)
	case v.Records != nil:
		t.Fatalf("%s: Verify returned records", what)
	}
	stripped, _, err := recordsStripped(b[len(b)-int(d.Header.BodyLength):], false)
	if err != nil || len(stripped) != len(d.Records) {
		t.Fatalf("%s: %d records stripped (%v), %d decoded", what, len(stripped), err, len(d.Records))
	}
	for i, r := range d.Records {
		r = proto.CloneOf(r)
		switch k := r.GetKind().(type) {
		case *syncpb.Record_Snapshot:
			k.Snapshot.Data = nil
		case *syncpb.Record_CowSnapshot:
			k.CowSnapshot.Data = nil
		case *syncpb.Record_Binlog:
			k.Binlog.Data = nil
		}
		if !proto.Equal(r, stripped[i]) {
			t.Fatalf("%s: record %d: decoded less data %v, stripped %v", what, i, r, stripped[i])
		}
	}
	return true
}

// TestVerifyAgreesWithDecode: on every sample packet, and on thousands of
// bodies mutated from them (bytes flipped, cut, inserted), Verify and
// Decode accept and refuse the same packets with the same errors.
func TestVerifyAgreesWithDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	accepted, refused := 0, 0
	for i, s := range samplePackets() {
		b := mustEncode(t, s.h, s.records)
		agree(t, "sample", b)
		p, _ := Decode(b)
		body := b[len(b)-int(p.Header.BodyLength):]
		if len(body) == 0 {
			continue
		}
		for n := range 5000 {
			m := append([]byte(nil), body...)
			for range 1 + rng.IntN(3) {
				switch j := rng.IntN(len(m)); rng.IntN(3) {
				case 0:
					m[j] ^= byte(1 << rng.IntN(8))
				case 1:
					m = m[:j]
				default:
					m = append(m[:j], append([]byte{byte(rng.IntN(256))}, m[j:]...)...)
				}
				if len(m) == 0 {
					break
				}
			}
			if agree(t, fmt.Sprintf("sample %d, mutation %d", i, n), withBody(p, m)) {
				accepted++
			} else {
				refused++
			}
		}
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("mutations: %d accepted, %d refused: both kinds must be exercised", accepted, refused)
	}
}

// TestDecodeAliasAliases: DecodeAlias's record data are slices of the
// packet's own bytes, not copies.
func TestDecodeAliasAliases(t *testing.T) {
	seen := 0
	for _, s := range samplePackets() {
		b := mustEncode(t, s.h, s.records)
		a, err := DecodeAlias(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range a.Records {
			var data []byte
			switch k := r.GetKind().(type) {
			case *syncpb.Record_Snapshot:
				data = k.Snapshot.Data
			case *syncpb.Record_CowSnapshot:
				data = k.CowSnapshot.Data
			case *syncpb.Record_Binlog:
				data = k.Binlog.Data
			}
			if len(data) == 0 {
				continue
			}
			seen++
			was := data[0]
			for i := range b {
				b[i] ^= 0xff
			}
			if data[0] != ^was {
				t.Fatalf("record data does not alias the packet")
			}
			for i := range b {
				b[i] ^= 0xff
			}
		}
	}
	if seen == 0 {
		t.Fatal("no sample record has data")
	}
}

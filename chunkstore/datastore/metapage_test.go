package datastore

import (
	"bytes"
	"encoding/binary"
	"errors"
	stdcrc32 "hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/crc32"
)

// cloneBitmap returns a bitmap of n bits with the given bits set.
func cloneBitmap(n uint32, set ...uint32) []byte {
	b := newBitmap(n)
	for _, i := range set {
		b.set(i)
	}
	return b
}

func TestMetaPageRoundTrip(t *testing.T) {
	for _, m := range []MetaPage{
		{Version: MetaVersion2},
		{Version: MetaVersion2, Sn: 1},
		{Version: MetaVersion2, Sn: 7, CorrectedSn: 3},
		{Version: MetaVersion2, Sn: ^uint64(0), CorrectedSn: ^uint64(0) - 1},
		{Version: MetaVersion2, Sn: 2, Location: "vol1:4096@cs", Bits: 64, Bitmap: cloneBitmap(64)},
		{Version: MetaVersion2, Sn: 2, CorrectedSn: 5, Location: "obj@s3", Bits: 13, Bitmap: cloneBitmap(13, 0, 7, 8, 12)},
		{Version: MetaVersion2, Sn: 1, Location: strings.Repeat("x", MaxLocationLen), Bits: 4096, Bitmap: cloneBitmap(4096, 4095)},
		{Version: MetaVersion3, Sn: 7, CorrectedSn: 3, Seq: 42},
		{Version: MetaVersion3, Sn: 2, CorrectedSn: 5, Location: "obj@s3", Bits: 13, Bitmap: cloneBitmap(13, 0, 7, 8, 12), Seq: ^uint64(0)},
		{Version: MetaVersion3, Sn: 1, Location: strings.Repeat("x", MaxLocationLen), Bits: 4096, Bitmap: cloneBitmap(4096, 4095), Seq: 1},
	} {
		buf := bytes.Repeat([]byte{0xAA}, 4096)
		if err := m.MarshalTo(buf); err != nil {
			t.Fatalf("MarshalTo(%+v): %v", m, err)
		}
		n := m.EncodedLen()
		if !bytes.Equal(buf[n:], make([]byte, 4096-n)) {
			t.Fatalf("MarshalTo(%+v) left non-zero bytes after the encoding", m)
		}
		var got MetaPage
		if err := got.Unmarshal(buf); err != nil {
			t.Fatalf("Unmarshal(MarshalTo(%+v)): %v", m, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
		// Exactly the encoded length is enough to decode; one byte less is not.
		if err := got.Unmarshal(buf[:n]); err != nil {
			t.Fatalf("Unmarshal of %d bytes: %v", n, err)
		}
		if err := got.Unmarshal(buf[:n-1]); !errors.Is(err, ErrFileFormat) {
			t.Fatalf("Unmarshal of %d bytes: got %v, want ErrFileFormat", n-1, err)
		}
	}
	// The longest clone meta page of 16 MiB / 4 KiB chunks fits in 4 KiB.
	if n := metaPageMax(DefaultChunkSize / DefaultBlockSize); n > DefaultPageSize {
		t.Fatalf("metaPageMax = %d > %d", n, DefaultPageSize)
	}
}

// TestMetaPageLayout pins the version-2 byte layout documented on
// MetaVersion2, so that an accidental change of the on-disk format fails.
func TestMetaPageLayout(t *testing.T) {
	m := MetaPage{Version: MetaVersion2, Sn: 0x0102030405060708, CorrectedSn: 0x1112131415161718,
		Location: "ab", Bits: 10, Bitmap: cloneBitmap(10, 0, 9)}
	buf := make([]byte, m.EncodedLen())
	if err := m.MarshalTo(buf); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		2,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
		2, 0, 0, 0, 'a', 'b',
		10, 0, 0, 0,
		0x01, 0x02, // bit 0 in byte 0, bit 9 in byte 1 under mask 1<<1
	}
	checkLayout(t, buf, want)
	// A normal chunk: 29 bytes, crc at 25.
	n := MetaPage{Version: MetaVersion2, Sn: 1}
	if n.EncodedLen() != 29 {
		t.Fatalf("normal chunk EncodedLen %d, want 29", n.EncodedLen())
	}
	// And the table is Castagnoli: its standard check value.
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("crc32c check value: got %#08x, want 0xe3069283", got)
	}
}

// TestMetaPageLayoutV3 pins the version-3 layout: version 2's with the
// index after the corrected sn.
func TestMetaPageLayoutV3(t *testing.T) {
	m := MetaPage{Version: MetaVersion3, Sn: 0x0102030405060708, CorrectedSn: 0x1112131415161718,
		Seq: 0x2122232425262728, Location: "ab", Bits: 10, Bitmap: cloneBitmap(10, 0, 9)}
	buf := make([]byte, m.EncodedLen())
	if err := m.MarshalTo(buf); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		3,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
		0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,
		2, 0, 0, 0, 'a', 'b',
		10, 0, 0, 0,
		0x01, 0x02,
	}
	checkLayout(t, buf, want)
	var d MetaPage
	if err := d.Unmarshal(buf); err != nil || d.Seq != m.Seq || d.Location != "ab" {
		t.Fatalf("decoded %+v, %v", d, err)
	}
	if n := (&MetaPage{Version: MetaVersion3, Sn: 1}); n.EncodedLen() != 37 {
		t.Fatalf("normal chunk EncodedLen %d, want 37", n.EncodedLen())
	}
}

// checkLayout fails unless buf is want followed by its checksum: CRC32C
// over everything before it, checked against the standard library's
// independent implementation.
func checkLayout(t *testing.T, buf, want []byte) {
	t.Helper()
	if len(buf) != len(want)+4 || !bytes.Equal(buf[:len(want)], want) {
		t.Fatalf("layout: got % x, want % x + crc", buf, want)
	}
	if got, w := binary.LittleEndian.Uint32(buf[len(want):]), stdcrc32.Checksum(want, stdcrc32.MakeTable(stdcrc32.Castagnoli)); got != w {
		t.Fatalf("stored crc %#08x, want crc32c %#08x", got, w)
	}
}

func TestMetaPageDecodeErrors(t *testing.T) {
	valid := make([]byte, 64)
	if err := (&MetaPage{Version: MetaVersion2, Sn: 5}).MarshalTo(valid); err != nil {
		t.Fatal(err)
	}
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 0x01
		return b
	}
	// reseal recomputes the checksum of a page of encoded length n after a
	// field was changed, to reach the checks behind the crc.
	reseal := func(b []byte, n int) []byte {
		binary.LittleEndian.PutUint32(b[n-4:], crc32.Checksum(b[:n-4], castagnoli))
		return b
	}
	clonePage := func() []byte {
		b := make([]byte, 64)
		m := MetaPage{Version: MetaVersion2, Sn: 1, Location: "l", Bits: 3, Bitmap: cloneBitmap(3, 1)}
		if err := m.MarshalTo(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	// Location "l" (1 byte), 3 bits in 1 byte: length 31, bitmap at 26.
	padBits := clonePage()
	padBits[26] |= 0x80
	noBits := clonePage()
	binary.LittleEndian.PutUint32(noBits[22:], 0) // 0 bits: bitmap shrinks to 0 bytes
	bitsNoLoc := make([]byte, 64)
	copy(bitsNoLoc, valid[:21])
	binary.LittleEndian.PutUint32(bitsNoLoc[21:], 8)
	bitsNoLoc[25] = 0xFF
	tests := []struct {
		name string
		buf  []byte
		want error
	}{
		{"empty", nil, ErrFileFormat},
		{"short fixed part", valid[:28], ErrFileFormat},
		{"version 0 (zeroed page)", make([]byte, 64), ErrIncompatible},
		{"version 1 (datastore v1)", append([]byte{1}, valid[1:]...), ErrIncompatible},
		{"version 4", append([]byte{4}, valid[1:]...), ErrIncompatible},
		{"sn bit flipped", flip(valid, 1), ErrCRC},
		{"correctedSn bit flipped", flip(valid, 12), ErrCRC},
		{"crc bit flipped", flip(valid, 25), ErrCRC},
		{"bits bit flipped", flip(valid, 21), ErrCRC},
		{"location length past buffer", flip(valid, 20), ErrFileFormat},
		{"bitmap past buffer", func() []byte { b := clonePage(); b[24] = 0x10; return b }(), ErrFileFormat},
		{"clone bitmap bit flipped", flip(clonePage(), 26), ErrCRC},
		{"location byte flipped", flip(clonePage(), 21), ErrCRC},
		{"padding bits set", reseal(padBits, 31), ErrFileFormat},
		{"location without bits", reseal(noBits, 30), ErrFileFormat},
		{"bits without location", reseal(bitsNoLoc, 30), ErrFileFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := MetaPage{Version: MetaVersion2, Sn: 99}
			err := m.Unmarshal(tt.buf)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Unmarshal: got %v, want %v", err, tt.want)
			}
			if !reflect.DeepEqual(m, MetaPage{Version: MetaVersion2, Sn: 99}) {
				t.Fatalf("Unmarshal modified the page on error: %+v", m)
			}
		})
	}
	// Bytes after the encoding are ignored.
	b := bytes.Clone(valid)
	b[29] = 0xFF
	var m MetaPage
	if err := m.Unmarshal(b); err != nil || m.Sn != 5 {
		t.Fatalf("trailing bytes: got %+v, %v", m, err)
	}
}

func TestMetaPageEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		m    MetaPage
		n    int
		want error
	}{
		{"version 0", MetaPage{}, 64, ErrIncompatible},
		{"version 1", MetaPage{Version: MetaVersion1}, 64, ErrIncompatible},
		{"short buffer", MetaPage{Version: MetaVersion2}, 28, ErrInvalidArg},
		{"location without bits", MetaPage{Version: MetaVersion2, Location: "x"}, 64, ErrInvalidArg},
		{"bits without location", MetaPage{Version: MetaVersion2, Bits: 8, Bitmap: []byte{0}}, 64, ErrInvalidArg},
		{"bitmap too short", MetaPage{Version: MetaVersion2, Location: "x", Bits: 9, Bitmap: []byte{0}}, 64, ErrInvalidArg},
		{"bitmap too long", MetaPage{Version: MetaVersion2, Location: "x", Bits: 8, Bitmap: []byte{0, 0}}, 64, ErrInvalidArg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			buf := bytes.Repeat([]byte{0xAA}, tt.n)
			if err := tt.m.MarshalTo(buf); !errors.Is(err, tt.want) {
				t.Fatalf("MarshalTo: got %v, want %v", err, tt.want)
			}
			if !bytes.Equal(buf, bytes.Repeat([]byte{0xAA}, tt.n)) {
				t.Fatal("MarshalTo modified the buffer on error")
			}
		})
	}
}

func TestSnapMetaPage(t *testing.T) {
	m := SnapMetaPage{Version: SnapMetaVersion1, Sn: 0x0102030405060708, Bits: 12, Bitmap: cloneBitmap(12, 1, 11)}
	buf := bytes.Repeat([]byte{0xAA}, 64)
	if err := m.MarshalTo(buf); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		1, 0,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		12, 0, 0, 0,
		0x02, 0x08,
	}
	if !bytes.Equal(buf[:len(want)], want) {
		t.Fatalf("layout: got % x, want % x", buf[:len(want)], want)
	}
	if got, w := binary.LittleEndian.Uint32(buf[len(want):]), stdcrc32.Checksum(want, stdcrc32.MakeTable(stdcrc32.Castagnoli)); got != w {
		t.Fatalf("crc %#08x, want %#08x", got, w)
	}
	if m.EncodedLen() != len(want)+4 || !bytes.Equal(buf[len(want)+4:], make([]byte, 64-len(want)-4)) {
		t.Fatal("bytes after the encoding not zeroed")
	}
	var got SnapMetaPage
	if err := got.Unmarshal(buf); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}

	reseal := func(b []byte) []byte {
		n := len(want) + 4
		binary.LittleEndian.PutUint32(b[n-4:], crc32.Checksum(b[:n-4], castagnoli))
		return b
	}
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(buf)
		f(b)
		return b
	}
	tests := []struct {
		name string
		buf  []byte
		want error
	}{
		{"empty", nil, ErrFileFormat},
		{"short", buf[:13], ErrFileFormat},
		{"short bitmap", buf[:len(want)+3], ErrFileFormat},
		{"version 0", make([]byte, 64), ErrIncompatible},
		{"version 2", mod(func(b []byte) { b[0] = 2 }), ErrIncompatible},
		{"sn flipped", mod(func(b []byte) { b[5] ^= 1 }), ErrCRC},
		{"bitmap flipped", mod(func(b []byte) { b[14] ^= 1 }), ErrCRC},
		{"huge bits", mod(func(b []byte) { b[13] = 0x7F }), ErrFileFormat},
		{"reserved byte", reseal(mod(func(b []byte) { b[1] = 1 })), ErrFileFormat},
		{"padding bits", reseal(mod(func(b []byte) { b[15] |= 0x80 })), ErrFileFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := SnapMetaPage{Sn: 99}
			if err := m.Unmarshal(tt.buf); !errors.Is(err, tt.want) {
				t.Fatalf("Unmarshal: got %v, want %v", err, tt.want)
			}
			if !reflect.DeepEqual(m, SnapMetaPage{Sn: 99}) {
				t.Fatalf("modified on error: %+v", m)
			}
		})
	}
	for _, bad := range []SnapMetaPage{{}, {Version: SnapMetaVersion1, Bits: 9, Bitmap: []byte{0}}} {
		if err := bad.MarshalTo(make([]byte, 64)); err == nil {
			t.Fatalf("MarshalTo(%+v) succeeded", bad)
		}
	}
	if err := m.MarshalTo(make([]byte, m.EncodedLen()-1)); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("short buffer: %v", err)
	}
}

func TestBitmap(t *testing.T) {
	b := newBitmap(20)
	if len(b) != 3 || b.count() != 0 || b.any(0, 20) || !b.validPadding(20) {
		t.Fatalf("new bitmap: % x", b)
	}
	b.setRange(3, 6)
	b.set(19)
	if !bytes.Equal(b, []byte{0x38, 0x00, 0x08}) {
		t.Fatalf("encoding: % x", b)
	}
	type run struct{ lo, hi uint32 }
	collect := func(from, to uint32, want bool) []run {
		var rs []run
		_ = b.runs(from, to, want, func(lo, hi uint32) error { rs = append(rs, run{lo, hi}); return nil })
		return rs
	}
	tests := []struct {
		from, to uint32
		want     bool
		runs     []run
	}{
		{0, 20, true, []run{{3, 6}, {19, 20}}},
		{0, 20, false, []run{{0, 3}, {6, 19}}},
		{4, 5, true, []run{{4, 5}}},
		{4, 5, false, nil},
		{5, 19, true, []run{{5, 6}}},
		{0, 0, true, nil},
	}
	for _, tt := range tests {
		if got := collect(tt.from, tt.to, tt.want); !reflect.DeepEqual(got, tt.runs) {
			t.Errorf("runs(%d, %d, %v) = %v, want %v", tt.from, tt.to, tt.want, got, tt.runs)
		}
	}
	if !b.all(3, 6) || b.all(2, 6) || !b.any(0, 4) || b.any(6, 19) || b.count() != 4 {
		t.Fatal("all/any/count")
	}
	stop := errors.New("stop")
	if err := b.runs(0, 20, true, func(lo, hi uint32) error { return stop }); err != stop {
		t.Fatalf("runs error: %v", err)
	}
	if (bitmap{0x00, 0x00, 0x10}).validPadding(20) || (bitmap{0}).validPadding(20) || !(bitmap{0xFF}).validPadding(8) {
		t.Fatal("validPadding")
	}
}

func FuzzMetaPageDecode(f *testing.F) {
	for _, m := range []MetaPage{
		{Version: MetaVersion2, Sn: 3, CorrectedSn: 2},
		{Version: MetaVersion2, Sn: 1, Location: "f:0@cs", Bits: 64, Bitmap: cloneBitmap(64, 3, 63)},
	} {
		valid := make([]byte, 512)
		_ = m.MarshalTo(valid)
		f.Add(valid)
		f.Add(valid[:m.EncodedLen()])
		f.Add(valid[:m.EncodedLen()-1])
	}
	f.Add([]byte{})
	f.Add([]byte{2})
	f.Add([]byte{1, 0, 0, 0})
	f.Add(make([]byte, 4096))
	f.Add(bytes.Repeat([]byte{0xFF}, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m MetaPage
		if err := m.Unmarshal(data); err != nil {
			if !errors.Is(err, ErrFileFormat) && !errors.Is(err, ErrIncompatible) && !errors.Is(err, ErrCRC) {
				t.Fatalf("Unmarshal: unexpected error class: %v", err)
			}
			return
		}
		// A page that decodes re-encodes to the same meaningful bytes.
		n := m.EncodedLen()
		if n == 0 || n > len(data) {
			t.Fatalf("decoded %+v with EncodedLen %d from %d bytes", m, n, len(data))
		}
		buf := make([]byte, n)
		if err := m.MarshalTo(buf); err != nil {
			t.Fatalf("MarshalTo(%+v): %v", m, err)
		}
		if !bytes.Equal(buf, data[:n]) {
			t.Fatalf("re-encoding differs: % x vs % x", buf, data[:n])
		}
	})
}

func FuzzSnapMetaPageDecode(f *testing.F) {
	valid := make([]byte, 256)
	m := SnapMetaPage{Version: SnapMetaVersion1, Sn: 7, Bits: 64, Bitmap: cloneBitmap(64, 0, 5)}
	_ = m.MarshalTo(valid)
	f.Add(valid)
	f.Add(valid[:m.EncodedLen()])
	f.Add(valid[:m.EncodedLen()-1])
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add(make([]byte, 4096))
	f.Add(bytes.Repeat([]byte{0xFF}, 64))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m SnapMetaPage
		if err := m.Unmarshal(data); err != nil {
			if !errors.Is(err, ErrFileFormat) && !errors.Is(err, ErrIncompatible) && !errors.Is(err, ErrCRC) {
				t.Fatalf("Unmarshal: unexpected error class: %v", err)
			}
			return
		}
		n := m.EncodedLen()
		if n == 0 || n > len(data) || len(m.Bitmap) != bitmapLen(m.Bits) {
			t.Fatalf("decoded %+v with EncodedLen %d from %d bytes", m, n, len(data))
		}
		buf := make([]byte, n)
		if err := m.MarshalTo(buf); err != nil {
			t.Fatalf("MarshalTo(%+v): %v", m, err)
		}
		if !bytes.Equal(buf, data[:n]) {
			t.Fatalf("re-encoding differs: % x vs % x", buf, data[:n])
		}
	})
}

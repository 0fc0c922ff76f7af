package datastore

import (
	"bytes"
	"encoding/binary"
	"errors"
	stdcrc32 "hash/crc32"
	"testing"

	"github.com/klauspost/crc32"
)

func TestMetaPageRoundTrip(t *testing.T) {
	for _, m := range []MetaPage{
		{Version: MetaVersion1},
		{Version: MetaVersion1, Sn: 1},
		{Version: MetaVersion1, Sn: 7, CorrectedSn: 3},
		{Version: MetaVersion1, Sn: ^uint64(0), CorrectedSn: ^uint64(0) - 1},
	} {
		buf := bytes.Repeat([]byte{0xAA}, 4096)
		if err := m.MarshalTo(buf); err != nil {
			t.Fatalf("MarshalTo(%+v): %v", m, err)
		}
		if !bytes.Equal(buf[MetaV1Len:], make([]byte, 4096-MetaV1Len)) {
			t.Fatalf("MarshalTo(%+v) left non-zero bytes after the encoding", m)
		}
		var got MetaPage
		if err := got.Unmarshal(buf); err != nil {
			t.Fatalf("Unmarshal(MarshalTo(%+v)): %v", m, err)
		}
		if got != m {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
		// Exactly the encoded length is enough to decode.
		if err := got.Unmarshal(buf[:MetaV1Len]); err != nil {
			t.Fatalf("Unmarshal of %d bytes: %v", MetaV1Len, err)
		}
	}
}

// TestMetaPageLayout pins the version-1 byte layout documented on
// MetaVersion1, so that an accidental change of the on-disk format fails.
func TestMetaPageLayout(t *testing.T) {
	m := MetaPage{Version: MetaVersion1, Sn: 0x0102030405060708, CorrectedSn: 0x1112131415161718}
	buf := make([]byte, MetaV1Len)
	if err := m.MarshalTo(buf); err != nil {
		t.Fatal(err)
	}
	want := []byte{
		1,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
	}
	if !bytes.Equal(buf[:17], want) {
		t.Fatalf("layout: got % x, want % x", buf[:17], want)
	}
	// The checksum is CRC32C over bytes [0, 17), checked against the
	// standard library's independent implementation.
	got := binary.LittleEndian.Uint32(buf[17:21])
	if want := stdcrc32.Checksum(buf[:17], stdcrc32.MakeTable(stdcrc32.Castagnoli)); got != want {
		t.Fatalf("stored crc %#08x, want crc32c %#08x", got, want)
	}
	// And the table is Castagnoli: its standard check value.
	if got := crc32.Checksum([]byte("123456789"), castagnoli); got != 0xe3069283 {
		t.Fatalf("crc32c check value: got %#08x, want 0xe3069283", got)
	}
}

func TestMetaPageDecodeErrors(t *testing.T) {
	valid := make([]byte, 64)
	if err := (&MetaPage{Version: MetaVersion1, Sn: 5}).MarshalTo(valid); err != nil {
		t.Fatal(err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(valid)
		b[i] ^= 0x01
		return b
	}
	tests := []struct {
		name string
		buf  []byte
		want error
	}{
		{"empty", nil, ErrFileFormat},
		{"short", valid[:MetaV1Len-1], ErrFileFormat},
		{"version 0 (zeroed page)", make([]byte, 64), ErrIncompatible},
		{"version 2", append([]byte{2}, valid[1:]...), ErrIncompatible},
		{"sn bit flipped", flip(1), ErrCRC},
		{"correctedSn bit flipped", flip(12), ErrCRC},
		{"crc bit flipped", flip(17), ErrCRC},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := MetaPage{Version: MetaVersion1, Sn: 99}
			err := m.Unmarshal(tt.buf)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Unmarshal: got %v, want %v", err, tt.want)
			}
			if m != (MetaPage{Version: MetaVersion1, Sn: 99}) {
				t.Fatalf("Unmarshal modified the page on error: %+v", m)
			}
		})
	}
	// Bytes after the encoding are ignored.
	b := bytes.Clone(valid)
	b[MetaV1Len] = 0xFF
	var m MetaPage
	if err := m.Unmarshal(b); err != nil || m.Sn != 5 {
		t.Fatalf("trailing bytes: got %+v, %v", m, err)
	}
}

func TestMetaPageEncodeErrors(t *testing.T) {
	buf := bytes.Repeat([]byte{0xAA}, 32)
	if err := (&MetaPage{Version: 0}).MarshalTo(buf); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("version 0: got %v, want ErrIncompatible", err)
	}
	if err := (&MetaPage{Version: MetaVersion1}).MarshalTo(buf[:MetaV1Len-1]); !errors.Is(err, ErrInvalidArg) {
		t.Fatalf("short buffer: got %v, want ErrInvalidArg", err)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{0xAA}, 32)) {
		t.Fatal("MarshalTo modified the buffer on error")
	}
}

func FuzzMetaPageDecode(f *testing.F) {
	valid := make([]byte, 512)
	_ = (&MetaPage{Version: MetaVersion1, Sn: 3, CorrectedSn: 2}).MarshalTo(valid)
	f.Add(valid)
	f.Add(valid[:MetaV1Len])
	f.Add(valid[:MetaV1Len-1])
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 0, 0, 0})
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

package exportfmt

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// The golden files are packets and a manifest of format version 1, as
// written when version 1 was defined. Every later reader must decode them
// to the same content, and the writer must still produce them byte for
// byte: a renumbered field or a changed layout fails here. Never rewrite
// them for an existing version (-update is for adding files). (A protobuf
// library upgrade may change the writer's field order, failing the byte
// comparison only; the decode checks must never fail.)
func TestGoldenV1(t *testing.T) {
	m := NewManifest(1, 3)
	for i, s := range samplePackets() {
		b := mustEncode(t, s.h, s.records)
		p, err := Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		name := PacketName(1, 3, p.Start)
		must(t, Append(m, p.Entry(name)))
		golden(t, filepath.Join("testdata", "v1", fmt.Sprintf("%d-%s", i, filepath.Base(name))), b, func(got []byte) {
			q, err := Decode(got)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !proto.Equal(q.Header, p.Header) || len(q.Records) != len(s.records) {
				t.Fatalf("%s decodes to %v", name, q.Header)
			}
			for i := range s.records {
				if !proto.Equal(q.Records[i], s.records[i]) {
					t.Errorf("%s record %d = %v, want %v", name, i, q.Records[i], s.records[i])
				}
			}
		})
	}
	mb, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, filepath.Join("testdata", "v1", ManifestFile), mb, func(got []byte) {
		gm, err := DecodeManifest(got)
		if err != nil || !proto.Equal(gm, m) {
			t.Fatalf("manifest decodes to %v, %v", gm, err)
		}
	})
}

// golden compares want with the file at path (writing it with -update) and
// runs check on the file's bytes.
func golden(t *testing.T, path string, want []byte, check func([]byte)) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	check(got)
	if !bytes.Equal(got, want) {
		t.Errorf("%s: the writer no longer produces the golden bytes", path)
	}
}

func FuzzDecodeManifest(f *testing.F) {
	m := NewManifest(1, 3)
	for _, s := range samplePackets() {
		p, err := Decode(mustEncode(f, s.h, s.records))
		if err != nil {
			f.Fatal(err)
		}
		if err := Append(m, p.Entry(PacketName(1, 3, p.Start))); err != nil {
			f.Fatal(err)
		}
	}
	b, err := EncodeManifest(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(ManifestMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		_, _ = CheckManifest(m) // never panics either
	})
}

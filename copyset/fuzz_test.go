package copyset

import (
	"bytes"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzDecodeOp: DecodeOp never panics; it accepts exactly the ops with a
// full header of version opVersion and returns the rest as the payload.
func FuzzDecodeOp(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{opVersion})
	f.Add([]byte{opVersion, byte(kindBatch)})
	f.Add([]byte{opVersion, byte(kindSolo), 1, 2, 3})
	f.Add([]byte{2, byte(kindBatch), 0})
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, op []byte) {
		kind, payload, err := DecodeOp(op)
		valid := len(op) >= OpHeaderLen && op[0] == opVersion
		if valid != (err == nil) {
			t.Fatalf("DecodeOp(%x) err = %v, want valid=%v", op, err, valid)
		}
		if err != nil {
			return
		}
		if kind != Kind(op[1]) || !bytes.Equal(payload, op[OpHeaderLen:]) {
			t.Fatalf("DecodeOp(%x) = %d, %x", op, kind, payload)
		}
		buf := make([]byte, OpHeaderLen)
		PutOpHeader(buf, kind)
		if !bytes.Equal(buf, op[:OpHeaderLen]) {
			t.Fatalf("PutOpHeader(%d) = %x, op header %x", kind, buf, op[:OpHeaderLen])
		}
	})
}

// snapSeeds are streams for the snapshot fuzz targets: valid manifest-only
// and file streams and a few broken ones.
func snapSeeds(f *testing.F) [][]byte {
	f.Helper()
	man, err := snapHeader(snapKindManifest, snapManifest{Version: 1, Group: 1, Index: 5, Term: 2, Epoch: 3})
	if err != nil {
		f.Fatal(err)
	}
	files, err := snapHeader(snapKindFiles, snapManifest{Version: 1, Epoch: 1})
	if err != nil {
		f.Fatal(err)
	}
	withFiles := append(append(append(append([]byte{}, files...), fileEntry("chunk_1", []byte("abc"))...),
		fileEntry("sub/dir/chunk_2_snap_1", make([]byte, 10))...), 0, 0)
	escape := append(append(append([]byte{}, files...), fileEntry("../evil", []byte("x"))...), 0, 0)
	short := append(append([]byte{}, files...), fileEntry("chunk_1", []byte("abc"))[:8]...)
	badKind := append([]byte{}, man...)
	badKind[7] = 9
	badLen := append([]byte{}, man[:12]...)
	binary.BigEndian.PutUint32(badLen[8:], maxManifestLen+1)
	return [][]byte{nil, []byte(snapMagic), man, withFiles, escape, short, badKind, badLen,
		append([]byte("CRSNAP\x01\x00\x00\x00\x00\x02"), "{}"...), append([]byte("CRSNAP\x01\x01\x00\x00\x00\x01"), "["...)}
}

// FuzzSnapshotHeader: readSnapHeader never panics, accepts only a good
// magic, format and kind, and reads no more than the header and manifest.
func FuzzSnapshotHeader(f *testing.F) {
	for _, s := range snapSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		kind, _, err := readSnapHeader(r)
		if err != nil {
			return
		}
		if len(b) < 12 || string(b[:6]) != snapMagic || b[6] != snapFormat || (kind != snapKindManifest && kind != snapKindFiles) || kind != b[7] {
			t.Fatalf("accepted bad header %q", b[:min(len(b), 12)])
		}
		if consumed := len(b) - r.Len(); consumed != 12+int(binary.BigEndian.Uint32(b[8:12])) {
			t.Fatalf("consumed %d bytes of a %d-byte manifest", consumed, binary.BigEndian.Uint32(b[8:12]))
		}
	})
}

// FuzzSnapshotSink: any stream written to a sink ends in an error or a
// snapshot; nothing is written outside the store's snapshot directory,
// a failed sink leaves nothing behind, and nothing panics.
func FuzzSnapshotSink(f *testing.F) {
	for _, s := range snapSeeds(f) {
		f.Add(s)
	}
	root := f.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var iter atomic.Uint64
	f.Fuzz(func(t *testing.T, b []byte) {
		// A fresh copyset dir per input: sink ids are term-index-millis.
		dir := filepath.Join(root, "cs", strconv.FormatUint(iter.Add(1), 10))
		defer os.RemoveAll(dir)
		s, err := newSnapshotStore(NewGroupID(1, 1), dir, log)
		if err != nil {
			t.Fatal(err)
		}
		sink, err := s.Create(1, 10, 2, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Write in a few pieces so the parser sees split reads.
		var werr error
		for rest := b; len(rest) > 0 && werr == nil; {
			n := min(len(rest), 1+len(rest)/3)
			_, werr = sink.Write(rest[:n])
			rest = rest[n:]
		}
		cerr := sink.Close()
		if werr != nil && cerr == nil {
			t.Fatalf("write failed (%v) but close succeeded", werr)
		}
		// Everything under dir must be inside raft/snapshots.
		snaps := filepath.Join(dir, "raft", "snapshots")
		err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == dir || p == filepath.Join(dir, "raft") || p == snaps {
				return nil
			}
			if !strings.HasPrefix(p, snaps+string(filepath.Separator)) {
				t.Errorf("sink wrote outside the snapshot dir: %s", p)
			}
			if d.Type()&os.ModeSymlink != 0 {
				t.Errorf("sink made a symlink: %s", p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(snaps)
		if err != nil {
			t.Fatal(err)
		}
		if cerr != nil {
			if len(entries) != 0 || len(list) != 0 {
				t.Fatalf("failed sink (%v) left %d entries, %d listed", cerr, len(entries), len(list))
			}
			return
		}
		// Success: the stream was a good header; a manifest-only snapshot
		// is listed, a received one is pending and not listed yet.
		kind, _, herr := readSnapHeader(bytes.NewReader(b))
		if herr != nil {
			t.Fatalf("sink accepted a stream with a bad header: %v", herr)
		}
		if len(entries) != 1 {
			t.Fatalf("successful sink left %d entries", len(entries))
		}
		if want := kind == snapKindManifest; (len(list) == 1) != want {
			t.Fatalf("kind %d: %d snapshots listed", kind, len(list))
		}
		if kind == snapKindFiles && s.takePending() != sink.ID() {
			t.Fatal("received snapshot not pending")
		}
	})
}

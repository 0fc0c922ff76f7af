package copyset

import (
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

func testSnapStore(t *testing.T) (*snapshotStore, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := newSnapshotStore(NewGroupID(1, 1), dir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func fileEntry(name string, data []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
	b = append(b, name...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(data)))
	return append(b, data...)
}

// openLocalSnapshot takes a local snapshot of src at index 42, term 3
// (manifest epoch 5) listing files, and opens its stream.
func openLocalSnapshot(t *testing.T, src *snapshotStore, files ...string) (*raft.SnapshotMeta, io.ReadCloser) {
	t.Helper()
	return openLocalSnapshotOf(t, src, []snapSource{{names: files}})
}

// openLocalSnapshotOf is openLocalSnapshot streaming sources.
func openLocalSnapshotOf(t *testing.T, src *snapshotStore, sources []snapSource) (*raft.SnapshotMeta, io.ReadCloser) {
	t.Helper()
	src.sources = func() ([]snapSource, error) { return sources, nil }
	local, err := src.Create(1, 42, 3, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	head, _ := snapHeader(snapKindManifest, snapManifest{Version: 1, Epoch: 5})
	local.Write(head)
	if err := local.Close(); err != nil {
		t.Fatal(err)
	}
	meta, rc, err := src.Open(local.ID())
	if err != nil {
		t.Fatal(err)
	}
	return meta, rc
}

func TestSnapshotSinkRejectsBadNames(t *testing.T) {
	for _, name := range []string{"../evil", "/abs", "a/../../x", "."} {
		s, dir := testSnapStore(t)
		head, _ := snapHeader(snapKindFiles, snapManifest{Version: 1, Epoch: 3})
		sink, err := s.Create(1, 10, 2, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		sink.Write(head)
		sink.Write(fileEntry(name, []byte("x")))
		sink.Write([]byte{0, 0})
		if err := sink.Close(); err == nil || !strings.Contains(err.Error(), "bad file name") {
			t.Fatalf("name %q: close = %v, want bad file name", name, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "evil")); err == nil {
			t.Fatalf("name %q escaped the staging dir", name)
		}
		if list, _ := s.List(); len(list) != 0 {
			t.Fatalf("name %q: failed snapshot listed: %v", name, list)
		}
	}
}

// TestSnapshotRoundTrip: a stream from Open, fed to another store's sink,
// stages the same files; install swaps them in; a received snapshot is
// listed only once installed.
func TestSnapshotRoundTrip(t *testing.T) {
	src, _ := testSnapStore(t)
	os.WriteFile(filepath.Join(src.dataDir, "a"), []byte("alpha"), 0o644)
	os.WriteFile(filepath.Join(src.dataDir, "b"), make([]byte, 100000), 0o644)
	meta, rc := openLocalSnapshot(t, src, "a", "b", "gone")
	dst, _ := testSnapStore(t)
	os.WriteFile(filepath.Join(dst.dataDir, "stale"), []byte("old"), 0o644)
	sink, _ := dst.Create(1, meta.Index, meta.Term, raft.Configuration{}, 1, nil)
	n, err := io.Copy(sink, rc)
	rc.Close()
	if err != nil || n != meta.Size {
		t.Fatalf("copied %d of %d: %v", n, meta.Size, err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if list, _ := dst.List(); len(list) != 0 {
		t.Fatalf("staged snapshot listed before install: %v", list)
	}
	id := dst.takePending()
	if id != sink.ID() {
		t.Fatalf("pending %q, want %q", id, sink.ID())
	}
	if err := dst.install(id); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dst.dataDir, "a"))
	if string(got) != "alpha" {
		t.Fatalf("a = %q", got)
	}
	if _, err := os.Stat(filepath.Join(dst.dataDir, "stale")); err == nil {
		t.Fatal("old data survived the install")
	}
	rec, ok, err := dst.latest()
	if err != nil || !ok || rec.Manifest.Epoch != 5 || rec.Meta.Index != 42 {
		t.Fatalf("latest %+v %v %v", rec, ok, err)
	}
}

// TestSnapshotFileGoneDuringStream: a file deleted after the stream's
// listing, before its bytes are read, reaches the follower as absent (not
// as a file of zeros, which a chunk store cannot open); one
// deleted while its bytes are being read arrives whole (it was open), and
// the stream keeps its announced length.
func TestSnapshotFileGoneDuringStream(t *testing.T) {
	src, _ := testSnapStore(t)
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i % 251)
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{"a", big}, {"b", []byte("bravo")}, {"c", []byte("charlie")}} {
		if err := os.WriteFile(filepath.Join(src.dataDir, f.name), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meta, rc := openLocalSnapshot(t, src, "a", "b", "c")
	// The header and the start of a: a is open now.
	first := make([]byte, 1<<20)
	if _, err := io.ReadFull(rc, first); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := os.Remove(filepath.Join(src.dataDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	dst, _ := testSnapStore(t)
	sink, _ := dst.Create(1, meta.Index, meta.Term, raft.Configuration{}, 1, nil)
	sink.Write(first)
	n, err := io.Copy(sink, rc)
	rc.Close()
	if err != nil || n+int64(len(first)) != meta.Size {
		t.Fatalf("copied %d of %d: %v", n+int64(len(first)), meta.Size, err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dst.install(dst.takePending()); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst.dataDir, "a")); string(got) != string(big) {
		t.Errorf("a (deleted while streamed): %d bytes, want its %d bytes", len(got), len(big))
	}
	if _, err := os.Stat(filepath.Join(dst.dataDir, "b")); !os.IsNotExist(err) {
		t.Errorf("b (deleted before it was streamed) was staged: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst.dataDir, "c")); string(got) != "charlie" {
		t.Errorf("c = %q", got)
	}
}

// TestSnapshotInstallRollForward: a crash after the old data was moved
// aside but before the staged data moved in is finished by recover.
func TestSnapshotInstallRollForward(t *testing.T) {
	s, _ := testSnapStore(t)
	head, _ := snapHeader(snapKindFiles, snapManifest{Version: 1})
	sink, _ := s.Create(1, 7, 1, raft.Configuration{}, 1, nil)
	sink.Write(head)
	sink.Write(fileEntry("x", []byte("new")))
	sink.Write([]byte{0, 0})
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	// Crash: step 1 done only.
	if err := os.Rename(s.dataDir, s.dataDir+".old"); err != nil {
		t.Fatal(err)
	}
	s2, err := newSnapshotStore(s.group, filepath.Dir(filepath.Dir(s.dir)), s.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.recover(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(s2.dataDir, "x"))
	if err != nil || string(got) != "new" {
		t.Fatalf("after recover: %q %v", got, err)
	}
	if list, _ := s2.List(); len(list) != 1 {
		t.Fatalf("installed snapshot not listed: %v", list)
	}
	if _, err := os.Stat(s2.dataDir + ".old"); err == nil {
		t.Fatal("old data left behind")
	}
}

package datastore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// stampLog is the trace that broke replay before ops were stamped with
// their log index: a write refused because an older snapshot still existed
// (index 3) is accepted when replayed after the snapshot deletion (index 4)
// that removed the reason it was refused.
var stampLog = []struct {
	name string
	do   func(s *Store, index uint64) error
}{
	{"w sn1", func(s *Store, i uint64) error { return s.WriteChunkAt(i, 1, 1, blocksData(1, 0, 4), 0) }},
	{"w sn2 (snapshot sn1, cow)", func(s *Store, i uint64) error { return s.WriteChunkAt(i, 1, 2, blocksData(2, 0, 1), 0) }},
	// stampSync
	{"w sn3 (refused: snapshot sn1 still there)", func(s *Store, i uint64) error {
		return s.WriteChunkAt(i, 1, 3, blocksData(3, 1, 1), testBlock)
	}},
	{"delete snapshot, correct to sn3", func(s *Store, i uint64) error { return s.DeleteChunkSnapshotOrCorrectSnAt(i, 1, 3) }},
	{"w sn3 (no snapshot: corrected)", func(s *Store, i uint64) error {
		return s.WriteChunkAt(i, 1, 3, blocksData(4, 2, 1), 2*testBlock)
	}},
}

const stampSync = 2

// applyStamped applies stampLog entries [from, len) with their indices
// (1-based); the first application of entry 3 must be refused.
func applyStamped(t *testing.T, s *Store, from int, first bool) {
	t.Helper()
	for i := from; i < len(stampLog); i++ {
		err := stampLog[i].do(s, uint64(i+1))
		if first && i == 2 {
			if !errors.Is(err, ErrSnapshotConflict) {
				t.Fatalf("%s: %v, want ErrSnapshotConflict", stampLog[i].name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("index %d %s: %v", i+1, stampLog[i].name, err)
		}
	}
}

// chunkSummary is chunk 1's info and data.
func chunkSummary(t *testing.T, s *Store) string {
	t.Helper()
	info, err := s.GetChunkInfo(1)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, testChunkSize)
	if err := s.ReadChunk(1, buf, 0); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v data %x", info, sha256.Sum256(buf))
}

// TestReplayKeepsRefusals: the chunk's state is stamped with the index of
// its last meta change, and a replayed op below it is skipped, so the
// refused write stays refused both when the log is replayed over the
// final state in memory and after a crash that kept only what the store
// made durable.
func TestReplayKeepsRefusals(t *testing.T) {
	s, dir := openTest(t)
	applyStamped(t, s, 0, true)
	want := chunkSummary(t, s)
	if !bytes.Contains([]byte(want), []byte("Sn:3 CorrectedSn:3")) {
		t.Fatalf("final state %s", want)
	}

	// A crash now: the files as they are on disk, before any Sync of the
	// final state (the data of every write reached the disk; meta pages as
	// the store wrote them).
	crash := t.TempDir()
	for name, b := range dirFiles(t, dir) {
		if err := os.WriteFile(filepath.Join(crash, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// In memory: replay from after the Sync over the final state.
	applyStamped(t, s, stampSync, false)
	if got := chunkSummary(t, s); got != want {
		t.Errorf("replayed over the final state:\n got %s\nwant %s", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := openTestOpts(t, testOpts(crash))
	defer r.Close()
	if _, err := os.Stat(filepath.Join(crash, "chunk_1_snap_1")); !os.IsNotExist(err) {
		t.Fatalf("snapshot file after its deletion: %v", err)
	}
	applyStamped(t, r, stampSync, false)
	if got := chunkSummary(t, r); got != want {
		t.Errorf("replayed after a crash:\n got %s\nwant %s", got, want)
	}
}

// TestChunkImage: an image holds the chunk's current meta (not yet synced)
// stamped with the last op's index, its snapshot as of the same moment,
// and opens as the chunk's state.
func TestChunkImage(t *testing.T) {
	s, _ := openTest(t)
	defer s.Close()
	applyStamped(t, s, 0, true)
	if err := s.WriteChunkAt(9, 1, 3, blocksData(5, 3, 1), 3*testBlock); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteChunkAt(10, 2, 1, blocksData(6, 0, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteChunkAt(11, 2, 2, blocksData(7, 0, 1), 0); err != nil {
		t.Fatal(err)
	}
	img, err := s.ChunkImage(1)
	if err != nil {
		t.Fatal(err)
	}
	if img.Seq != 9 || img.SnapData != nil || int64(len(img.Data)) != s.FileSize() {
		t.Fatalf("image of chunk 1: index %d, snapshot %d bytes, %d bytes", img.Seq, len(img.SnapData), len(img.Data))
	}
	img2, err := s.ChunkImage(2)
	if err != nil {
		t.Fatal(err)
	}
	if img2.Seq != 11 || img2.SnapName != "chunk_2_snap_1" || img2.SnapData == nil {
		t.Fatalf("image of chunk 2: index %d, snapshot %q", img2.Seq, img2.SnapName)
	}
	if _, err := s.ChunkImage(3); !errors.Is(err, ErrChunkNotExist) {
		t.Fatalf("image of a missing chunk: %v", err)
	}
	// ChunkImageInto reuses its buffers from image to image and reads the
	// same images: chunk 2 (with its snapshot) into the buffers chunk 1's
	// image took, then chunk 1 again, over chunk 2's bytes.
	var buf ImageBuffers
	if _, err := s.ChunkImageInto(1, &buf); err != nil {
		t.Fatal(err)
	}
	data := &buf.Data[0]
	for _, c := range []struct {
		id   uint64
		want Image
	}{{2, img2}, {1, img}} {
		got, err := s.ChunkImageInto(c.id, &buf)
		if err != nil {
			t.Fatal(err)
		}
		if &got.Data[0] != data || !bytes.Equal(got.Data, c.want.Data) || !bytes.Equal(got.SnapData, c.want.SnapData) || got.Seq != c.want.Seq {
			t.Fatalf("image of chunk %d into reused buffers differs from ChunkImage's (same buffer %t)", c.id, &got.Data[0] == data)
		}
	}

	dir := t.TempDir()
	for _, f := range []struct {
		name string
		data []byte
	}{{img.Name, img.Data}, {img2.Name, img2.Data}, {img2.SnapName, img2.SnapData}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := openTestOpts(t, testOpts(dir))
	defer c.Close()
	if got, want := chunkSummary(t, c), chunkSummary(t, s); got != want {
		t.Errorf("image opened:\n got %s\nwant %s", got, want)
	}
	// Replaying the ops the image reflects changes nothing.
	applyStamped(t, c, 0, false)
	if got, want := chunkSummary(t, c), chunkSummary(t, s); got != want {
		t.Errorf("image replayed:\n got %s\nwant %s", got, want)
	}
}

// TestMetaVersion2Upgrade: a chunk whose meta page is of version 2 (no
// index) opens with Index 0, and its next meta page is written as version
// 3.
func TestMetaVersion2Upgrade(t *testing.T) {
	s, dir := openTest(t)
	if err := s.WriteChunk(1, 1, blocksData(1, 0, 1), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "chunk_1")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&MetaPage{Version: MetaVersion2, Sn: 1}).MarshalTo(raw[:testPage]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	s = openTestOpts(t, testOpts(dir))
	if err := s.WriteChunkAt(5, 1, 2, blocksData(2, 1, 1), testBlock); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m MetaPage
	if err := m.Unmarshal(raw[:testPage]); err != nil || m.Version != MetaVersion3 || m.Sn != 2 || m.Seq != 5 {
		t.Fatalf("meta page after the upgrade: %+v, %v", m, err)
	}
}

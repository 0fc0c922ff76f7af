package datastore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// replayOp is one applied log entry of the replay tests.
type replayOp struct {
	name string
	do   func(s *Store) error
}

// replayLog is a log of writes, COWs, clone creations, pastes, snapshot
// deletions and chunk deletions; entries [0, replayCut) come before a Sync.
var replayLog = []replayOp{
	{"w 1 sn1", func(s *Store) error { return s.WriteChunk(1, 1, blocksData(1, 0, 4), 0) }},
	{"w 2 sn1", func(s *Store) error { return s.WriteChunk(2, 1, blocksData(2, 0, 2), 0) }},
	{"clone 3", func(s *Store) error { return s.CreateCloneChunk(3, 1, 0, testChunkSize, testLoc) }},
	{"paste 3", func(s *Store) error { return s.PasteChunk(3, blocksData(3, 0, 4), 0) }},
	{"w 3", func(s *Store) error { return s.WriteChunk(3, 1, blocksData(4, 2, 1), 2*testBlock) }},
	{"clone 4", func(s *Store) error { return s.CreateCloneChunk(4, 1, 2, testChunkSize, "obj@s3") }},
	{"w 5 sn1", func(s *Store) error { return s.WriteChunk(5, 1, blocksData(5, 0, 1), 0) }},
	// replayCut
	{"w 1 sn2 (snapshot, cow)", func(s *Store) error { return s.WriteChunk(1, 2, blocksData(6, 1, 1), testBlock) }},
	{"w 1 sn2 (cow)", func(s *Store) error { return s.WriteChunk(1, 2, blocksData(7, 0, 3), 0) }},
	{"paste 3 all (to normal)", func(s *Store) error { return s.PasteChunk(3, blocksData(8, 0, testBlocks), 0) }},
	{"w 3 after conversion", func(s *Store) error { return s.WriteChunk(3, 1, blocksData(9, 5, 1), 5*testBlock) }},
	{"w 2 sn1", func(s *Store) error { return s.WriteChunk(2, 1, blocksData(10, 4, 1), 4*testBlock) }},
	{"correct 2 to 3", func(s *Store) error { return s.DeleteChunkSnapshotOrCorrectSn(2, 3) }},
	{"w 2 sn3", func(s *Store) error { return s.WriteChunk(2, 3, blocksData(11, 0, 1), 0) }},
	{"paste 4", func(s *Store) error { return s.PasteChunk(4, blocksData(12, 0, 2), 0) }},
	{"w 4 sn2", func(s *Store) error { return s.WriteChunk(4, 2, blocksData(13, 1, 1), testBlock) }},
	{"delete 5", func(s *Store) error { return s.DeleteChunk(5, 0) }},
	{"w 6 sn1", func(s *Store) error { return s.WriteChunk(6, 1, blocksData(14, 0, 1), 0) }},
	{"w 6 sn2", func(s *Store) error { return s.WriteChunk(6, 2, blocksData(15, 0, 1), 0) }},
	{"delete snapshot 6", func(s *Store) error { return s.DeleteChunkSnapshotOrCorrectSn(6, 2) }},
	{"w 1 sn2 (cow)", func(s *Store) error { return s.WriteChunk(1, 2, blocksData(16, 3, 1), 3*testBlock) }},
	{"delete missing 7", func(s *Store) error { return s.DeleteChunk(7, 0) }},
	{"w 5 sn4 (recreate)", func(s *Store) error { return s.WriteChunk(5, 4, blocksData(17, 1, 1), testBlock) }},
}

const replayCut = 7

// dirFiles returns name -> content of every file in dir.
func dirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := make(map[string][]byte)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

// sameFiles fails unless dirs a and b hold byte-identical files.
func sameFiles(t *testing.T, what string, a, b map[string][]byte) {
	t.Helper()
	var na, nb []string
	for n := range a {
		na = append(na, n)
	}
	for n := range b {
		nb = append(nb, n)
	}
	slices.Sort(na)
	slices.Sort(nb)
	if !slices.Equal(na, nb) {
		t.Fatalf("%s: files %v vs %v", what, na, nb)
	}
	for _, n := range na {
		if !bytes.Equal(a[n], b[n]) {
			i := 0
			for i < len(a[n]) && i < len(b[n]) && a[n][i] == b[n][i] {
				i++
			}
			t.Fatalf("%s: %s differs first at byte %d", what, n, i)
		}
	}
}

// applyLog applies ops, failing on any error if strict, else on errors
// other than those a replay legitimately meets: ErrBackward (an entry older
// than durable state) and ErrChunkExist (a clone creation replayed after the
// clone's sn moved or it became a normal chunk, as in Curve).
func applyLog(t *testing.T, s *Store, ops []replayOp, strict bool) {
	t.Helper()
	for _, op := range ops {
		err := op.do(s)
		if err != nil && (strict || !errors.Is(err, ErrBackward) && !errors.Is(err, ErrChunkExist)) {
			t.Fatalf("%s: %v", op.name, err)
		}
	}
}

// TestReplayIdenticalFiles applies the log once to one store and twice to
// another (a replay of everything on top of the result): the files are
// byte-identical.
func TestReplayIdenticalFiles(t *testing.T) {
	a, dirA := openTest(t)
	applyLog(t, a, replayLog, true)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, dirB := openTest(t)
	applyLog(t, b, replayLog, true)
	applyLog(t, b, replayLog, false)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	want := dirFiles(t, dirA)
	sameFiles(t, "replayed twice", want, dirFiles(t, dirB))
	if _, ok := want["chunk_1_snap_1"]; !ok || len(want) != 7 {
		t.Fatalf("unexpected final files: %d", len(want))
	}
	// Replaying the tail again after reopening changes nothing either.
	b = openTestOpts(t, testOpts(dirB))
	applyLog(t, b, replayLog[replayCut:], false)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, "tail replayed after reopen", want, dirFiles(t, dirB))
}

// TestReplayAfterCrash models the crash the durability rules allow: the
// log was applied up to its end and synced only at replayCut; data of the
// later entries reached disk, but the meta pages of chunks that existed at
// the Sync did not (they are persisted lazily). Snapshot files and file
// creations and deletions are durable. Replaying the log from replayCut
// must reproduce the files exactly.
func TestReplayAfterCrash(t *testing.T) {
	s, dir := openTest(t)
	applyLog(t, s, replayLog[:replayCut], true)
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	synced := dirFiles(t, dir)
	applyLog(t, s, replayLog[replayCut:], true)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	final := dirFiles(t, dir)

	crash := t.TempDir()
	for name, b := range final {
		b = bytes.Clone(b)
		// Chunk 5 was deleted and created again after the Sync: its
		// creation, meta page included, is durable.
		if old, ok := synced[name]; ok && name != "chunk_5" {
			copy(b[:testPage], old[:testPage])
		}
		if err := os.WriteFile(filepath.Join(crash, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := openTestOpts(t, testOpts(crash))
	if info, _ := r.GetChunkInfo(1); info != (ChunkInfo{ID: 1, Sn: 1, SnapSn: 1}) {
		t.Fatalf("crash state of chunk 1: %+v", info)
	}
	if info, _ := r.GetChunkInfo(3); info.Location == "" {
		t.Fatalf("crash state of chunk 3 is not a clone: %+v", info)
	}
	applyLog(t, r, replayLog[replayCut:], false)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, "replayed after crash", final, dirFiles(t, crash))
}

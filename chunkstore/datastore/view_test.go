package datastore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// viewOf reads every block of chunk id as of view seq.
func viewOf(t *testing.T, s *Store, seq, id uint64) []byte {
	t.Helper()
	out := make([]byte, 0, testChunkSize)
	buf := make([]byte, testBlock)
	for i := range uint32(testChunkSize / testBlock) {
		if err := s.ReadView(seq, id, i, buf); err != nil {
			t.Fatalf("ReadView(%d, chunk %d, block %d): %v", seq, id, i, err)
		}
		out = append(out, buf...)
	}
	return out
}

func mustAt(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const testViewBudget = 1 << 30

// viewFiles lists the read-view files in dir.
func viewFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); strings.Contains(n, "view") || strings.Contains(n, "vbase") {
			out = append(out, n)
		}
	}
	return out
}

// viewedChunk opens a store with chunk 1's first two blocks written (a)
// and a view of every chunk registered at seq I, synced; synced is its
// files then.
func viewedChunk(t *testing.T, I uint64) (s *Store, dir string, a []byte, synced map[string][]byte) {
	t.Helper()
	s, dir = openTest(t)
	a = pattern(1, 2*testBlock)
	mustAt(t, s.WriteChunkAt(10<<8, 1, 1, a, 0))
	mustAt(t, s.RegisterViewAt(I, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget}))
	mustAt(t, s.Sync())
	return s, dir, a, dirFiles(t, dir)
}

// crashed opens a store over the files of final, each as edit returns it
// (what a crash left on disk).
func crashed(t *testing.T, final map[string][]byte, edit func(name string, b []byte) []byte) *Store {
	t.Helper()
	crash := t.TempDir()
	for name, b := range final {
		mustAt(t, os.WriteFile(filepath.Join(crash, name), edit(name, bytes.Clone(b)), 0o644))
	}
	return openTestOpts(t, testOpts(crash))
}

// A view reads every block as of its register op after each block was
// overwritten and the chunk deleted and created again; chunks outside its
// ranges, and chunks created after it, are not in it; it lists the
// blocks with data; it survives a reopen.
func TestViewAsOfRegister(t *testing.T) {
	s, dir := openTest(t)
	a := pattern(1, testChunkSize)
	b := blocksData(2, 0, 3) // chunk 2: blocks 0..2 only
	mustAt(t, s.WriteChunkAt(1<<8, 1, 1, a, 0))
	mustAt(t, s.WriteChunkAt(2<<8, 2, 1, b, 0))
	mustAt(t, s.WriteChunkAt(3<<8, 9, 1, a, 0))
	const I = 10 << 8
	mustAt(t, s.RegisterViewAt(I, ViewSpec{Ranges: []ChunkRange{{1, 5}}, Budget: testViewBudget, Info: []byte("v")}))
	mustAt(t, s.WriteChunkAt(11<<8, 1, 1, pattern(9, testChunkSize), 0))
	mustAt(t, s.WriteChunkAt(12<<8, 2, 1, pattern(8, testChunkSize), 0))
	mustAt(t, s.WriteChunkAt(13<<8, 3, 1, pattern(7, testBlock), 0)) // created after I
	mustAt(t, s.DeleteChunkAt(14<<8, 2, 0))
	mustAt(t, s.WriteChunkAt(15<<8, 2, 1, pattern(6, testChunkSize), 0))
	mustAt(t, s.DeleteChunkAt(16<<8, 1, 0))

	check := func(s *Store) {
		t.Helper()
		if got := viewOf(t, s, I, 1); !bytes.Equal(got, a) {
			t.Fatal("chunk 1 as of the view differs from its content at register")
		}
		want2 := make([]byte, testChunkSize)
		copy(want2, b)
		if got := viewOf(t, s, I, 2); !bytes.Equal(got, want2) {
			t.Fatal("chunk 2 as of the view differs from its content at register")
		}
		for _, id := range []uint64{3, 9} {
			if err := s.ReadView(I, id, 0, make([]byte, testBlock)); !errors.Is(err, ErrNotInView) {
				t.Fatalf("chunk %d: %v, want ErrNotInView", id, err)
			}
		}
		if err := s.ReadView(I+1, 1, 0, make([]byte, testBlock)); !errors.Is(err, ErrViewNotExist) {
			t.Fatalf("unknown view: %v", err)
		}
		pages, err := s.ViewPages(I)
		mustAt(t, err)
		if len(pages) != 2 || pages[0].ID != 1 || len(pages[0].Blocks) != testChunkSize/testBlock ||
			pages[1].ID != 2 || !slices.Equal(pages[1].Blocks, []uint32{0, 1, 2}) {
			t.Fatalf("pages %+v", pages)
		}
		vs := s.Views()
		if len(vs) != 1 || vs[0].Seq != I || string(vs[0].Info) != "v" || !slices.Equal(vs[0].Chunks, []uint64{1, 2}) {
			t.Fatalf("views %+v", vs)
		}
	}
	check(s)
	s = reopen(t, s)
	check(s)
	if got := readAll(t, s, 2); !bytes.Equal(got, pattern(6, testChunkSize)) {
		t.Fatal("the new incarnation of chunk 2 lost its data")
	}
	mustAt(t, s.DropViewAt(20<<8, I))
	mustAt(t, s.DropViewAt(20<<8, I)) // replay
	if left := viewFiles(t, dir); len(left) != 0 {
		t.Fatalf("files left after drop: %v", left)
	}
	if err := s.ReadView(I, 1, 0, make([]byte, testBlock)); !errors.Is(err, ErrViewNotExist) {
		t.Fatalf("dropped view: %v", err)
	}
}

// Replay after a crash: chunk data newer than the durable meta, a write
// before the view replayed after the view's files exist, writes after it
// replayed: the view still reads the content at register.
func TestViewReplayAfterCrash(t *testing.T) {
	s, dir := openTest(t)
	a := pattern(1, 2*testBlock)
	mustAt(t, s.WriteChunkAt(10<<8, 1, 1, a, 0))
	mustAt(t, s.Sync())
	synced := dirFiles(t, dir)
	log := []func(s *Store) error{
		func(s *Store) error { return s.WriteChunkAt(20<<8, 1, 1, pattern(2, testBlock), 0) },
		func(s *Store) error {
			return s.RegisterViewAt(30<<8, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget})
		},
		func(s *Store) error { return s.WriteChunkAt(40<<8, 1, 1, pattern(3, testBlock), 0) },
		func(s *Store) error { return s.WriteChunkAt(50<<8, 1, 1, pattern(4, testBlock), testBlock) },
	}
	for _, op := range log {
		mustAt(t, op(s))
	}
	want := append(pattern(2, testBlock), a[testBlock:]...)
	if got := viewOf(t, s, 30<<8, 1)[:2*testBlock]; !bytes.Equal(got, want) {
		t.Fatal("view before the crash")
	}
	mustAt(t, s.Close())
	final := dirFiles(t, dir)
	r := crashed(t, final, func(name string, b []byte) []byte {
		if old, ok := synced[name]; ok {
			copy(b[:testPage], old[:testPage]) // the meta page as last synced
		}
		return b
	})
	for _, op := range log {
		mustAt(t, op(r))
	}
	if got := viewOf(t, r, 30<<8, 1)[:2*testBlock]; !bytes.Equal(got, want) {
		t.Fatal("view after the crash and the replay differs from the content at register")
	}
}

// A capture writes its slots and their index entries and syncs once, so a
// crash before that sync can leave an index entry whose slot never reached
// the disk, while the chunk block it saves still holds its content at the
// register (the block is overwritten after the sync). Open drops such an
// entry (its slot is not below the durable mark and fails its crc) and the
// replayed write saves the block again.
func TestViewTornCapture(t *testing.T) {
	const I = 30 << 8
	s, dir, a, synced := viewedChunk(t, I)
	log := []func(s *Store) error{
		func(s *Store) error { return s.WriteChunkAt(40<<8, 1, 1, pattern(2, testBlock), 0) },         // saves block 0 in slot 0
		func(s *Store) error { return s.WriteChunkAt(50<<8, 1, 1, pattern(3, testBlock), testBlock) }, // saves block 1 in slot 1
	}
	for _, op := range log {
		mustAt(t, op(s))
	}
	mustAt(t, s.Close())
	final := dirFiles(t, dir)

	// The crash came during the second capture's sync: the chunk as last
	// synced, the pre-image file with both index entries but slot 1 lost
	// and the durable mark the first capture wrote.
	pre := viewFileName(1, I)
	r := crashed(t, final, func(name string, b []byte) []byte {
		if name == pre {
			copy(b[s.slotOff(1):s.slotOff(2)], bytes.Repeat([]byte{0xee}, testBlock))
			copy(b[viewDurableOff:], encodeViewDurable(1))
		} else if old, ok := synced[name]; ok {
			b = old
		}
		return b
	})
	for _, op := range log {
		mustAt(t, op(r))
	}
	if got := viewOf(t, r, I, 1)[:2*testBlock]; !bytes.Equal(got, a) {
		t.Fatal("view after the torn capture and the replay differs from the content at register")
	}
	// The replay saved block 1 again and the mark passed it: a reopen
	// reads the same.
	r = reopen(t, r)
	if got := viewOf(t, r, I, 1)[:2*testBlock]; !bytes.Equal(got, a) {
		t.Fatal("view after a reopen differs from the content at register")
	}
}

// A write whose op carries the pre-image (PreImageFor on the leader)
// saves it without a sync: after a crash in which the chunk block with the
// new data reached the disk and the capture did not, the replay of the op
// saves the pre-image again from the op, and the view reads the content at
// the register. Store.Sync makes the unsynced captures durable.
func TestViewPreImageCarried(t *testing.T) {
	const I = 30 << 8
	s, dir, a, synced := viewedChunk(t, I)
	pre := s.PreImageFor(1, 0, 2*testBlock)
	if pre == nil || pre.ViewSeq != I || pre.Lo != 0 || !bytes.Equal(pre.Data, a) {
		t.Fatalf("PreImageFor = %+v, want blocks 0-1 as written, view %d", pre, I)
	}
	op := func(s *Store) error { return s.WriteChunkPreAt(40<<8, 1, 1, pattern(2, 2*testBlock), 0, pre) }
	mustAt(t, op(s))
	if got := viewOf(t, s, I, 1)[:2*testBlock]; !bytes.Equal(got, a) {
		t.Fatal("view before the crash")
	}
	if p := s.PreImageFor(1, 0, 2*testBlock); p != nil {
		t.Fatalf("PreImageFor after the capture = %+v, want nil (saved)", p)
	}
	mustAt(t, s.Close())
	final := dirFiles(t, dir)

	// The crash: the chunk with the new data, the pre-image file as at
	// the register.
	pf := viewFileName(1, I)
	r := crashed(t, final, func(name string, b []byte) []byte {
		if name == pf {
			return synced[name]
		}
		return b
	})
	mustAt(t, op(r))
	if got := viewOf(t, r, I, 1)[:2*testBlock]; !bytes.Equal(got, a) {
		t.Fatal("view after the crash and the replay differs from the content at register")
	}
	mustAt(t, r.Sync())
	r = reopen(t, r)
	if got := viewOf(t, r, I, 1)[:2*testBlock]; !bytes.Equal(got, a) {
		t.Fatal("view after Sync and a reopen differs from the content at register")
	}
}

// Which views take a carried pre-image: those at or before its ViewSeq; a
// view registered after the leader read it saves from the chunk. Nothing
// is carried without a view lacking a block, nor for a clone chunk.
func TestViewPreImageRule(t *testing.T) {
	s, _ := openTest(t)
	a := pattern(1, testBlock)
	mustAt(t, s.WriteChunkAt(10<<8, 1, 1, a, 0))
	if p := s.PreImageFor(1, 0, testBlock); p != nil {
		t.Fatalf("PreImageFor without a view = %+v, want nil", p)
	}
	mustAt(t, s.RegisterViewAt(20<<8, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget}))
	pre := s.PreImageFor(1, 0, testBlock)
	if pre == nil || pre.ViewSeq != 20<<8 {
		t.Fatalf("PreImageFor = %+v, want view %d", pre, 20<<8)
	}
	mustAt(t, s.RegisterViewAt(30<<8, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget}))
	marked := pattern(9, testBlock) // not the chunk's content: shows where each view's copy came from
	mustAt(t, s.WriteChunkPreAt(40<<8, 1, 1, pattern(2, testBlock), 0, &PreImage{ViewSeq: pre.ViewSeq, Lo: 0, Data: marked}))
	if got := viewOf(t, s, 20<<8, 1)[:testBlock]; !bytes.Equal(got, marked) {
		t.Fatal("the view at the pre-image's ViewSeq did not save the carried pre-image")
	}
	if got := viewOf(t, s, 30<<8, 1)[:testBlock]; !bytes.Equal(got, a) {
		t.Fatal("the view after the pre-image's ViewSeq did not save from the chunk")
	}
	mustAt(t, s.CreateCloneChunkAt(50<<8, 2, 1, 0, testChunkSize, "1/1/1:0@cs"))
	mustAt(t, s.RegisterViewAt(60<<8, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget}))
	if p := s.PreImageFor(2, 0, testBlock); p != nil {
		t.Fatalf("PreImageFor of a clone chunk = %+v, want nil", p)
	}
}

// Past its budget a view saves nothing more and cannot be read.
func TestViewBudget(t *testing.T) {
	s, _ := openTest(t)
	mustAt(t, s.WriteChunkAt(1<<8, 1, 1, pattern(1, 4*testBlock), 0))
	mustAt(t, s.RegisterViewAt(2<<8, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: 2 * testBlock}))
	mustAt(t, s.WriteChunkAt(3<<8, 1, 1, pattern(2, 2*testBlock), 0))
	mustAt(t, s.ReadView(2<<8, 1, 0, make([]byte, testBlock)))
	mustAt(t, s.WriteChunkAt(4<<8, 1, 1, pattern(3, testBlock), 2*testBlock))
	if err := s.ReadView(2<<8, 1, 0, make([]byte, testBlock)); !errors.Is(err, ErrViewOverBudget) {
		t.Fatalf("over budget: %v", err)
	}
	if vs := s.Views(); len(vs) != 1 || !vs[0].OverBudge || vs[0].Saved != 2*testBlock {
		t.Fatalf("views %+v", vs)
	}
}

// A follower built from images (a chunk imaged before its delete, one
// deleted before its turn) and the replay of the log from before them
// reads the same view.
func TestViewImagesAndReplay(t *testing.T) {
	s, _ := openTest(t)
	a, b := pattern(1, testChunkSize), pattern(2, testChunkSize)
	mustAt(t, s.WriteChunkAt(1<<8, 1, 1, a, 0))
	mustAt(t, s.WriteChunkAt(2<<8, 2, 1, b, 0))
	const I = 3 << 8
	mustAt(t, s.RegisterViewAt(I, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget}))
	mustAt(t, s.WriteChunkAt(4<<8, 1, 1, pattern(3, testBlock), 0))
	mustAt(t, s.DeleteChunkAt(5<<8, 2, 0)) // before its turn
	follower := t.TempDir()
	put := func(fi FileImage) { mustAt(t, os.WriteFile(filepath.Join(follower, fi.Name), fi.Data, 0o644)) }
	img, err := s.ChunkImage(1)
	mustAt(t, err)
	put(FileImage{img.Name, img.Data})
	sent := map[string]bool{}
	for _, v := range img.Views {
		put(v)
		sent[v.Name] = true
	}
	// After chunk 1's image: another overwrite and its delete.
	tail := []func(s *Store) error{
		func(s *Store) error { return s.WriteChunkAt(6<<8, 1, 1, pattern(4, 2*testBlock), 0) },
		func(s *Store) error { return s.DeleteChunkAt(7<<8, 1, 0) },
	}
	for _, op := range tail {
		mustAt(t, op(s))
	}
	for _, name := range s.MovedAside(0) {
		fis, err := s.MovedAsideImage(name, func(n string) bool { return sent[n] })
		mustAt(t, err)
		for _, fi := range fis {
			put(fi)
		}
	}
	for _, fi := range s.ViewInfoImages() {
		put(fi)
	}
	r := openTestOpts(t, testOpts(follower))
	for _, op := range tail {
		mustAt(t, op(r))
	}
	for id, want := range map[uint64][]byte{1: a, 2: b} {
		if got := viewOf(t, r, I, id); !bytes.Equal(got, want) {
			t.Fatalf("follower: chunk %d as of the view differs", id)
		}
		if got := viewOf(t, s, I, id); !bytes.Equal(got, want) {
			t.Fatalf("leader: chunk %d as of the view differs", id)
		}
	}
}

// Reads of a view run while writes save pre-images, another view is
// registered, the chunk is deleted and the view dropped: every read
// returns the content at register until the drop, then ErrViewNotExist.
func TestViewReadsDuringApplies(t *testing.T) {
	s, _ := openTest(t)
	a := pattern(5, testChunkSize)
	mustAt(t, s.WriteChunkAt(1<<8, 1, 1, a, 0))
	const I = 2 << 8
	mustAt(t, s.RegisterViewAt(I, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget}))
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		buf := make([]byte, testBlock)
		for i := uint32(0); ; i = (i + 1) % (testChunkSize / testBlock) {
			select {
			case <-done:
				return
			default:
			}
			err := s.ReadView(I, 1, i, buf)
			if errors.Is(err, ErrViewNotExist) {
				return
			}
			if err != nil || !bytes.Equal(buf, a[i*testBlock:(i+1)*testBlock]) {
				errc <- fmt.Errorf("block %d: %v", i, err)
				return
			}
		}
	}()
	seq := uint64(3 << 8)
	for i := range uint32(testChunkSize / testBlock) {
		mustAt(t, s.WriteChunkAt(seq, 1, 1, pattern(byte(i), testBlock), i*testBlock))
		seq += 1 << 8
		if i == 10 {
			mustAt(t, s.RegisterViewAt(seq, ViewSpec{Ranges: []ChunkRange{{0, 0}}, Budget: testViewBudget}))
			seq += 1 << 8
		}
	}
	mustAt(t, s.DeleteChunkAt(seq, 1, 0))
	mustAt(t, s.DropViewAt(seq+1<<8, I))
	close(done)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// ReadView of several blocks at once reads saved pre-images and runs of
// unsaved blocks alike: any cut of the chunk into runs reads as the view.
func TestViewReadRuns(t *testing.T) {
	s, _ := openTest(t)
	a := pattern(1, testChunkSize)
	mustAt(t, s.WriteChunkAt(1<<8, 1, 1, a, 0))
	const I = 2 << 8
	mustAt(t, s.RegisterViewAt(I, ViewSpec{Ranges: []ChunkRange{{1, 2}}, Budget: testViewBudget}))
	// Blocks 1 and 4 (and the last) are overwritten: their pre-images are saved.
	blocks := uint32(testChunkSize / testBlock)
	for n, b := range []uint32{1, 4, blocks - 1} {
		mustAt(t, s.WriteChunkAt(uint64(3+n)<<8, 1, 1, pattern(byte(9+n), testBlock), b*testBlock))
	}
	for _, run := range []uint32{1, 2, 3, 5, blocks} {
		got := make([]byte, 0, testChunkSize)
		for i := uint32(0); i < blocks; i += run {
			buf := make([]byte, min(run, blocks-i)*testBlock)
			if err := s.ReadView(I, 1, i, buf); err != nil {
				t.Fatalf("ReadView of %d blocks at %d: %v", len(buf)/testBlock, i, err)
			}
			got = append(got, buf...)
		}
		if !bytes.Equal(got, a) {
			t.Fatalf("runs of %d blocks: the view differs from the chunk at register", run)
		}
	}
	for _, bad := range []struct {
		i uint32
		n int
	}{{blocks - 1, 2 * testBlock}, {0, 0}, {0, testBlock + 1}, {blocks, testBlock}} {
		if err := s.ReadView(I, 1, bad.i, make([]byte, bad.n)); !errors.Is(err, ErrInvalidArg) {
			t.Fatalf("ReadView at block %d of %d bytes: %v, want ErrInvalidArg", bad.i, bad.n, err)
		}
	}
}

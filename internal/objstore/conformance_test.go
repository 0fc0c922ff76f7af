package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// newStoreFunc returns a fresh, empty store for one test; the store is
// closed by a t.Cleanup registered by the factory.
type newStoreFunc func(t *testing.T) Store

// conformanceCases is the behaviour every Store implementation must share.
var conformanceCases = []struct {
	name string
	run  func(t *testing.T, ctx context.Context, s Store)
}{
	{"PutReadRanges", testPutReadRanges},
	{"ReadPastEnd", testReadPastEnd},
	{"EmptyObject", testEmptyObject},
	{"Overwrite", testOverwrite},
	{"Stat", testStat},
	{"ListPrefix", testListPrefix},
	{"Delete", testDelete},
	{"MissingObject", testMissingObject},
	{"InvalidNames", testInvalidNames},
	{"ValidUnusualNames", testValidUnusualNames},
	{"LargeObject", testLargeObject},
	{"ShortReader", testShortReader},
	{"ReaderError", testReaderError},
	{"ContextCancelled", testContextCancelled},
	{"ContextCancelledMidPut", testContextCancelledMidPut},
	{"NegativeOffset", testNegativeOffset},
	{"Concurrent", testConcurrent},
	{"Closed", testClosed},
}

func runConformance(t *testing.T, newStore newStoreFunc) {
	for _, c := range conformanceCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, t.Context(), newStore(t))
		})
	}
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// onlyReader hides every method but Read (no Seek, no WriterTo).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func mustPut(t *testing.T, ctx context.Context, s Store, name string, data []byte) {
	t.Helper()
	if err := s.Put(ctx, name, onlyReader{bytes.NewReader(data)}, int64(len(data))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", name, len(data), err)
	}
}

func mustRead(t *testing.T, ctx context.Context, s Store, name string, off int64, n int) []byte {
	t.Helper()
	p := make([]byte, n)
	got, err := s.ReadAt(ctx, name, p, off)
	if err != nil || got != n {
		t.Fatalf("ReadAt(%q, off %d, len %d) = %d, %v; want %d, nil", name, off, n, got, err, n)
	}
	return p
}

func names(infos []ObjectInfo) []string {
	out := make([]string, len(infos))
	for i, o := range infos {
		out[i] = o.Name
	}
	return out
}

func testPutReadRanges(t *testing.T, ctx context.Context, s Store) {
	data := randBytes(1, 10000)
	mustPut(t, ctx, s, "obj", data)
	for _, r := range []struct {
		off int64
		n   int
	}{{0, 10000}, {0, 1}, {4095, 2}, {9999, 1}, {1234, 5000}, {8192, 1808}} {
		got := mustRead(t, ctx, s, "obj", r.off, r.n)
		if want := data[r.off : r.off+int64(r.n)]; !bytes.Equal(got, want) {
			t.Errorf("ReadAt(off %d, len %d): wrong bytes", r.off, r.n)
		}
	}
	// Zero-length reads of an existing object succeed anywhere.
	for _, off := range []int64{0, 5000, 10000, 1 << 40} {
		if n, err := s.ReadAt(ctx, "obj", nil, off); n != 0 || err != nil {
			t.Errorf("zero-length ReadAt at %d = %d, %v; want 0, nil", off, n, err)
		}
	}
}

func testReadPastEnd(t *testing.T, ctx context.Context, s Store) {
	data := randBytes(2, 100)
	mustPut(t, ctx, s, "short", data)
	for _, r := range []struct {
		off   int64
		n     int
		wantN int
	}{{90, 20, 10}, {0, 101, 100}, {99, 2, 1}, {100, 1, 0}, {1000, 5, 0}, {1 << 40, 1, 0}} {
		p := bytes.Repeat([]byte{0xAA}, r.n)
		n, err := s.ReadAt(ctx, "short", p, r.off)
		if n != r.wantN || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadAt(off %d, len %d) = %d, %v; want %d, io.ErrUnexpectedEOF", r.off, r.n, n, err, r.wantN)
			continue
		}
		if errors.Is(err, ErrNotExist) {
			t.Errorf("ReadAt(off %d, len %d): error %v wraps ErrNotExist", r.off, r.n, err)
		}
		if n > 0 && !bytes.Equal(p[:n], data[r.off:r.off+int64(n)]) {
			t.Errorf("ReadAt(off %d, len %d): wrong bytes in p[:n]", r.off, r.n)
		}
		if !bytes.Equal(p[n:], bytes.Repeat([]byte{0xAA}, r.n-n)) {
			t.Errorf("ReadAt(off %d, len %d): p[n:] was modified", r.off, r.n)
		}
	}
}

func testEmptyObject(t *testing.T, ctx context.Context, s Store) {
	mustPut(t, ctx, s, "empty", nil)
	info, err := s.Stat(ctx, "empty")
	if err != nil || info.Size != 0 || info.Name != "empty" {
		t.Fatalf("Stat = %+v, %v; want size 0", info, err)
	}
	if n, err := s.ReadAt(ctx, "empty", make([]byte, 1), 0); n != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadAt = %d, %v; want 0, io.ErrUnexpectedEOF", n, err)
	}
	if n, err := s.ReadAt(ctx, "empty", nil, 0); n != 0 || err != nil {
		t.Errorf("zero-length ReadAt = %d, %v; want 0, nil", n, err)
	}
	list, err := s.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].Name != "empty" || list[0].Size != 0 {
		t.Errorf("List = %+v, %v; want [empty (0 bytes)]", list, err)
	}
}

func testOverwrite(t *testing.T, ctx context.Context, s Store) {
	mustPut(t, ctx, s, "x/obj", randBytes(3, 5000))
	second := randBytes(4, 1234)
	mustPut(t, ctx, s, "x/obj", second)
	if got := mustRead(t, ctx, s, "x/obj", 0, len(second)); !bytes.Equal(got, second) {
		t.Error("read after overwrite returned old bytes")
	}
	if info, err := s.Stat(ctx, "x/obj"); err != nil || info.Size != int64(len(second)) {
		t.Errorf("Stat = %+v, %v; want size %d", info, err, len(second))
	}
	if n, err := s.ReadAt(ctx, "x/obj", make([]byte, 1), int64(len(second))); n != 0 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("read past the new end = %d, %v; want 0, io.ErrUnexpectedEOF", n, err)
	}
}

func testStat(t *testing.T, ctx context.Context, s Store) {
	before := time.Now().Add(-time.Minute)
	mustPut(t, ctx, s, "dir/sub/obj", randBytes(5, 777))
	after := time.Now().Add(time.Minute)
	info, err := s.Stat(ctx, "dir/sub/obj")
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "dir/sub/obj" || info.Size != 777 {
		t.Errorf("Stat = %+v; want name dir/sub/obj, size 777", info)
	}
	if info.ModTime.Before(before) || info.ModTime.After(after) {
		t.Errorf("ModTime %v not within a minute of now", info.ModTime)
	}
	// A "directory" of other objects is not an object.
	for _, name := range []string{"dir", "dir/sub"} {
		if _, err := s.Stat(ctx, name); !errors.Is(err, ErrNotExist) {
			t.Errorf("Stat(%q) = %v; want ErrNotExist", name, err)
		}
	}
}

func testListPrefix(t *testing.T, ctx context.Context, s Store) {
	objs := map[string]int{"dir/x": 1, "dir/y/z": 2, "dir/y/zz": 3, "dir2/w": 4, "dirx": 5, "other": 6, "dir-a": 7}
	for name, n := range objs {
		mustPut(t, ctx, s, name, randBytes(uint64(n), n*10))
	}
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"dir-a", "dir/x", "dir/y/z", "dir/y/zz", "dir2/w", "dirx", "other"}},
		{"dir/", []string{"dir/x", "dir/y/z", "dir/y/zz"}},
		{"dir", []string{"dir-a", "dir/x", "dir/y/z", "dir/y/zz", "dir2/w", "dirx"}},
		{"dir/y", []string{"dir/y/z", "dir/y/zz"}},
		{"dir/y/z", []string{"dir/y/z", "dir/y/zz"}},
		{"dir/y/zz", []string{"dir/y/zz"}},
		{"d", []string{"dir-a", "dir/x", "dir/y/z", "dir/y/zz", "dir2/w", "dirx"}},
		{"o", []string{"other"}},
		{"nope/", nil},
		{"dir/q", nil},
		{"other/", nil},
		{"dir/x/", nil},
	} {
		got, err := s.List(ctx, c.prefix)
		if err != nil {
			t.Errorf("List(%q): %v", c.prefix, err)
			continue
		}
		if !slices.Equal(names(got), c.want) {
			t.Errorf("List(%q) = %q; want %q", c.prefix, names(got), c.want)
		}
		for _, o := range got {
			if o.Size != int64(objs[o.Name]*10) || o.ModTime.IsZero() {
				t.Errorf("List(%q): %+v; want size %d and a ModTime", c.prefix, o, objs[o.Name]*10)
			}
		}
	}
}

func testDelete(t *testing.T, ctx context.Context, s Store) {
	mustPut(t, ctx, s, "a/b/c", []byte("abc"))
	mustPut(t, ctx, s, "a/d", []byte("ad"))
	if err := s.Delete(ctx, "a/b/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "a/b/c"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Stat after Delete = %v; want ErrNotExist", err)
	}
	if _, err := s.ReadAt(ctx, "a/b/c", make([]byte, 1), 0); !errors.Is(err, ErrNotExist) {
		t.Errorf("ReadAt after Delete = %v; want ErrNotExist", err)
	}
	for _, name := range []string{"a/b/c", "never", "a", "a/b", "deep/er/never"} {
		if err := s.Delete(ctx, name); err != nil {
			t.Errorf("Delete(%q) of a missing object = %v; want nil", name, err)
		}
	}
	if got, err := s.List(ctx, ""); err != nil || !slices.Equal(names(got), []string{"a/d"}) {
		t.Errorf("List after deletes = %q, %v; want [a/d]", names(got), err)
	}
	// The name can be reused.
	mustPut(t, ctx, s, "a/b/c", []byte("new"))
	if got := mustRead(t, ctx, s, "a/b/c", 0, 3); string(got) != "new" {
		t.Errorf("read after re-put = %q", got)
	}
}

func testMissingObject(t *testing.T, ctx context.Context, s Store) {
	mustPut(t, ctx, s, "file", []byte("data"))
	for _, name := range []string{"missing", "missing/nested/name", "file/child", "fil", "file2"} {
		if _, err := s.ReadAt(ctx, name, make([]byte, 4), 0); !errors.Is(err, ErrNotExist) {
			t.Errorf("ReadAt(%q) = %v; want ErrNotExist", name, err)
		} else if !strings.Contains(err.Error(), name) {
			t.Errorf("ReadAt(%q) error %q does not name the object", name, err)
		}
		if _, err := s.ReadAt(ctx, name, nil, 0); !errors.Is(err, ErrNotExist) {
			t.Errorf("zero-length ReadAt(%q) = %v; want ErrNotExist", name, err)
		}
		if _, err := s.Stat(ctx, name); !errors.Is(err, ErrNotExist) {
			t.Errorf("Stat(%q) = %v; want ErrNotExist", name, err)
		}
	}
}

var invalidNames = []string{
	"", "/a", "a/", "/", "a//b", "..", ".", "../a", "a/..", "a/../b", "a/./b", "./a",
	strings.Repeat("x", MaxNameLen+1),
	strings.Repeat("y", MaxElemLen+1),
	"a/" + strings.Repeat("y", MaxElemLen+1) + "/b",
	"a\x00b", "a\nb", "tab\there", "del\x7f", "\xff\xfe", ReservedPrefix, ReservedPrefix + "/x",
}

func testInvalidNames(t *testing.T, ctx context.Context, s Store) {
	for _, name := range invalidNames {
		if err := s.Put(ctx, name, strings.NewReader("x"), 1); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Put(%q) = %v; want ErrInvalidName", name, err)
		}
		if _, err := s.ReadAt(ctx, name, make([]byte, 1), 0); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ReadAt(%q) = %v; want ErrInvalidName", name, err)
		}
		if _, err := s.Stat(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Stat(%q) = %v; want ErrInvalidName", name, err)
		}
		if err := s.Delete(ctx, name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Delete(%q) = %v; want ErrInvalidName", name, err)
		}
	}
	for _, prefix := range []string{"/", "/a", "a//", "../", "a/../", "./", "x\x00", "\xff", ReservedPrefix + "/", strings.Repeat("p", MaxNameLen+1)} {
		if _, err := s.List(ctx, prefix); !errors.Is(err, ErrInvalidName) {
			t.Errorf("List(%q) = %v; want ErrInvalidName", prefix, err)
		}
	}
	if got, err := s.List(ctx, ""); err != nil || len(got) != 0 {
		t.Errorf("List after invalid puts = %q, %v; want empty", names(got), err)
	}
}

func testValidUnusualNames(t *testing.T, ctx context.Context, s Store) {
	// 1000 bytes (the S3 tests use a short key prefix).
	long := strings.Repeat(strings.Repeat("n", MaxElemLen)+"/", 3) + strings.Repeat("o", 1000-3*(MaxElemLen+1))
	valid := []string{"a..b", "..a", "a..", ".hidden", "with space", "ünïcödé/ok", "x/.y", "pool/1/42@s3", "a+b=c,d;e", long}
	for i, name := range valid {
		if err := ValidateName(name); err != nil {
			t.Fatalf("ValidateName(%q): %v", name, err)
		}
		data := randBytes(uint64(100+i), 10+i)
		mustPut(t, ctx, s, name, data)
		if got := mustRead(t, ctx, s, name, 0, len(data)); !bytes.Equal(got, data) {
			t.Errorf("%q: wrong bytes", name)
		}
	}
	got, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(valid))
	if !slices.Equal(names(got), want) {
		t.Errorf("List = %q; want %q", names(got), want)
	}
}

func testLargeObject(t *testing.T, ctx context.Context, s Store) {
	const size = 5<<20 + 12345
	data := randBytes(6, size)
	mustPut(t, ctx, s, "big/object", data)
	if info, err := s.Stat(ctx, "big/object"); err != nil || info.Size != size {
		t.Fatalf("Stat = %+v, %v; want size %d", info, err, size)
	}
	if got := mustRead(t, ctx, s, "big/object", 0, size); !bytes.Equal(got, data) {
		t.Error("whole read: wrong bytes")
	}
	for _, r := range [][2]int{{1<<20 - 100, 200}, {3 << 20, 1 << 20}, {size - 4096, 4096}} {
		if got := mustRead(t, ctx, s, "big/object", int64(r[0]), r[1]); !bytes.Equal(got, data[r[0]:r[0]+r[1]]) {
			t.Errorf("read [%d, +%d): wrong bytes", r[0], r[1])
		}
	}
	p := make([]byte, 1<<20)
	if n, err := s.ReadAt(ctx, "big/object", p, size-1000); n != 1000 || !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(p[:n], data[size-1000:]) {
		t.Errorf("read past end = %d, %v; want 1000, io.ErrUnexpectedEOF", n, err)
	}
}

func testShortReader(t *testing.T, ctx context.Context, s Store) {
	err := s.Put(ctx, "short", strings.NewReader(strings.Repeat("x", 50)), 100)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Put with a short reader = %v; want io.ErrUnexpectedEOF", err)
	}
	if _, err := s.Stat(ctx, "short"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Stat after failed Put = %v; want ErrNotExist", err)
	}
	// A failed overwrite keeps the old object.
	old := randBytes(7, 300)
	mustPut(t, ctx, s, "keep", old)
	if err := s.Put(ctx, "keep", strings.NewReader("tiny"), 300); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short overwrite = %v; want io.ErrUnexpectedEOF", err)
	}
	if got := mustRead(t, ctx, s, "keep", 0, len(old)); !bytes.Equal(got, old) {
		t.Error("failed overwrite changed the object")
	}
	// Extra bytes past size are not stored.
	mustPut(t, ctx, s, "exact", nil)
	if err := s.Put(ctx, "exact", strings.NewReader("0123456789"), 4); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "exact"); err != nil || info.Size != 4 {
		t.Errorf("Stat = %+v, %v; want size 4", info, err)
	}
	if err := s.Put(ctx, "neg", strings.NewReader(""), -1); err == nil {
		t.Error("Put with size -1 succeeded")
	}
	if err := s.Put(ctx, "nil", nil, 0); err == nil {
		t.Error("Put with a nil reader succeeded")
	}
}

type failingReader struct {
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	n := min(len(p), f.n)
	clear(p[:n])
	f.n -= n
	return n, nil
}

func testReaderError(t *testing.T, ctx context.Context, s Store) {
	boom := errors.New("boom")
	err := s.Put(ctx, "fail", &failingReader{n: 100 << 10, err: boom}, 1<<20)
	if !errors.Is(err, boom) {
		t.Errorf("Put with a failing reader = %v; want it to wrap the reader's error", err)
	}
	if _, err := s.Stat(ctx, "fail"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Stat after failed Put = %v; want ErrNotExist", err)
	}
}

func testContextCancelled(t *testing.T, ctx context.Context, s Store) {
	mustPut(t, ctx, s, "obj", []byte("data"))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.ReadAt(cctx, "obj", make([]byte, 4), 0); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadAt = %v; want context.Canceled", err)
	}
	if err := s.Put(cctx, "obj2", strings.NewReader("data"), 4); !errors.Is(err, context.Canceled) {
		t.Errorf("Put = %v; want context.Canceled", err)
	}
	if _, err := s.Stat(cctx, "obj"); !errors.Is(err, context.Canceled) {
		t.Errorf("Stat = %v; want context.Canceled", err)
	}
	if _, err := s.List(cctx, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("List = %v; want context.Canceled", err)
	}
	if err := s.Delete(cctx, "obj"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete = %v; want context.Canceled", err)
	}
	dctx, dcancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer dcancel()
	if _, err := s.Stat(dctx, "obj"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stat past deadline = %v; want context.DeadlineExceeded", err)
	}
	// Nothing changed.
	if got := mustRead(t, ctx, s, "obj", 0, 4); string(got) != "data" {
		t.Errorf("obj = %q", got)
	}
	if _, err := s.Stat(ctx, "obj2"); !errors.Is(err, ErrNotExist) {
		t.Errorf("Stat(obj2) = %v; want ErrNotExist", err)
	}
}

// cancellingReader cancels its context once after bytes have been read.
type cancellingReader struct {
	r      io.Reader
	after  int
	cancel context.CancelFunc
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.after -= n; c.after <= 0 && c.cancel != nil {
		c.cancel()
		c.cancel = nil
	}
	return n, err
}

func testContextCancelledMidPut(t *testing.T, ctx context.Context, s Store) {
	old := []byte("old contents")
	mustPut(t, ctx, s, "obj", old)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	data := randBytes(8, 2<<20)
	err := s.Put(cctx, "obj", &cancellingReader{r: bytes.NewReader(data), after: 64 << 10, cancel: cancel}, int64(len(data)))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Put cancelled midway = %v; want context.Canceled", err)
	}
	if got := mustRead(t, ctx, s, "obj", 0, len(old)); !bytes.Equal(got, old) {
		t.Errorf("object after a cancelled overwrite = %q; want the old contents", got)
	}
	if info, err := s.Stat(ctx, "obj"); err != nil || info.Size != int64(len(old)) {
		t.Errorf("Stat = %+v, %v; want the old size %d", info, err, len(old))
	}
}

func testNegativeOffset(t *testing.T, ctx context.Context, s Store) {
	mustPut(t, ctx, s, "obj", []byte("data"))
	n, err := s.ReadAt(ctx, "obj", make([]byte, 2), -1)
	if err == nil || n != 0 || errors.Is(err, ErrNotExist) || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("ReadAt at -1 = %d, %v; want 0 and an invalid-offset error", n, err)
	}
}

func testConcurrent(t *testing.T, ctx context.Context, s Store) {
	const size = 64 << 10
	a, b := bytes.Repeat([]byte{'a'}, size), bytes.Repeat([]byte{'b'}, size)
	mustPut(t, ctx, s, "shared", a)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 4 {
		wg.Go(func() { // writers: overwrite "shared" and write private objects
			for i := range 5 {
				src := a
				if (w+i)%2 == 1 {
					src = b
				}
				if err := s.Put(ctx, "shared", bytes.NewReader(src), size); err != nil {
					errs <- err
				}
				name := fmt.Sprintf("w%d/o%d", w, i)
				if err := s.Put(ctx, name, strings.NewReader(name), int64(len(name))); err != nil {
					errs <- err
				}
			}
		})
		wg.Go(func() { // readers: always see one whole version
			p := make([]byte, size)
			for range 10 {
				if _, err := s.ReadAt(ctx, "shared", p, 0); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(p, a) && !bytes.Equal(p, b) {
					errs <- errors.New("read a torn object")
					return
				}
				if _, err := s.List(ctx, "w"); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := s.List(ctx, "w")
	if err != nil || len(got) != 20 {
		t.Errorf("List(w) = %d objects, %v; want 20", len(got), err)
	}
}

func testClosed(t *testing.T, ctx context.Context, s Store) {
	mustPut(t, ctx, s, "obj", []byte("data"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := s.ReadAt(ctx, "obj", make([]byte, 4), 0); !errors.Is(err, ErrClosed) {
		t.Errorf("ReadAt after Close = %v; want ErrClosed", err)
	}
	if err := s.Put(ctx, "obj", strings.NewReader("x"), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close = %v; want ErrClosed", err)
	}
	if _, err := s.Stat(ctx, "obj"); !errors.Is(err, ErrClosed) {
		t.Errorf("Stat after Close = %v; want ErrClosed", err)
	}
	if err := s.Delete(ctx, "obj"); !errors.Is(err, ErrClosed) {
		t.Errorf("Delete after Close = %v; want ErrClosed", err)
	}
	if _, err := s.List(ctx, ""); !errors.Is(err, ErrClosed) {
		t.Errorf("List after Close = %v; want ErrClosed", err)
	}
}

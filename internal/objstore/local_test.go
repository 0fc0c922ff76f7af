package objstore

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newLocalStore(t *testing.T) Store {
	l, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLocalConformance(t *testing.T) {
	t.Parallel()
	runConformance(t, newLocalStore)
}

func tmpEntries(t *testing.T, l *Local) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(l.Root(), ReservedPrefix))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestLocalLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := t.TempDir()
	l, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	mustPut(t, ctx, l, "pool/7/chunk", []byte("hello"))
	got, err := os.ReadFile(filepath.Join(root, "pool", "7", "chunk"))
	if err != nil || string(got) != "hello" {
		t.Fatalf("file = %q, %v; want hello", got, err)
	}
	// Failed puts leave no temporary files behind.
	_ = l.Put(ctx, "short", strings.NewReader("x"), 10)
	cctx, cancel := context.WithCancel(ctx)
	_ = l.Put(cctx, "cancelled", &cancellingReader{r: strings.NewReader(strings.Repeat("y", 1<<20)), after: 1, cancel: cancel}, 1<<20)
	if e := tmpEntries(t, l); len(e) != 0 {
		t.Errorf("temporary files left: %q", e)
	}
	// Delete removes the directories it empties, but not the root.
	if err := l.Delete(ctx, "pool/7/chunk"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "pool")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("empty directory pool left behind: %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Errorf("root removed: %v", err)
	}
	// A temporary file in flight is never listed.
	if err := os.WriteFile(filepath.Join(root, ReservedPrefix, "put-123"), []byte("z"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"", ".", ".obj"} {
		if list, err := l.List(ctx, prefix); err != nil || len(list) != 0 {
			t.Errorf("List(%q) = %q, %v; want nothing", prefix, names(list), err)
		}
	}
}

func TestLocalFileDirConflict(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := newLocalStore(t)
	mustPut(t, ctx, l, "a", []byte("file"))
	// "a" is a file, so "a/b" cannot exist locally (it could on S3).
	if err := l.Put(ctx, "a/b", strings.NewReader("x"), 1); err == nil {
		t.Error(`Put("a/b") over object "a" succeeded`)
	}
	if got := mustRead(t, ctx, l, "a", 0, 4); string(got) != "file" {
		t.Errorf("a = %q", got)
	}
}

func TestLocalRemovesStaleTemps(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	tmp := filepath.Join(root, ReservedPrefix)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	stale, fresh := filepath.Join(tmp, "put-stale"), filepath.Join(tmp, "put-fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTempAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLocal(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file (maybe a Put in flight) removed: %v", err)
	}
}

func TestNewLocalErrors(t *testing.T) {
	t.Parallel()
	if _, err := NewLocal(""); err == nil {
		t.Error("NewLocal(\"\") succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := NewLocal(file); err == nil {
		t.Error("NewLocal on a regular file succeeded")
	}
	l, err := NewLocal(t.TempDir())
	if err != nil || !filepath.IsAbs(l.Root()) {
		t.Errorf("NewLocal = %v, %v", l, err)
	}
}

// longName returns a valid name of n bytes (n >= 1).
func longName(n int) string {
	var b strings.Builder
	for rem := n; ; {
		if rem <= MaxElemLen {
			b.WriteString(strings.Repeat("e", rem))
			return b.String()
		}
		k := min(MaxElemLen, rem-2) // leave at least one byte for the next element
		b.WriteString(strings.Repeat("e", k) + "/")
		rem -= k + 1
	}
}

func TestLocalMaxLengthName(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	l := newLocalStore(t)
	name := longName(MaxNameLen)
	if len(name) != MaxNameLen || ValidateName(name) != nil {
		t.Fatalf("longName: %d bytes, %v", len(name), ValidateName(name))
	}
	mustPut(t, ctx, l, name, []byte("x"))
	if got := mustRead(t, ctx, l, name, 0, 1); string(got) != "x" {
		t.Errorf("read = %q", got)
	}
}

// TestLocalPutAfterRootRemoved: a put after the store's directory was
// removed under it (an export's place cleared) makes it again.
func TestLocalPutAfterRootRemoved(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	l, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Put(ctx, "a/x", strings.NewReader("1"), 1); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, "a/y", bytes.NewReader([]byte("22")), 2); err != nil {
		t.Fatalf("put after the root was removed: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a", "y")); err != nil || string(b) != "22" {
		t.Fatalf("a/y: %q %v", b, err)
	}
}

package statefile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// lines returns the valid lines of b (valid: a decimal number) and the
// count EachLine refused.
func lines(b []byte) ([]int, int) {
	var out []int
	bad := EachLine(b, func(line []byte) bool {
		v, err := strconv.Atoi(string(line))
		if err != nil {
			return false
		}
		out = append(out, v)
		return true
	})
	return out, bad
}

// TestAppendReopen: appended lines come back in order on reopen, a
// missing file opens empty, and Close then Append reopens the file.
func TestAppendReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.jsonl")
	f, b, err := Open(path)
	if err != nil || b != nil {
		t.Fatalf("open new: %q %v", b, err)
	}
	for i := range 3 {
		if err := f.Append([]byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Append([]byte("3")); err != nil { // reopens
		t.Fatal(err)
	}
	f.Close()
	_, b, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, bad := lines(b); fmt.Sprint(got) != "[0 1 2 3]" || bad != 0 {
		t.Fatalf("reopened %v, %d bad", got, bad)
	}
}

// TestEveryPrefixLoads: a snapshot streams the file cut at any size and
// maybe zero-padded; every such copy loads as an earlier sequence of
// states, the torn line refused, never a value that was not written.
func TestEveryPrefixLoads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.jsonl")
	f, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{10, 200, 3000} {
		if err := f.Append([]byte(strconv.Itoa(v))); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	full, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	written := map[int]bool{10: true, 200: true, 3000: true}
	for cut := 0; cut <= len(full); cut++ {
		for _, pad := range []int{0, 64} {
			b := append(bytes.Clone(full[:cut]), make([]byte, pad)...)
			got, bad := lines(b)
			complete := bytes.Count(full[:cut], []byte("\n"))
			for i, v := range got {
				if i < complete && !written[v] {
					t.Fatalf("cut %d pad %d: line %d = %d was never written", cut, pad, i, v)
				}
			}
			if len(got) < complete || bad > 1 {
				t.Fatalf("cut %d pad %d: %v, %d bad", cut, pad, got, bad)
			}
		}
	}
}

// TestCompaction: a file far larger than its last line is rewritten to
// that line alone; a compaction's leftover temp file is removed by Open.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.jsonl")
	f, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("7"), 1000)
	for range 2*CompactMinBytes/len(line) + 10 {
		if err := f.Append(bytes.Clone(line)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Append([]byte("42")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > CompactMinBytes+int64(len(line))+1 {
		t.Fatalf("not compacted: %d bytes", st.Size())
	}
	if err := os.WriteFile(path+".tmp", []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := lines(b); len(got) == 0 || got[len(got)-1] != 42 {
		t.Fatalf("last line after compaction: %v", got)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temp file left: %v", err)
	}
}

// TestAppendAfterTornTail: a file that ends inside a line (a torn write, a
// prefix cut by a snapshot stream, zero padding) gets its next line on a
// line of its own, so the fragment does not swallow it.
func TestAppendAfterTornTail(t *testing.T) {
	for _, tail := range []string{"1\n2\n3", "1\n2\n\x00\x00\x00", "1\n2\n"} {
		path := filepath.Join(t.TempDir(), "state.jsonl")
		if err := os.WriteFile(path, []byte(tail), 0o644); err != nil {
			t.Fatal(err)
		}
		f, _, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Append([]byte("4")); err != nil {
			t.Fatal(err)
		}
		if err := f.Append([]byte("5")); err != nil {
			t.Fatal(err)
		}
		f.Close()
		_, b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := lines(b)
		if len(got) < 2 || got[len(got)-2] != 4 || got[len(got)-1] != 5 {
			t.Errorf("after %q: lines %v, want ... 4 5", tail, got)
		}
	}
}

// TestJournal: journal entries are never compacted away by the file
// itself, however small against the file; Replace makes one line the
// whole file, durably, and appending goes on after it.
func TestJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.jsonl")
	f, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 2*CompactMinBytes/100 + 10
	for range n {
		if err := f.AppendEntry(bytes.Repeat([]byte("1"), 99)); err != nil {
			t.Fatal(err)
		}
	}
	if f.Size() != int64(n*100) {
		t.Fatalf("journal of %d entries: %d bytes, want %d", n, f.Size(), n*100)
	}
	if err := f.Replace([]byte("5")); err != nil {
		t.Fatal(err)
	}
	if err := f.AppendEntry([]byte("6")); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "5\n6\n" {
		t.Fatalf("after Replace and an entry: %q %v", b, err)
	}
}

package archtest

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// historyRefs match a line that speaks of the project's own history rather
// than of the code: an issue or a work session named by its number (with or
// without a #, singular or plural, any case) or by its place in time (this,
// the previous, a later one), or the possessive of the plural. A reader of the
// repository knows neither. TestHistoryRefs holds examples.
var historyRefs = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(session|issue)s?\s+#?[0-9]`),
	regexp.MustCompile(`(?i)\b(this|that|next|last|previous|earlier|later) (session|issue)s?\b`),
	regexp.MustCompile(`(?i)\bsessions'`),
}

// historyFile reports whether a file is one the check reads: Go source
// (generated code included: its comments come from the .proto), .proto and
// Markdown.
func historyFile(name string) bool {
	for _, ext := range []string{".go", ".proto", ".md"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// historyLines returns "path:line: text" for every line of r that
// historyRefs match.
func historyLines(path string, r *bufio.Scanner) []string {
	var out []string
	for n := 1; r.Scan(); n++ {
		line := r.Text()
		for _, re := range historyRefs {
			if re.MatchString(line) {
				out = append(out, fmt.Sprintf("%s:%d: %s", path, n, strings.TrimSpace(line)))
				break
			}
		}
	}
	return out
}

// scanHistory walks the tree under root, skipping hidden directories (.git,
// .cluster, .tools) and bin/, and returns every line that speaks of the
// project's history.
func scanHistory(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !historyFile(d.Name()) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
		out = append(out, historyLines(filepath.ToSlash(rel), sc)...)
		if err := sc.Err(); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return nil
	})
	return out, err
}

// TestNoHistoryReferences: no source, proto or Markdown file of the module
// speaks of the project's issues or work sessions. A comment says what the
// code does and why; a figure that justifies a choice lives in
// docs/benchmarks.md or docs/performance.md with its date, commit and
// command.
func TestNoHistoryReferences(t *testing.T) {
	_, root, _ := listModule(t)
	lines, err := scanHistory(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		t.Errorf("speaks of the project's history, not of itself: %s", l)
	}
}

// The patterns catch what they are for and leave ordinary uses of the words
// alone.
func TestHistoryRefs(t *testing.T) {
	// Built, so that this file does not match its own check.
	ref := func(word string, rest string) string { return word + rest }
	for _, tc := range []struct {
		line string
		hit  bool
	}{
		{"// measured in " + ref("session", " 14"), true},
		{"| sync service (" + ref("issue", " 15)") + " | done |", true},
		{"after " + ref("Issues", " 17 and 14"), true},
		{"see " + ref("issue", " #7"), true},
		{"### " + ref("Session", " 19: sealed parts"), true},
		{"earlier runs " + ref("this sess", "ion"), true},
		{"the " + ref("sess", "ions'") + " runs", true},
		{"// the TLS session cache holds 64 entries", false},
		{"uint64 connection_id = 10; // This is the session id between a client and tidb", false},
		{"// issue the reads in parallel", false},
		{"// an issue with the peer is logged", false},
	} {
		sc := bufio.NewScanner(strings.NewReader(tc.line))
		if got := len(historyLines("f.go", sc)) > 0; got != tc.hit {
			t.Errorf("%q: matched %v, want %v", tc.line, got, tc.hit)
		}
	}
}

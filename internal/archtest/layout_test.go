package archtest

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// layoutDoc is the page whose file map lists every package, and layoutHeading
// the section holding it: a table whose rows start with a backquoted path
// (a directory ending in "/", or a file).
const (
	layoutDoc     = "docs/architecture.md"
	layoutHeading = "## Layout and file map"
)

// layoutRow is one row of the file map: the path of its first cell and the
// whole row.
type layoutRow struct {
	path string
	text string
}

var (
	rowPath   = regexp.MustCompile("^\\| `([^`]+)`")
	backquote = regexp.MustCompile("`([^`]+)`")
)

// layoutRows parses the file map's rows out of the page.
func layoutRows(page string) ([]layoutRow, error) {
	_, rest, ok := strings.Cut(page, "\n"+layoutHeading+"\n")
	if !ok {
		return nil, fmt.Errorf("%s has no %q section", layoutDoc, layoutHeading)
	}
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	var rows []layoutRow
	for line := range strings.SplitSeq(rest, "\n") {
		if m := rowPath.FindStringSubmatch(line); m != nil {
			rows = append(rows, layoutRow{path: m[1], text: line})
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: the %q section has no table rows", layoutDoc, layoutHeading)
	}
	return rows, nil
}

// listedRow returns the row that lists the package directory dir (module
// relative, slash separated): a row naming dir/ or a file directly in it.
func listedRow(rows []layoutRow, dir string) (layoutRow, bool) {
	for _, r := range rows {
		p := strings.TrimSuffix(r.path, "/")
		if p == dir || (!strings.HasSuffix(r.path, "/") && path.Dir(p) == dir) {
			return r, true
		}
	}
	return layoutRow{}, false
}

// unlisted returns what the file map lacks. A package with a doc.go of its
// own needs a row; a package without one (generated code) is listed by the
// row of the package whose doc.go it follows, which names its path relative
// to that package in backquotes (a "*" in such a name matches one element:
// `kvproto/*`). hasDoc reports whether a directory has a doc.go; dirs are
// the module's package directories, module relative.
func unlisted(rows []layoutRow, dirs []string, hasDoc func(dir string) bool) []string {
	var out []string
	for _, dir := range dirs {
		if hasDoc(dir) {
			if _, ok := listedRow(rows, dir); !ok {
				out = append(out, fmt.Sprintf("package %s has no row in %s's %q", dir, layoutDoc, layoutHeading))
			}
			continue
		}
		owner := dir
		for owner != "." && !hasDoc(owner) {
			owner = path.Dir(owner)
		}
		r, ok := listedRow(rows, owner)
		if !ok {
			out = append(out, fmt.Sprintf("package %s (following %s/doc.go) has no row in %s's %q", dir, owner, layoutDoc, layoutHeading))
			continue
		}
		rel := strings.TrimPrefix(dir, owner+"/")
		named := false
		for _, m := range backquote.FindAllStringSubmatch(r.text, -1) {
			if hit, _ := path.Match(strings.TrimSuffix(m[1], "/"), rel); hit {
				named = true
				break
			}
		}
		if !named {
			out = append(out, fmt.Sprintf("package %s: the row of %s/ in %s does not name `%s`", dir, owner, layoutDoc, rel))
		}
	}
	return out
}

// TestLayoutListsEveryPackage: docs/architecture.md's file map lists every
// package of the module, so a reader finds each one there.
func TestLayoutListsEveryPackage(t *testing.T) {
	module, root, pkgs := listModule(t)
	page, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(layoutDoc)))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := layoutRows(string(page))
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, p := range pkgs {
		if p.ImportPath == module {
			dirs = append(dirs, ".")
			continue
		}
		dirs = append(dirs, strings.TrimPrefix(p.ImportPath, module+"/"))
	}
	hasDoc := func(dir string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(dir), "doc.go"))
		return err == nil
	}
	for _, u := range unlisted(rows, dirs, hasDoc) {
		t.Error(u)
	}
}

// The check itself: rows by directory and by file, generated packages named
// in their owner's row, globs, and each way of missing.
func TestUnlisted(t *testing.T) {
	page := "intro\n\n" + layoutHeading + "\n\n| path | what |\n|---|---|\n" +
		"| `a/` | package a |\n" +
		"| `cmd/b/main.go` | b's main |\n" +
		"| `proto/` | generated: `x/ypb`, `kv/*` |\n" +
		"\n## Next\n\n| `c/` | not in the map |\n"
	rows, err := layoutRows(page)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]bool{"a": true, "cmd/b": true, "proto": true, "c": true, "d": true}
	got := unlisted(rows, []string{"a", "cmd/b", "proto", "proto/x/ypb", "proto/kv/metapb", "c", "d", "proto/z/zpb"},
		func(dir string) bool { return docs[dir] })
	want := []string{
		"package c has no row in docs/architecture.md's \"## Layout and file map\"",
		"package d has no row in docs/architecture.md's \"## Layout and file map\"",
		"package proto/z/zpb: the row of proto/ in docs/architecture.md does not name `z/zpb`",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("unlisted:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := layoutRows("no map here\n"); err == nil {
		t.Error("a page without the section: no error")
	}
}

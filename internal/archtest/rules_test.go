package archtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rulePrefix starts the rule line of a package comment.
const rulePrefix = "Must not import:"

// pkg is one package of the module as go list reports it.
type pkg struct {
	ImportPath string
	Dir        string
	Imports    []string // direct, non-test
	Deps       []string // transitive, non-test
}

// rule is the forbidden import patterns of a package and where they are
// written.
type rule struct {
	from     string // the doc.go, relative to the module root
	patterns []string
}

// parseRule returns the patterns of every rule line in a package comment;
// ok is false when it has none.
func parseRule(doc string) (patterns []string, ok bool, err error) {
	for line := range strings.SplitSeq(doc, "\n") {
		rest, found := strings.CutPrefix(strings.TrimSpace(line), rulePrefix)
		if !found {
			continue
		}
		ok = true
		for p := range strings.SplitSeq(rest, ",") {
			p = strings.TrimSpace(p)
			if p == "" || strings.ContainsAny(p, " \t") {
				return nil, false, fmt.Errorf("rule line %q: bad pattern %q", strings.TrimSpace(line), p)
			}
			patterns = append(patterns, p)
		}
	}
	return patterns, ok, nil
}

// expand makes a pattern a full import path pattern.
func expand(module, pattern string) string {
	first, _, _ := strings.Cut(pattern, "/")
	if strings.Contains(first, ".") {
		return pattern
	}
	return module + "/" + pattern
}

// matches reports whether import path path matches a full pattern.
func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// violations checks every package against its rule. rules maps an import
// path to its rule. A violation names the forbidden package, the direct
// import that leads to it and the rule.
func violations(module string, pkgs []pkg, rules map[string]rule) []string {
	byPath := map[string]pkg{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	var out []string
	for _, p := range pkgs {
		r := rules[p.ImportPath]
		for _, dep := range p.Deps {
			pat, bad := forbids(module, r.patterns, dep)
			if bad {
				how := "directly"
				if !slices.Contains(p.Imports, dep) {
					for _, imp := range p.Imports {
						if slices.Contains(byPath[imp].Deps, dep) {
							how = "through " + imp
							break
						}
					}
				}
				out = append(out, fmt.Sprintf("%s imports %s (%s), which %s forbids (%s)", p.ImportPath, dep, how, r.from, pat))
			}
		}
	}
	return out
}

// forbids reports whether patterns forbid path, and the pattern that does:
// one matches it and no exception (a pattern starting with "!") does.
func forbids(module string, patterns []string, path string) (string, bool) {
	var hit string
	for _, pat := range patterns {
		if except, ok := strings.CutPrefix(pat, "!"); ok {
			if matches(expand(module, except), path) {
				return "", false
			}
		} else if hit == "" && matches(expand(module, pat), path) {
			hit = pat
		}
	}
	return hit, hit != ""
}

// readRule finds the rule of the package in dir: its doc.go's, or for a
// package without one the nearest doc.go's above it, up to root.
func readRule(root, dir string) (rule, error) {
	for d := dir; ; d = filepath.Dir(d) {
		rel, err := filepath.Rel(root, d)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			return rule{}, fmt.Errorf("no doc.go in %s or above it", dir)
		}
		path := filepath.Join(d, "doc.go")
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return rule{}, err
		}
		relDoc := filepath.Join(rel, "doc.go")
		var doc string
		if f.Doc != nil {
			doc = f.Doc.Text()
		}
		patterns, ok, err := parseRule(doc)
		if err != nil {
			return rule{}, fmt.Errorf("%s: %w", relDoc, err)
		}
		if !ok {
			return rule{}, fmt.Errorf("%s: the package comment has no %q line", relDoc, rulePrefix)
		}
		return rule{from: relDoc, patterns: patterns}, nil
	}
}

// listModule returns the module path, its root and every package in it.
func listModule(t *testing.T) (string, string, []pkg) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Path}} {{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	module, root, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	cmd := exec.Command("go", "list", "-json=ImportPath,Dir,Imports,Deps", module+"/...")
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return module, root, pkgs
}

// TestImportRules: no package imports what its doc.go forbids.
func TestImportRules(t *testing.T) {
	module, root, pkgs := listModule(t)
	rules := map[string]rule{}
	for _, p := range pkgs {
		r, err := readRule(root, p.Dir)
		if err != nil {
			t.Errorf("package %s: %v", p.ImportPath, err)
			continue
		}
		rules[p.ImportPath] = r
	}
	for _, v := range violations(module, pkgs, rules) {
		t.Error(v)
	}
}

// The checker itself: a table of rules and import graphs, with the
// violations each must report.
func TestViolations(t *testing.T) {
	const m = "example.com/mod"
	graph := []pkg{
		{ImportPath: m + "/a", Imports: []string{m + "/b"}, Deps: []string{m + "/b", m + "/c/x", "github.com/x/raft"}},
		{ImportPath: m + "/b", Imports: []string{m + "/c/x", "github.com/x/raft"}, Deps: []string{m + "/c/x", "github.com/x/raft"}},
		{ImportPath: m + "/c/x"},
	}
	for _, tc := range []struct {
		name     string
		patterns []string // a's rule
		want     []string
	}{
		{"allowed", []string{"d", "c"}, nil},
		{"direct", []string{"b"}, []string{m + "/a imports " + m + "/b (directly), which a/doc.go forbids (b)"}},
		{"transitive under a tree", []string{"c/..."}, []string{m + "/a imports " + m + "/c/x (through " + m + "/b), which a/doc.go forbids (c/...)"}},
		{"external", []string{"github.com/x/raft/..."}, []string{m + "/a imports github.com/x/raft (through " + m + "/b), which a/doc.go forbids (github.com/x/raft/...)"}},
		{"whole module but an exception", []string{m + "/...", "!c/..."}, []string{m + "/a imports " + m + "/b (directly), which a/doc.go forbids (" + m + "/...)"}},
		{"whole module", []string{m + "/..."}, []string{
			m + "/a imports " + m + "/b (directly), which a/doc.go forbids (" + m + "/...)",
			m + "/a imports " + m + "/c/x (through " + m + "/b), which a/doc.go forbids (" + m + "/...)",
		}},
	} {
		got := violations(m, graph, map[string]rule{m + "/a": {from: "a/doc.go", patterns: tc.patterns}})
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: violations\n%q\nwant\n%q", tc.name, got, tc.want)
		}
	}
}

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want []string
		ok   bool
		err  bool
	}{
		{"Package a does x.\n", nil, false, false},
		{"Package a.\n\nMust not import: cli/..., chunkserver\n", []string{"cli/...", "chunkserver"}, true, false},
		{"Must not import: a\nMust not import: b, c\n", []string{"a", "b", "c"}, true, false},
		{"Must not import: a b\n", nil, false, true},
		{"Must not import: a,, b\n", nil, false, true},
	} {
		got, ok, err := parseRule(tc.doc)
		if (err != nil) != tc.err || ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("parseRule(%q) = %q, %v, %v; want %q, %v, error %v", tc.doc, got, ok, err, tc.want, tc.ok, tc.err)
		}
	}
}

// readRule finds a package's own doc.go rule, falls back to the nearest
// doc.go above, and refuses a doc.go without the line.
func TestReadRule(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a/doc.go", "// Package a.\n//\n// Must not import: b\npackage a\n")
	write("a/gen/gen.go", "package gen\n")
	write("c/doc.go", "// Package c imports what it likes.\npackage c\n")
	if r, err := readRule(root, filepath.Join(root, "a")); err != nil || r.from != "a/doc.go" || !slices.Equal(r.patterns, []string{"b"}) {
		t.Errorf("a: %+v %v", r, err)
	}
	if r, err := readRule(root, filepath.Join(root, "a", "gen")); err != nil || r.from != "a/doc.go" {
		t.Errorf("a/gen: %+v %v", r, err)
	}
	if _, err := readRule(root, filepath.Join(root, "c")); err == nil || !strings.Contains(err.Error(), `c/doc.go: the package comment has no "Must not import:" line`) {
		t.Errorf("c: %v", err)
	}
	if _, err := readRule(root, filepath.Join(root, "d")); err == nil || !strings.Contains(err.Error(), "no doc.go") {
		t.Errorf("d: %v", err)
	}
}

// testOnly are the packages only tests may import: harnesses that start
// in-process clusters or servers, and helpers that import testing.
var testOnly = []string{
	"chunkserver/chunkservertest", "chunkserver/servertest", "copyset/copysettest",
	"internal/objstore/fakes3", "internal/testwait",
}

// TestTestOnlyPackages: no package's non-test code imports a test-only
// package, directly or transitively; test-only packages may import one
// another (a harness waits with testwait).
func TestTestOnlyPackages(t *testing.T) {
	module, _, pkgs := listModule(t)
	for _, p := range pkgs {
		if slices.Contains(testOnly, strings.TrimPrefix(p.ImportPath, module+"/")) {
			continue
		}
		for _, rel := range testOnly {
			path := module + "/" + rel
			if slices.Contains(p.Deps, path) {
				t.Errorf("%s imports the test-only package %s in non-test code", p.ImportPath, path)
			}
		}
	}
}

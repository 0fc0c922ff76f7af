package chunkserver

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Editing a config file in place (ConfigService Set persists through it).
//
// editConfigKey changes one key of a YAML config file and nothing else:
//
//   - key present with a one-line scalar value (block `key: v # c` or inside
//     a flow mapping `{key: v}`): only the value's characters on that line are
//     replaced; what precedes and follows it on the line (indentation, the
//     comment) stays.
//   - key absent: new lines are inserted: the key (and the sections on its
//     path the file lacks) at the end of the deepest section of its path the
//     file has, indented like that section's keys (2 spaces per new level),
//     or at the end of the file when the file has no section of the path.
//
// Every other line stays byte-identical (line endings included). A value
// the file writes over several lines (a block scalar, a multi-line quoted
// string), a key whose section is a flow mapping lacking it, or a file whose
// top level is not a block mapping is refused: the file is left for the
// operator to edit.

// editConfigKey returns data with key set to value, a one-line YAML scalar
// as yaml.Marshal renders it.
func editConfigKey(data []byte, key, value string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("config file is not valid YAML: %w", err)
	}
	eol := "\n"
	if bytes.Contains(data, []byte("\r\n")) {
		eol = "\r\n"
	}
	lines := strings.SplitAfter(string(data), "\n") // each keeps its line ending; the last may have none
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	segs := strings.Split(key, ".")
	if doc.Kind == 0 || len(doc.Content) == 0 || isEmptyNull(doc.Content[0]) {
		// Empty, or comments only: the key goes at the end.
		return []byte(insertLines(lines, len(lines), 0, segs, value, eol)), nil
	}
	cur := doc.Content[0]
	if cur.Kind != yaml.MappingNode || cur.Style&yaml.FlowStyle != 0 {
		return nil, errors.New("its top level is not a block mapping of keys")
	}
	for i, seg := range segs {
		k, v := mappingEntry(cur, seg)
		rest := segs[i:]
		switch {
		case k == nil && cur.Style&yaml.FlowStyle != 0:
			return nil, fmt.Errorf("section %s is a flow mapping ({...}) without %s; add it by hand",
				strings.Join(segs[:i], "."), seg)
		case k == nil && i == 0:
			return []byte(insertLines(lines, len(lines), 0, rest, value, eol)), nil
		case k == nil:
			indent := cur.Content[0].Column - 1
			return []byte(insertLines(lines, lastLine(cur), indent, rest, value, eol)), nil
		case i == len(segs)-1:
			return replaceScalar(lines, key, v, value, cur.Style&yaml.FlowStyle != 0)
		case isEmptyNull(v):
			// "section:" with nothing under it.
			return []byte(insertLines(lines, k.Line, k.Column-1+2, segs[i+1:], value, eol)), nil
		case v.Kind != yaml.MappingNode:
			return nil, fmt.Errorf("%s is not a section of keys", strings.Join(segs[:i+1], "."))
		}
		cur = v
	}
	panic("unreachable")
}

func isEmptyNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null" && n.Value == ""
}

// mappingEntry returns the key and value nodes of seg in mapping m, or nils.
func mappingEntry(m *yaml.Node, seg string) (*yaml.Node, *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == seg {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// lastLine is the last line (1-based) any node under n starts on.
func lastLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}

// insertLines returns lines with new ones after line after (1-based; 0 =
// before the first): each segment of segs on its own line, indent spaces
// deeper by 2 per level, the last one with value.
func insertLines(lines []string, after, indent int, segs []string, value, eol string) string {
	var add strings.Builder
	for j, s := range segs {
		add.WriteString(strings.Repeat(" ", indent+2*j) + s + ":")
		if j == len(segs)-1 {
			add.WriteString(" " + value)
		}
		add.WriteString(eol)
	}
	head := strings.Join(lines[:after], "")
	if head != "" && !strings.HasSuffix(head, "\n") {
		head += eol
	}
	return head + add.String() + strings.Join(lines[after:], "")
}

// replaceScalar replaces the source text of the scalar v on its line.
func replaceScalar(lines []string, key string, v *yaml.Node, value string, inFlow bool) ([]byte, error) {
	if v.Kind != yaml.ScalarNode || v.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return nil, fmt.Errorf("%s's value is not a one-line value in the file; edit it by hand", key)
	}
	line := []rune(lines[v.Line-1])
	start := v.Column - 1
	var end int
	switch {
	case isEmptyNull(v):
		// "key:" with no value: v sits right after the colon.
		end, value = start, " "+value
	case v.Style&yaml.DoubleQuotedStyle != 0:
		end = closingQuote(line, start, '"')
	case v.Style&yaml.SingleQuotedStyle != 0:
		end = closingQuote(line, start, '\'')
	default:
		end = plainEnd(line, start, inFlow)
	}
	if end < 0 || start > len(line) {
		return nil, fmt.Errorf("%s's value is not a one-line value in the file; edit it by hand", key)
	}
	lines[v.Line-1] = string(line[:start]) + value + string(line[end:])
	return []byte(strings.Join(lines, "")), nil
}

// closingQuote returns the index after the quote closing the string that
// opens at line[start], or -1 when it does not close on this line.
func closingQuote(line []rune, start int, q rune) int {
	for i := start + 1; i < len(line); i++ {
		switch {
		case q == '"' && line[i] == '\\':
			i++
		case q == '\'' && line[i] == '\'' && i+1 < len(line) && line[i+1] == '\'':
			i++
		case line[i] == q:
			return i + 1
		}
	}
	return -1
}

// plainEnd returns the index after a plain scalar starting at line[start]:
// it ends before a comment (" #"), the line end, and in a flow mapping
// before ',', '}' or ']'; trailing blanks are not part of it.
func plainEnd(line []rune, start int, inFlow bool) int {
	end := len(line)
	for i := start; i < len(line); i++ {
		c := line[i]
		if c == '\n' || c == '\r' || (c == '#' && i > start && (line[i-1] == ' ' || line[i-1] == '\t')) ||
			(inFlow && (c == ',' || c == '}' || c == ']')) {
			end = i
			break
		}
	}
	for end > start && (line[end-1] == ' ' || line[end-1] == '\t') {
		end--
	}
	return end
}

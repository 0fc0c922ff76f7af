package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Output formats for -o.
const (
	formatTable = "table"
	formatJSON  = "json"
)

func checkFormat(f string) error {
	switch f {
	case formatTable, formatJSON:
		return nil
	}
	return fmt.Errorf("unknown output format %q: want table or json", f)
}

// printer writes command results as an aligned table or as JSON.
type printer struct {
	w      io.Writer
	format string
}

func (p *printer) isJSON() bool { return p.format == formatJSON }

// print writes v as indented JSON, or header and rows as a table.
func (p *printer) print(v any, header []string, rows [][]string) error {
	if p.isJSON() {
		return writeJSON(p.w, v)
	}
	return writeTable(p.w, header, rows)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// writeTable writes tab-aligned columns. Empty cells print as "-".
func writeTable(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	line := func(cells []string) {
		out := make([]string, len(cells))
		for i, c := range cells {
			if c == "" {
				c = "-"
			}
			out[i] = strings.ReplaceAll(c, "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(out, "\t"))
	}
	line(header)
	for _, r := range rows {
		line(r)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// errText is err's message, or "" for nil (JSON "error" fields).
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }
func i64(v int64) string  { return strconv.FormatInt(v, 10) }

func joinComma(s []string) string { return strings.Join(s, ", ") }

package dm

import (
	"strings"
	"testing"
)

// A schema's text form parses to the clone state it names and prints
// back as given; a malformed one names the column where it goes wrong.
func TestParseSchema(t *testing.T) {
	for _, in := range []string{"normal", "clone sn=3 csn=2", "clone sn=3 csn=0 written=0-255,1024,4000-4094"} {
		c, err := ParseSchema(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := SchemaString(c); got != in {
			t.Errorf("%q prints as %q", in, got)
		}
	}
	c, err := ParseSchema("  clone  csn=1 sn=9 written=7 ")
	if err != nil || c.GetSn() != 9 || c.GetCorrectedSn() != 1 || len(c.GetWritten()) != schemaBlocks/8 || c.GetWritten()[0] != 0x80 {
		t.Fatalf("keys in any order: %v %v", c, err)
	}
	if u := blockRanges(c.GetWritten(), false); u != "0-6,8-4095" {
		t.Errorf("unwritten blocks %q", u)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"copy sn=1", `column 1: "copy": want normal or clone`},
		{"normal sn=1", "column 8: normal takes nothing"},
		{"clone sn=x csn=1", `column 10: sn "x" is not a number`},
		{"clone sn=1", "column 11: csn=<n> is missing"},
		{"clone csn=1", "sn=<n> is missing"},
		{"clone sn=0 csn=0", "sn is at least 1"},
		{"clone sn=1 csn=1 sn=2", "column 18: sn given twice"},
		{"clone sn=1 csn=1 size=2", `unknown key "size"`},
		{"clone sn=1 csn=1 written=5-2", "range 5-2 runs backwards"},
		{"clone sn=1 csn=1 written=4096", "block 4096 is past the chunk's last, 4095"},
		{"clone sn=1 csn=1 written=a", `column 26: written: block "a" is not a number`},
		{"clone sn=1 csn=1 written=0-4095", "every block written"},
	} {
		if _, err := ParseSchema(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

package kinds

import "testing"

// The table is log format: numbers unique, none 0, names unique.
func TestTableNumbersUnique(t *testing.T) {
	numbers := map[uint8]string{}
	names := map[string]bool{}
	for _, e := range Table {
		if e.Number == 0 {
			t.Errorf("kind %q has number 0", e.Name)
		}
		if prev, ok := numbers[e.Number]; ok {
			t.Errorf("kind number %d used by %q and %q", e.Number, prev, e.Name)
		}
		if names[e.Name] {
			t.Errorf("kind name %q used twice", e.Name)
		}
		numbers[e.Number], names[e.Name] = e.Name, true
	}
}

// Every constant has its row.
func TestTableListsEveryKind(t *testing.T) {
	rows := map[uint8]string{}
	for _, e := range Table {
		rows[e.Number] = e.Name
	}
	for n, name := range map[uint8]string{Chunk: "chunk", Integrity: "integrity", Fence: "fence", Sync: "sync", Disagg: "disagg", DM: "dm", View: "view", WriteFence: "writefence"} {
		if rows[n] != name {
			t.Errorf("kind %d: table row %q, want %q", n, rows[n], name)
		}
	}
}

package cli

import (
	"reflect"
	"testing"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		bad  bool
	}{
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: " 512 ", want: 512},
		{in: "512b", want: 512},
		{in: "4k", want: 4096},
		{in: "4K", want: 4096},
		{in: "4kb", want: 4096},
		{in: "4KiB", want: 4096},
		{in: "4kib", want: 4096},
		{in: "1m", want: 1 << 20},
		{in: "1MiB", want: 1 << 20},
		{in: "16M", want: 16 << 20},
		{in: "2g", want: 2 << 30},
		{in: "1GiB", want: 1 << 30},
		{in: "1t", want: 1 << 40},
		{in: "4 KiB", want: 4096},
		{in: "", bad: true},
		{in: "k", bad: true},
		{in: "-1", bad: true},
		{in: "1.5k", bad: true},
		{in: "4x", bad: true},
		{in: "4kk", bad: true},
		{in: "0x10", bad: true},
		{in: "99999999999999999999", bad: true},
		{in: "17000000000t", bad: true}, // overflows uint64
	} {
		got, err := ParseSize(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseSize(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSize32(t *testing.T) {
	if v, err := parseSize32("size", "4g"); err == nil {
		t.Errorf("parseSize32(4g) = %d, want an error (> uint32)", v)
	}
	if v, err := parseSize32("size", "16m"); err != nil || v != 16<<20 {
		t.Errorf("parseSize32(16m) = %d, %v", v, err)
	}
}

func TestParseIDList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint32
		bad  bool
	}{
		{in: "7", want: []uint32{7}},
		{in: "0", want: []uint32{0}},
		{in: "1-4", want: []uint32{1, 2, 3, 4}},
		{in: "1,3,8-10", want: []uint32{1, 3, 8, 9, 10}},
		{in: " 2 , 2, 1-2 ", want: []uint32{2, 1}},
		{in: "5-5", want: []uint32{5}},
		{in: "", bad: true},
		{in: ",", bad: true},
		{in: "4-1", bad: true},
		{in: "a", bad: true},
		{in: "1-", bad: true},
		{in: "-3", bad: true},
		{in: "1-100000", bad: true},
		{in: "4294967296", bad: true},
	} {
		got, err := ParseIDList(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseIDList(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseIDList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestIDListErrors: a bad id list is refused naming the part and the rule.
func TestIDListErrors(t *testing.T) {
	const forms = " (want an id, a range or a list: 7, 1-16, 1,3,8-10)"
	for in, want := range map[string]string{
		"4-1":        `range "4-1" ends before it starts`,
		"1,a":        `"a" is not a whole number` + forms,
		"1-":         `range "1-" has no end` + forms,
		"-3":         `range "-3" has no start` + forms,
		"2-x":        `range "2-x": "x" is not a whole number` + forms,
		"4294967296": "id 4294967296 is larger than 4294967295" + forms,
		"1-100000":   `range "1-100000" holds more than 65536 ids`,
		" , ":        `no ids in " , "` + forms,
	} {
		if _, err := ParseIDList(in); err == nil || err.Error() != want {
			t.Errorf("ParseIDList(%q): %v, want %s", in, err, want)
		}
	}
	var id uint32
	v := idValue{&id}
	if err := v.Set("1-3"); err == nil || err.Error() != "this command takes one copyset id, not a list or a range" {
		t.Errorf("Set(1-3): %v", err)
	}
	if err := v.Set("x"); err == nil || err.Error() != `"x" is not a whole number` {
		t.Errorf("Set(x): %v", err)
	}
	if err := v.Set("7"); err != nil || id != 7 || v.String() != "7" {
		t.Errorf("Set(7): %v, id %d", err, id)
	}
}

func TestPeerForms(t *testing.T) {
	for _, tc := range []struct {
		in, id, addr string
		bad          bool
	}{
		{in: "127.0.0.1:8200", id: "127.0.0.1:8200:0", addr: "127.0.0.1:8200"},
		{in: "127.0.0.1:8200:0", id: "127.0.0.1:8200:0", addr: "127.0.0.1:8200"},
		{in: " 10.0.0.5:8201:2 ", id: "10.0.0.5:8201:2", addr: "10.0.0.5:8201"},
		{in: "localhost:8200", id: "localhost:8200:0", addr: "localhost:8200"},
		{in: "[::1]:8200", id: "[::1]:8200:0", addr: "[::1]:8200"},
		{in: "[::1]:8200:0", id: "[::1]:8200:0", addr: "[::1]:8200"},
		{in: "", bad: true},
		{in: "127.0.0.1", bad: true},
		{in: ":8200", bad: true},
		{in: "127.0.0.1:0", bad: true},
		{in: "127.0.0.1:http", bad: true},
		{in: "127.0.0.1:8200:x", bad: true},
		{in: "127.0.0.1:99999", bad: true},
	} {
		id, err := PeerID(tc.in)
		addr, err2 := PeerAddr(tc.in)
		if tc.bad {
			if err == nil || err2 == nil {
				t.Errorf("PeerID/PeerAddr(%q) = %q/%q, want errors", tc.in, id, addr)
			}
			continue
		}
		if err != nil || err2 != nil || id != tc.id || addr != tc.addr {
			t.Errorf("PeerID/PeerAddr(%q) = %q, %q (%v, %v); want %q, %q", tc.in, id, addr, err, err2, tc.id, tc.addr)
		}
	}
}

func TestParsePeerList(t *testing.T) {
	got, err := ParsePeerList("127.0.0.1:8200, 127.0.0.1:8201:0,,")
	if err != nil || !reflect.DeepEqual(got, []string{"127.0.0.1:8200", "127.0.0.1:8201:0"}) {
		t.Errorf("ParsePeerList = %v, %v", got, err)
	}
	if _, err := ParsePeerList("127.0.0.1:8200,127.0.0.1:8200:0"); err == nil {
		t.Error("duplicate peer accepted")
	}
	if _, err := ParsePeerList(" , "); err == nil {
		t.Error("empty list accepted")
	}
}

func TestStateName(t *testing.T) {
	for state, want := range map[uint32]string{1: "Leader", 3: "Candidate", 4: "Follower", 8: "Shutdown", 42: "Unknown(42)"} {
		if got := StateName(state); got != want {
			t.Errorf("StateName(%d) = %q, want %q", state, got, want)
		}
	}
}

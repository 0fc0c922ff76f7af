package copyset

import "testing"

func TestGroupID(t *testing.T) {
	g := NewGroupID(1, 16)
	if g.Pool() != 1 || g.Copyset() != 16 || uint64(g) != 1<<32|16 {
		t.Fatalf("group %d: pool %d copyset %d", g, g.Pool(), g.Copyset())
	}
	back, err := ParseGroupID(g.String())
	if err != nil || back != g {
		t.Fatalf("round trip %v: %v %v", g, back, err)
	}
	if _, err := ParseGroupID("x1"); err == nil {
		t.Fatal("want error for bad group id")
	}
}

func TestParsePeer(t *testing.T) {
	tests := []struct {
		in, id, addr string
		bad          bool
	}{
		{in: "127.0.0.1:8200", id: "127.0.0.1:8200:0", addr: "127.0.0.1:8200"},
		{in: "127.0.0.1:8200:0", id: "127.0.0.1:8200:0", addr: "127.0.0.1:8200"},
		{in: " 10.0.0.1:1 ", id: "10.0.0.1:1:0", addr: "10.0.0.1:1"},
		{in: "127.0.0.1:8200:1", bad: true},
		{in: "127.0.0.1", bad: true},
		{in: ":8200", bad: true},
		{in: "h:0", bad: true},
		{in: "h:99999", bad: true},
		{in: "", bad: true},
	}
	for _, tt := range tests {
		id, addr, err := ParsePeer(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("ParsePeer(%q) = %q, want error", tt.in, id)
			}
			continue
		}
		if err != nil || string(id) != tt.id || addr != tt.addr || id.Addr() != tt.addr {
			t.Errorf("ParsePeer(%q) = %q %q %v, want %q %q", tt.in, id, addr, err, tt.id, tt.addr)
		}
	}
}

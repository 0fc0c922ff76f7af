package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	tests := []struct {
		info Info
		want string
	}{
		{Info{Module: "m", Version: "v1.2.3", Commit: "abc", Time: "2026-01-02T03:04:05Z", Dirty: true, GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"m v1.2.3, commit abc (dirty, 2026-01-02T03:04:05Z), go1.26.8 linux/amd64"},
		{Info{Module: "m", Version: "(devel)", Commit: "abc", GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"m (devel), commit abc, go1.26.8 linux/amd64"},
		{Info{GoVersion: "go1.26.8", Platform: "linux/amd64"},
			"unknown module (unknown version), commit unknown (not built from a VCS checkout), go1.26.8 linux/amd64"},
	}
	for _, tt := range tests {
		if got := tt.info.String(); got != tt.want {
			t.Errorf("got  %q\nwant %q", got, tt.want)
		}
	}
}

func TestReadHasGoVersion(t *testing.T) {
	i := Read()
	if i.GoVersion != runtime.Version() || !strings.HasPrefix(Line("x"), "x ") {
		t.Fatalf("Read() = %+v, Line = %q", i, Line("x"))
	}
}

package chunkstore

import (
	"errors"
	"testing"
)

func TestEpochMap(t *testing.T) {
	dir := t.TempDir()
	e, err := openEpochMap(dir)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		op            string // "update" or "check"
		file, epoch   uint64
		wantErr, want bool
	}{
		{op: "check", file: 5, epoch: 0, want: true}, // never fenced
		{op: "update", file: 5, epoch: 2},
		{op: "check", file: 5, epoch: 1, want: false},
		{op: "check", file: 5, epoch: 2, want: true},
		{op: "check", file: 5, epoch: 3, want: true},
		{op: "update", file: 5, epoch: 1, wantErr: true},
		{op: "update", file: 5, epoch: 2},
		{op: "update", file: 6, epoch: 9},
		{op: "check", file: 6, epoch: 8, want: false},
	}
	for i, s := range steps {
		switch s.op {
		case "update":
			err := e.update(s.file, s.epoch)
			if s.wantErr != (err != nil) || (err != nil && !errors.Is(err, errEpochTooOld)) {
				t.Fatalf("step %d update(%d,%d) = %v", i, s.file, s.epoch, err)
			}
		case "check":
			if got := e.allowed(s.file, s.epoch); got != s.want {
				t.Fatalf("step %d allowed(%d,%d) = %v", i, s.file, s.epoch, got)
			}
		}
	}
	// Survives a restart.
	e2, err := openEpochMap(dir)
	if err != nil {
		t.Fatal(err)
	}
	if e2.allowed(5, 1) || !e2.allowed(5, 2) || e2.allowed(6, 8) {
		t.Fatalf("reloaded map %v", e2.table())
	}
}

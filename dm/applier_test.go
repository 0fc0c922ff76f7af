package dm

import (
	"context"
	"testing"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
)

// A packet missing when read and a later one listed is a gap, unless the
// listing holds the missing one too: it was written between the read and
// the listing (the export writes a copyset's packets in order).
func TestLaterPacket(t *testing.T) {
	ctx := context.Background()
	u, err := dest.Parse("file://" + t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d, err := dest.Open(ctx, u, objstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a := &applier{src: d, srcPool: 1, srcCs: 2}
	at := func(i uint64) string { return exportfmt.PacketName(1, 2, exportfmt.BinlogPoint(i)) }
	if err := d.Put(ctx, at(27), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if later, err := a.laterPacket(ctx, at(23)); err != nil || later != at(27) {
		t.Fatalf("23 missing, 27 there: %q %v; want a gap before %s", later, err, at(27))
	}
	if err := d.Put(ctx, at(23), []byte("x")); err != nil {
		t.Fatal(err)
	}
	if later, err := a.laterPacket(ctx, at(23)); err != nil || later != "" {
		t.Fatalf("23 written since: %q %v; want no gap", later, err)
	}
	if later, err := a.laterPacket(ctx, at(30)); err != nil || later != "" {
		t.Fatalf("nothing after 30: %q %v", later, err)
	}
}

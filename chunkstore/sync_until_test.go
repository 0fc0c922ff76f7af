package chunkstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/datasync"
	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/datasync/restore"
	"github.com/chunkraft/chunkraft/internal/chunkop"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// The earliest time a restore --until-time restores, end to end: the
// exporter of a real copyset records when its starting state was taken,
// and sync/restore refuses an earlier time naming the earliest, whether or
// not a write landed during the snapshot phase.

// errNoTarget is what targetless's ops answer: a restore that returns it
// got past its check pass.
var errNoTarget = errors.New("no target in this test")

// targetless is a restore.Target for restores that must stop in their
// check pass.
type targetless struct{}

func (targetless) CheckEmpty(context.Context, uint32, uint32) error { return errNoTarget }
func (targetless) WriteChunk(context.Context, restore.Chunk, uint32, []byte, uint64) (restore.Outcome, error) {
	return 0, errNoTarget
}
func (targetless) DeleteChunk(context.Context, restore.Chunk, uint64) (restore.Outcome, error) {
	return 0, errNoTarget
}
func (targetless) DeleteChunkSnapshotOrCorrectSn(context.Context, restore.Chunk, uint64) (restore.Outcome, error) {
	return 0, errNoTarget
}
func (targetless) ChunkExists(context.Context, restore.Chunk) (bool, error) {
	return false, errNoTarget
}

// TestExportRefusesRestoreBeforeItsStart: chunks are written, then, once
// the clock has passed T, a block first written after T; then a kFull
// export runs. A restore --until-time T is refused naming the export's
// earliest time in both forms the flag takes: its starting state's time
// when no write landed during the snapshot phase, and when one did (a
// write to chunk 3 while chunk 1's packet is sent, before chunk 3's
// image), the time that write was appended. One millisecond before the
// earliest time is refused too; at it the check passes.
func TestExportRefusesRestoreBeforeItsStart(t *testing.T) {
	for _, busy := range []bool{false, true} {
		name := "no write in the snapshot phase"
		if busy {
			name = "a write in the snapshot phase"
		}
		t.Run(name, func(t *testing.T) {
			_, _, src, _ := exportCopyset(t, copysettest.FastRaft())
			ctx := t.Context()
			write := func(chunk uint64, off uint32, b byte) uint64 {
				t.Helper()
				data := bytes.Repeat([]byte{b}, int(conformanceLayout.BlockSize))
				op, err := chunkop.Encode(&pb.ChunkRequest{OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_WRITE.Enum(), LogicPoolId: new(uint32(1)),
					CopysetId: new(uint32(1)), ChunkId: new(chunk), Sn: new(uint64(1)), Offset: new(off), Size: new(uint32(len(data)))}, data, nil)
				if err != nil {
					t.Fatal(err)
				}
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				index, _, err := src.n.Propose(pctx, op) // returns once applied here
				if err != nil {
					t.Fatal(err)
				}
				return index
			}
			for c := uint64(1); c <= 3; c++ {
				write(c, 0, byte(c))
			}
			before := time.Now().UnixMilli()
			testwait.Until(t, time.Second, func() error {
				if now := time.Now().UnixMilli(); now <= before {
					return fmt.Errorf("the clock is at %d ms, not past %d", now, before)
				}
				return nil
			})
			write(1, conformanceLayout.BlockSize, 9) // appended after before

			var packets []datasync.Packet
			var busyIndex uint64
			send := func(_ context.Context, p datasync.Packet) error {
				p.Data = bytes.Clone(p.Data)
				packets = append(packets, p)
				// Chunk 1's packet is sent once chunk 2 is imaged (each
				// chunk is a packet of its own), before chunk 3 is.
				if busy && busyIndex == 0 && p.Data != nil && p.Start.GetType() == dspb.SyncType_kSNAPSHOT {
					busyIndex = write(3, conformanceLayout.BlockSize, 7)
				}
				return nil
			}
			if err := datasync.Export(ctx, src, exportfmt.StartPoint().Proto(), 0,
				datasync.ExportOptions{Mode: dspb.SyncMode_kFull, PacketBytes: 1, Linger: -1}, send); err != nil {
				t.Fatal(err)
			}
			start := packets[0].StartStateMs
			if start < before || packets[0].BinlogStart == 0 {
				t.Fatalf("the export's start time %d ms (binlog start %d) is not after %d ms", start, packets[0].BinlogStart, before)
			}

			// The export as its SyncTool writes it, and what it says.
			u, err := dest.Parse("file://" + t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			d, err := dest.Open(ctx, u, objstore.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			earliest, maxAsOf, logged := start, uint64(0), false
			for _, p := range packets {
				if p.Data == nil {
					continue // a heartbeat
				}
				dp, err := exportfmt.Decode(p.Data)
				if err != nil {
					t.Fatal(err)
				}
				if err := d.Put(ctx, exportfmt.PacketName(1, 1, dp.Start), p.Data); err != nil {
					t.Fatal(err)
				}
				for _, r := range dp.Records {
					maxAsOf = max(maxAsOf, r.GetSnapshot().GetAsOfIndex())
					if bl := r.GetBinlog(); bl != nil && busy && bl.Index == busyIndex {
						earliest, logged = max(start, bl.AppendedAtMs), true
					}
				}
			}
			if wrote := maxAsOf >= packets[0].BinlogStart; wrote != busy {
				t.Fatalf("an image as of index %d, binlog start %d: a write in the snapshot phase is %v, want %v", maxAsOf, packets[0].BinlogStart, wrote, busy)
			}
			if busy && !logged {
				t.Fatalf("the write at index %d in the snapshot phase is not in the binlog", busyIndex)
			}

			restoreUntil := func(ms int64) error {
				_, err := restore.Restore(ctx, restore.Options{Source: d, Pool: 1, ToPool: 2, Target: targetless{},
					Geometry:    restore.Geometry{ChunkSize: conformanceLayout.ChunkSize, BlockSize: conformanceLayout.BlockSize},
					UntilTimeMs: ms, HasUntilTime: true})
				return err
			}
			want := fmt.Sprintf("cannot be restored from this export: the earliest time it can restore is %s (Unix ms %d)",
				time.UnixMilli(earliest).UTC().Format("2006-01-02T15:04:05.000Z07:00"), earliest)
			for _, ms := range []int64{before, earliest - 1} {
				if err := restoreUntil(ms); err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("restore until %d ms: %v, want an error with %q", ms, err, want)
				}
			}
			if err := restoreUntil(earliest); !errors.Is(err, errNoTarget) {
				t.Errorf("restore until the earliest time %d ms: %v, want it past the check (%v)", earliest, err, errNoTarget)
			}
		})
	}
}

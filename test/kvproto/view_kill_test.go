package kvproto

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	kvcop "github.com/pingcap/kvproto/pkg/coprocessor"
	kvdisagg "github.com/pingcap/kvproto/pkg/disaggregated"
	kvmeta "github.com/pingcap/kvproto/pkg/metapb"
	kvtikv "github.com/pingcap/kvproto/pkg/tikvpb"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/internal/testwait"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
)

// chunkctl runs chunkctl against the servers.
func chunkctl(t *testing.T, ctx context.Context, addrs []string, args ...string) []byte {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "chunkctl"), append([]string{"--servers", strings.Join(addrs, ",")}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("chunkctl %v: %v\n%s", args, err, out)
	}
	return out
}

// writeChunk writes data at off of chunk id of copyset 1/1 with chunkctl.
func writeChunk(t *testing.T, ctx context.Context, addrs []string, id uint64, off int, data []byte) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	chunkctl(t, ctx, addrs, "chunk", "write", "--pool", "1", "--copyset", "1", "--chunk", fmt.Sprint(id), "--offset", fmt.Sprint(off), "--in", f)
}

// copysetEpoch is copyset 1/1's epoch as its replicas report it.
func copysetEpoch(t *testing.T, ctx context.Context, addrs []string) uint64 {
	t.Helper()
	var rows []struct {
		Epoch uint64 `json:"epoch"`
	}
	out := chunkctl(t, ctx, addrs, "copyset", "status", "--pool", "1", "--copyset", "1", "-o", "json")
	if err := json.Unmarshal(out, &rows); err != nil || len(rows) == 0 {
		t.Fatalf("copyset status: %v\n%s", err, out)
	}
	return rows[0].Epoch
}

// fetchPages fetches segment 1/1 of task from c: the pages by id, or the
// error packet's message.
func fetchPages(ctx context.Context, c kvtikv.TikvClient, meta *kvdisagg.DisaggTaskMeta, ids []uint64) (map[uint64][]byte, string, error) {
	st, err := c.FetchDisaggPages(ctx, &kvdisagg.FetchDisaggPagesRequest{SnapshotId: meta, TableId: 1, SegmentId: 1, PageIds: ids})
	if err != nil {
		return nil, "", err
	}
	pages := map[uint64][]byte{}
	for {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return pages, "", nil
		}
		if err != nil {
			return nil, "", err
		}
		if p.GetError() != nil {
			return nil, p.GetError().GetMsg(), nil
		}
		for _, b := range p.GetPages() {
			var pg vpb.Page
			if err := proto.Unmarshal(b, &pg); err != nil {
				return nil, "", err
			}
			pages[pg.GetPageId()] = pg.GetData()
		}
	}
}

// TestViewSurvivesLeaderKill: pingcap/kvproto's client establishes a read
// view on the leader of copyset 1/1; every block is then overwritten and
// one chunk deleted; the leader is killed with SIGKILL; the new leader
// serves exactly the bytes as of the establish.
func TestViewSurvivesLeaderKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	procs, _, _, clients := s3Servers(t, ctx, 3)
	var addrs []string
	for _, p := range procs {
		addrs = append(addrs, p.Addr)
	}
	orig := map[uint64][]byte{}
	for id := uint64(1); id <= 2; id++ {
		data := make([]byte, 3*4096)
		for i := range data {
			data[i] = byte(id*31) + byte(i/4096)*7 + 1
		}
		writeChunk(t, ctx, addrs, id, 4096, data)
		for b := range 3 {
			orig[id<<20|uint64(1+b)] = data[b*4096 : (b+1)*4096]
		}
	}
	epoch := copysetEpoch(t, ctx, addrs)
	meta := &kvdisagg.DisaggTaskMeta{StartTs: 400, TaskId: 9, ExecutorId: "scan"}
	req := &kvdisagg.EstablishDisaggTaskRequest{Meta: meta, TimeoutS: 600, Regions: []*kvcop.RegionInfo{{
		RegionId: 1<<32 | 1, RegionEpoch: &kvmeta.RegionEpoch{ConfVer: epoch},
		Ranges: []*kvcop.KeyRange{{Start: binary.BigEndian.AppendUint64(nil, 1), End: binary.BigEndian.AppendUint64(nil, 100)}}}}}
	leader := -1
	var seg *vpb.Segment
	end, _ := ctx.Deadline()
	testwait.Until(t, time.Until(end), func() error {
		for i, c := range clients {
			resp, err := c.EstablishDisaggTask(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetError().GetErrorOther() != nil {
				t.Fatalf("establish: %v", resp.GetError())
			}
			if resp.GetError() != nil {
				continue
			}
			var tb vpb.Table
			if len(resp.GetTables()) != 1 || proto.Unmarshal(resp.GetTables()[0], &tb) != nil || len(tb.GetSegments()) != 1 {
				t.Fatalf("tables %v", resp.GetTables())
			}
			leader, seg = i, tb.GetSegments()[0]
			return nil
		}
		return errors.New("no server established the view as the leader")
	})
	if len(seg.GetPageIds()) != len(orig) {
		t.Fatalf("the view lists %d pages, %d were written", len(seg.GetPageIds()), len(orig))
	}
	writeChunk(t, ctx, addrs, 1, 0, bytes.Repeat([]byte{0xaa}, 8*4096))
	writeChunk(t, ctx, addrs, 2, 4096, bytes.Repeat([]byte{0xbb}, 3*4096))
	chunkctl(t, ctx, addrs, "chunk", "delete", "--pool", "1", "--copyset", "1", "--chunk", "2")

	if err := procs[leader].Kill(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, time.Until(end), func() error {
		for i, c := range clients {
			if i == leader {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			pages, msg, err := fetchPages(cctx, c, meta, seg.GetPageIds())
			cancel()
			if err != nil || strings.Contains(msg, "not found") || strings.Contains(msg, "not led") {
				continue // not the leader (yet)
			}
			if msg != "" {
				t.Fatalf("fetch from the new leader: %s", msg)
			}
			for id, want := range orig {
				if !bytes.Equal(pages[id], want) {
					t.Fatalf("page %d from the new leader differs from its content at establish", id)
				}
			}
			return nil
		}
		return errors.New("no new leader served the view")
	})
}

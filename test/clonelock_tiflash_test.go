package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/objstore"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	"github.com/chunkraft/chunkraft/proto/kvproto/tikvpb"
)

// TestCloneSourceKeptFromTiflashGc: an @s3 clone whose source is a TiFlash
// data file keeps TiFlash's GC off it as it keeps disagg gc off it:
// tryMarkDelete is a conflict naming the clone, and so is disagg gc's
// mark; once the clone is deleted and its lock released after the grace,
// tryMarkDelete succeeds and writes the .del, and a new clone of the
// marked file is refused.
func TestCloneSourceKeptFromTiflashGc(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, st := s3CloneCluster(t, ctx, 1, "tiflash")
	c.createCopysets(t, 1) // 1/1, the lock copyset
	cc, err := grpc.NewClient(c.procs[0].Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	tikv := tikvpb.NewTikvClient(cc)
	const key = "s9/data/dat_1_0"
	if err := st.Put(ctx, key, bytes.NewReader([]byte("data")), 4); err != nil {
		t.Fatal(err)
	}
	clone := cli.ChunkID{CopysetID: cli.CopysetID{Pool: pool, Copyset: 1}, Chunk: 100}
	if err := c.client.CreateCloneChunk(ctx, clone, key+"@s3", 1, 0); err != nil {
		t.Fatal(err)
	}
	mark := func() *dpb.S3LockResult {
		t.Helper()
		resp, err := tikv.TryMarkDelete(ctx, &dpb.TryMarkDeleteRequest{DataFileKey: []byte(key)})
		if err != nil {
			t.Fatalf("tryMarkDelete: %v", err)
		}
		return resp.GetResult()
	}
	holder := fmt.Sprintf("clone:%d/1/100", pool)
	if r := mark(); r.GetConflict().GetReason() != "data file is locked, key="+key+" lock_by="+holder {
		t.Fatalf("tryMarkDelete of a clone's source: %v", r)
	}
	r, err := c.client.DisaggGc(ctx, "s9/", 0)
	if err != nil || len(r.GetLocked()) != 1 || r.GetLocked()[0].GetLockBy() != holder || len(r.GetMarked())+len(r.GetRemoved()) != 0 {
		t.Fatalf("disagg gc of a clone's source: %v %v", r, err)
	}
	if err := c.client.DeleteChunk(ctx, clone, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the clone lock released", func() (bool, error) {
		h, err := cloneHolders(ctx, c.client, "s9/")
		return err == nil && len(h) == 0, err
	})
	if r := mark(); r.GetSuccess() == nil {
		t.Fatalf("tryMarkDelete once the clone is gone: %v", r)
	}
	if _, err := st.Stat(ctx, key+".del"); err != nil {
		t.Fatalf("the .del: %v", err)
	}
	err = c.client.CreateCloneChunk(ctx, cli.ChunkID{CopysetID: clone.CopysetID, Chunk: 101}, key+"@s3", 1, 0)
	if err == nil || !strings.Contains(err.Error(), "mark deleted") {
		t.Fatalf("a clone of a marked data file: %v", err)
	}
	if _, err := st.Stat(ctx, key); errors.Is(err, objstore.ErrNotExist) {
		t.Fatal("the data file went before any gc removed it")
	}
}

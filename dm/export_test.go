package dm

import (
	"context"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	cspb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// SetAfterGroupHook sets the applier's test seam (afterGroupHook) for the
// external tests, which alone can start a cluster. Set it before the
// cluster starts and clear it after the cluster stopped.
func SetAfterGroupHook(h func(ctx context.Context, n *copyset.Node, reqs []*cspb.ChunkRequest, adv *pb.Advance) error) {
	afterGroupHook = h
}

package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/location"
	"github.com/chunkraft/chunkraft/internal/objstore"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// cloneLocation is a parsed clone source (internal/location), with the
// source copyset as a group id. Source bytes past the end of the source
// chunk or object read as zeros.
type cloneLocation struct {
	s3     bool
	object string
	group  copyset.GroupID
	chunk  uint64
	offset uint64
}

func parseLocation(s string) (cloneLocation, error) {
	l, err := location.Parse(s)
	if err != nil {
		return cloneLocation{}, err
	}
	if l.Kind == location.S3 {
		return cloneLocation{s3: true, object: l.Object}, nil
	}
	return cloneLocation{group: copyset.NewGroupID(l.Pool, l.Copyset), chunk: l.Chunk, offset: l.Offset}, nil
}

// cloneSource reads the source bytes of clone chunks: objects from the
// object store, chunks of this cluster through the source copyset's leader
// (this server's own replica when it leads, else over gRPC). It never runs
// inside raft apply.
type cloneSource struct {
	copysets *copyset.Manager
	objects  objstore.Store
	seeds    []string // servers asked for leaders of copysets not hosted here
	local    func(ctx context.Context, n *copyset.Node, chunk uint64, p []byte, off uint32) error
	dial     func(addr string) (*grpc.ClientConn, error) // the server's connections to other servers
}

// fetch fills p with the source bytes for clone data offset off.
func (c *cloneSource) fetch(ctx context.Context, loc cloneLocation, p []byte, off uint32) error {
	if loc.s3 {
		n, err := c.objects.ReadAt(ctx, loc.object, p, int64(off))
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("clone source %s@s3: %w", loc.object, err)
		}
		clear(p[n:])
		return nil
	}
	start := loc.offset + uint64(off)
	clear(p)
	if start >= 16<<20 {
		return nil
	}
	want := p
	if start+uint64(len(p)) > 16<<20 {
		want = p[:16<<20-start]
	}
	return c.readChunk(ctx, loc.group, loc.chunk, want, uint32(start))
}

// readChunk reads a chunk of this cluster linearizably from its leader; a
// missing chunk reads as zeros.
func (c *cloneSource) readChunk(ctx context.Context, g copyset.GroupID, chunk uint64, p []byte, off uint32) error {
	var leader string
	if n := c.copysets.Get(g); n != nil {
		if n.IsLeader() {
			return c.local(ctx, n, chunk, p, off)
		}
		leader = n.Leader().Addr()
	}
	candidates := c.seeds
	if leader != "" {
		candidates = append([]string{leader}, c.seeds...)
	}
	var lastErr error = fmt.Errorf("copyset %d/%d is not hosted here and no clone_source_servers are configured", g.Pool(), g.Copyset())
	for hops, i := 0, 0; i < len(candidates) && hops < 8; hops++ {
		addr := candidates[i]
		conn, err := c.dial(addr)
		if err != nil {
			lastErr = err
			i++
			continue
		}
		resp, err := pb.NewChunkServiceClient(conn).ReadChunk(ctx, &pb.ChunkRequest{
			OpType: pb.CHUNK_OP_TYPE_CHUNK_OP_READ.Enum(), LogicPoolId: proto.Uint32(g.Pool()),
			CopysetId: proto.Uint32(g.Copyset()), ChunkId: proto.Uint64(chunk),
			Offset: proto.Uint32(off), Size: proto.Uint32(uint32(len(p))),
		})
		if err != nil {
			lastErr = fmt.Errorf("read source from %s: %w", addr, err)
			i++
			continue
		}
		switch resp.GetStatus() {
		case pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
			copy(p, resp.GetData())
			return nil
		case pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST:
			return nil
		case pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED:
			if r := resp.GetRedirect(); r != "" {
				candidates = append([]string{copyset.PeerID(r).Addr()}, candidates[i+1:]...)
				i = 0
				continue
			}
		}
		lastErr = fmt.Errorf("read source chunk %d of copyset %d/%d from %s: %v", chunk, g.Pool(), g.Copyset(), addr, resp.GetStatus())
		i++
	}
	return lastErr
}

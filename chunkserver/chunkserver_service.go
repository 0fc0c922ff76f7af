package chunkserver

import (
	"context"

	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/protobuf/proto"
)

// chunkServerService implements curve.chunkserver.ChunkServerService.
type chunkServerService struct {
	pb.UnimplementedChunkServerServiceServer
	rt *runtimeState
}

// ChunkServerStatus reports copysetLoadFin: true once every copyset found
// on disk at startup is loaded and caught up with its leader (see
// loadCheck); false before, and again while the server shuts down.
// Copysets created after startup do not count (as upstream).
func (s *chunkServerService) ChunkServerStatus(ctx context.Context, req *pb.ChunkServerStatusRequest) (*pb.ChunkServerStatusResponse, error) {
	return &pb.ChunkServerStatusResponse{CopysetLoadFin: proto.Bool(s.rt.load.fin.Load())}, nil
}

// CopysetLoadFinished reports what ChunkServerStatus answers: whether every
// copyset on disk at startup is loaded and caught up with its leader.
func (s *Server) CopysetLoadFinished() bool { return s.rt.load.fin.Load() }

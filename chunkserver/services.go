package chunkserver

import (
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// curveServices are the Curve chunkserver services of the host that
// NewWithSeams builds (ChunkService is the chunk store's).
type curveServices struct {
	copysets *copysetService
	cli      *cliService2
}

// registerServices registers every gRPC service the server answers on
// s.grpc: the host's here, each tenant's by its Register. The server's
// parts (s.tenants, s.rt, s.trans, s.health) are set up before.
func (s *Server) registerServices(curve curveServices) {
	g := s.grpc
	// The Curve chunkserver protocol.
	pb.RegisterCopysetServiceServer(g, curve.copysets)
	pb.RegisterCliService2Server(g, curve.cli)
	pb.RegisterCliServiceServer(g, &cliService{core: curve.cli})
	pb.RegisterChunkServerServiceServer(g, &chunkServerService{rt: s.rt})
	// chunkraft's own: runtime configuration, integrity jobs and range
	// scans (package integrity).
	pb.RegisterConfigServiceServer(g, &configService{rt: s.rt})
	// The tenants: the chunk store (ChunkService; Fences between
	// servers), integrity jobs and range scans (IntegrityService,
	// ScanService), the sync service (openmldb.datasync's DataCollector and
	// SyncTool, SyncInternal between servers), the disagg service
	// (tikvpb.Tikv's lock service, GetDisaggConfig and read views, its
	// other methods Unimplemented; DisaggInternal, DisaggViews), the dm
	// service (pb.Worker; DMInternal between servers).
	for _, t := range s.tenants {
		t.Register(g)
	}
	// Between chunkservers: raft traffic of every copyset, the cluster
	// map (cluster_map.go).
	s.trans.Register(g)
	clusterpb.RegisterClusterServer(g, s.cluster)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
}

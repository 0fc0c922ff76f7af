package chunkserver

import (
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"
)

// role is what a caller must hold to call an RPC when TLS is on. Without
// TLS no role is checked.
type role int

const (
	// roleAny: any client with a certificate signed by the CA (data RPCs,
	// reads of state).
	roleAny role = iota
	// roleAdmin: a certificate whose Subject OU is tls.admin_ou.
	roleAdmin
)

func (r role) String() string {
	if r == roleAdmin {
		return "admin"
	}
	return "any"
}

// methodRoles maps a full gRPC method name, or a whole service as
// "/package.Service/", to the role it requires. A method found neither way
// requires admin (closed by default: a new RPC is admin until listed).
var methodRoles = map[string]role{
	// Data path and reads of state.
	"/curve.chunkserver.ChunkService/":                        roleAny,
	"/curve.chunkserver.CliService2/GetLeader":                roleAny,
	"/curve.chunkserver.CliService/get_leader":                roleAny,
	"/curve.chunkserver.CopysetService/GetCopysetStatus":      roleAny,
	"/curve.chunkserver.ConfigService/Get":                    roleAny,
	"/curve.chunkserver.ConfigService/Dump":                   roleAny,
	"/curve.chunkserver.IntegrityService/ListJobs":            roleAny,
	"/curve.chunkserver.ChunkServerService/ChunkServerStatus": roleAny,
	"/chunkraft.cluster.Cluster/ClusterMap":                   roleAny,
	"/grpc.health.v1.Health/":                                 roleAny,
	"/grpc.reflection.v1.ServerReflection/":                   roleAny,
	"/grpc.reflection.v1alpha.ServerReflection/":              roleAny,
	// The seed protocols' services, as upstream serves them (no roles).
	"/openmldb.datasync.DataCollector/": roleAny,
	"/openmldb.datasync.SyncTool/":      roleAny,
	"/pb.Worker/":                       roleAny,
	"/tikvpb.Tikv/":                     roleAny,

	// Membership and leadership.
	"/curve.chunkserver.CliService2/AddPeer":        roleAdmin,
	"/curve.chunkserver.CliService2/RemovePeer":     roleAdmin,
	"/curve.chunkserver.CliService2/ChangePeers":    roleAdmin,
	"/curve.chunkserver.CliService2/ResetPeer":      roleAdmin,
	"/curve.chunkserver.CliService2/TransferLeader": roleAdmin,
	"/curve.chunkserver.CliService/add_peer":        roleAdmin,
	"/curve.chunkserver.CliService/remove_peer":     roleAdmin,
	"/curve.chunkserver.CliService/change_peers":    roleAdmin,
	"/curve.chunkserver.CliService/reset_peer":      roleAdmin,
	"/curve.chunkserver.CliService/transfer_leader": roleAdmin,
	// Snapshot triggers.
	"/curve.chunkserver.CliService2/Snapshot":    roleAdmin,
	"/curve.chunkserver.CliService2/SnapshotAll": roleAdmin,
	"/curve.chunkserver.CliService/snapshot":     roleAdmin,
	// Copyset creation and deletion.
	"/curve.chunkserver.CopysetService/CreateCopysetNode":   roleAdmin,
	"/curve.chunkserver.CopysetService/CreateCopysetNode2":  roleAdmin,
	"/curve.chunkserver.CopysetService/DeleteBrokenCopyset": roleAdmin,
	// Runtime configuration and integrity jobs.
	"/curve.chunkserver.ConfigService/Set":            roleAdmin,
	"/curve.chunkserver.IntegrityService/ScheduleJob": roleAdmin,
	"/curve.chunkserver.IntegrityService/CancelJob":   roleAdmin,
	"/curve.chunkserver.IntegrityService/PauseJob":    roleAdmin,
	"/curve.chunkserver.IntegrityService/ResumeJob":   roleAdmin,
	// Server to server: raft traffic, scan maps, epoch fences and the
	// cluster map's crawl (server certs are admin).
	"/chunkraft.raft.RaftTransport/":               roleAdmin,
	"/chunkraft.raft.Fences/":                      roleAdmin,
	"/chunkraft.cluster.Cluster/LocalCopysets":     roleAdmin,
	"/curve.chunkserver.ScanService/FollowScanMap": roleAdmin,
}

// requiredRole looks fullMethod ("/package.Service/Method") up in
// methodRoles: the method, then its service, else admin.
func requiredRole(fullMethod string) role {
	if r, ok := methodRoles[fullMethod]; ok {
		return r
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
		if r, ok := methodRoles[fullMethod[:i+1]]; ok {
			return r
		}
	}
	return roleAdmin
}

// authorizer checks the caller's verified certificate against the role
// of the method. The TLS handshake has already refused callers without a
// valid certificate.
type authorizer struct {
	adminOU string
}

func (a authorizer) check(ctx context.Context, fullMethod string) error {
	need := requiredRole(fullMethod)
	if need == roleAny {
		return nil
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return grpcstatus.Errorf(codes.PermissionDenied, "%s requires the admin role: no peer information", fullMethod)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return grpcstatus.Errorf(codes.PermissionDenied, "%s requires the admin role: no verified client certificate", fullMethod)
	}
	leaf := info.State.VerifiedChains[0][0]
	if slices.Contains(leaf.Subject.OrganizationalUnit, a.adminOU) {
		return nil
	}
	return grpcstatus.Errorf(codes.PermissionDenied,
		"%s requires the admin role: client certificate %q has no OU=%s", fullMethod, leaf.Subject.String(), a.adminOU)
}

func (a authorizer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (a authorizer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := a.check(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}

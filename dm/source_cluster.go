package dm

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// A cluster source: the task's source pool is on another chunkraft
// cluster (source.cluster, its seeds). start-task creates a continuous
// sync task named dm-<task> on the source pool, exporting to
// source.relay, and the appliers read the relay as they read an export;
// stop-task deletes it. The relay is the export: there is no second copy.

// relayTaskName is the name of the sync task a task with a cluster source
// creates on its source pool.
func relayTaskName(task string) string { return "dm-" + task }

// onSource runs call on the first of the source cluster's seeds that
// answers.
func (s *Service) onSource(ctx context.Context, cfg *pb.TaskConfig, call func(ctx context.Context, cc *grpc.ClientConn) error) error {
	var errs []error
	for _, seed := range cfg.GetSource().GetCluster() {
		conn, err := s.deps.Dial(seed)
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			err = call(cctx, conn)
			cancel()
		}
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", seed, err))
	}
	return fmt.Errorf("source cluster: no seed answered: %w", errors.Join(errs...))
}

// sourceClusterCopysets lists the copysets of the source pool, as the
// source cluster's map has them (no packets yet: the relay task exports
// them once started).
func (s *Service) sourceClusterCopysets(ctx context.Context, cfg *pb.TaskConfig) (map[uint32]bool, error) {
	out := map[uint32]bool{}
	err := s.onSource(ctx, cfg, func(ctx context.Context, cc *grpc.ClientConn) error {
		cm, err := clusterpb.NewClusterClient(cc).ClusterMap(ctx, &clusterpb.ClusterMapRequest{})
		if err != nil {
			return err
		}
		for _, c := range cm.GetCopysets() {
			if c.GetPool() == cfg.GetSource().GetPool() {
				out[c.GetCopyset()] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the source cluster has no copysets of pool %d", cfg.GetSource().GetPool())
	}
	return out, nil
}

// createRelayTask creates the task's sync task on the source pool; one of
// that name there already (a start-task run again) counts as created.
func (s *Service) createRelayTask(ctx context.Context, cfg *pb.TaskConfig) error {
	req := &dspb.CreateSyncTaskRequest{Db: proto.String(strconv.FormatUint(uint64(cfg.GetSource().GetPool()), 10)),
		Name: proto.String(relayTaskName(cfg.GetName())), Mode: dspb.SyncMode_kFullAndContinuous.Enum(), Dest: proto.String(cfg.GetSource().GetRelay())}
	if ms := cfg.GetSource().GetSendIntervalMs(); ms > 0 {
		req.SendIntervalMs = proto.Uint32(ms)
	}
	return s.onSource(ctx, cfg, func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := dspb.NewSyncToolClient(cc).CreateSyncTask(ctx, req)
		switch {
		case err != nil:
			return err
		case resp.GetCode() != 0 && !strings.Contains(resp.GetMsg(), "already exists"):
			return fmt.Errorf("create sync task %s on the source pool: %s", req.GetName(), resp.GetMsg())
		}
		return nil
	})
}

// deleteRelayTask deletes the task's sync task on the source pool; none
// there counts as deleted.
func (s *Service) deleteRelayTask(ctx context.Context, cfg *pb.TaskConfig) error {
	req := &dspb.DeleteSyncTaskRequest{Db: proto.String(strconv.FormatUint(uint64(cfg.GetSource().GetPool()), 10)),
		Name: proto.String(relayTaskName(cfg.GetName()))}
	return s.onSource(ctx, cfg, func(ctx context.Context, cc *grpc.ClientConn) error {
		resp, err := dspb.NewSyncToolClient(cc).DeleteSyncTask(ctx, req)
		switch {
		case err != nil:
			return err
		case resp.GetCode() != 0 && !strings.Contains(resp.GetMsg(), "no such task"):
			return fmt.Errorf("delete sync task %s on the source pool: %s", req.GetName(), resp.GetMsg())
		}
		return nil
	})
}

package cli

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"

	"github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmworkerpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// The dm service answers its control calls (DMControl) and the worker
// protocol (pb.Worker) on every server: a call goes to the first of
// --servers that answers.

// DMError is a dm answer with result false (upstream's style): its
// message says why.
type DMError struct{ Msg string }

func (e *DMError) Error() string { return e.Msg }

// DMStartTask starts the task of task file task (YAML), or with checkOnly
// only checks it (check-task). A refusal is a *DMError with the answer.
func (c *Client) DMStartTask(ctx context.Context, task []byte, checkOnly bool) (*dmpb.ControlResponse, error) {
	var resp *dmpb.ControlResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmpb.NewDMControlClient(cc).StartTask(ctx, &dmpb.StartTaskRequest{Task: string(task), CheckOnly: checkOnly})
		return err
	})
	return dmAnswer(resp, err)
}

// DMUpdateTask updates a paused task's config to the task file task's
// (checkOnly: only says whether it may).
func (c *Client) DMUpdateTask(ctx context.Context, task []byte, checkOnly bool) (*dmpb.ControlResponse, error) {
	var resp *dmpb.ControlResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmpb.NewDMControlClient(cc).UpdateTask(ctx, &dmpb.StartTaskRequest{Task: string(task), CheckOnly: checkOnly})
		return err
	})
	return dmAnswer(resp, err)
}

// DMOperateTask pauses, resumes or stops task name.
func (c *Client) DMOperateTask(ctx context.Context, name string, op dmworkerpb.TaskOp) (*dmpb.ControlResponse, error) {
	var resp *dmpb.ControlResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmpb.NewDMControlClient(cc).OperateTask(ctx, &dmpb.OperateTaskRequest{Name: name, Op: op})
		return err
	})
	return dmAnswer(resp, err)
}

// DMCutover runs task name's cutover (abort: aborts it), waiting up to
// wait for the target to catch up (0: the server's default). A refusal or
// failure is a *DMError with the answer.
func (c *Client) DMCutover(ctx context.Context, name string, abort bool, wait time.Duration) (*dmpb.CutoverResponse, error) {
	var resp *dmpb.CutoverResponse
	within := c.timeout + wait
	if wait == 0 {
		within = c.timeout + 5*time.Minute
	}
	err := c.onAnyServerWithin(ctx, within, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmpb.NewDMControlClient(cc).Cutover(ctx, &dmpb.CutoverRequest{Name: name, Abort: abort, TimeoutMs: wait.Milliseconds()})
		return err
	})
	if err != nil {
		return nil, err
	}
	if !resp.GetResult() {
		return resp, &DMError{Msg: resp.GetMsg()}
	}
	return resp, nil
}

func dmAnswer(resp *dmpb.ControlResponse, err error) (*dmpb.ControlResponse, error) {
	if err != nil {
		return nil, err
	}
	if !resp.GetResult() {
		return resp, &DMError{Msg: resp.GetMsg()}
	}
	return resp, nil
}

// DMQueryStatus is pb.Worker's QueryStatus of task name (all when empty).
func (c *Client) DMQueryStatus(ctx context.Context, name string) (*dmworkerpb.QueryStatusResponse, error) {
	var resp *dmworkerpb.QueryStatusResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmworkerpb.NewWorkerClient(cc).QueryStatus(ctx, &dmworkerpb.QueryStatusRequest{Name: name})
		return err
	})
	return resp, err
}

// DMWorkerConfig is pb.Worker's GetWorkerCfg of the first server that
// answers: its dm configuration as TOML.
func (c *Client) DMWorkerConfig(ctx context.Context) (string, error) {
	var resp *dmworkerpb.GetWorkerCfgResponse
	err := c.onAnyServer(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmworkerpb.NewWorkerClient(cc).GetWorkerCfg(ctx, &dmworkerpb.GetWorkerCfgRequest{})
		return err
	})
	return resp.GetCfg(), err
}

// CopysetDigest is a copyset's digest (dm's: of every chunk's id, sn,
// corrected sn, data and COW snapshot, as a client reads it) and chunk
// count.
type CopysetDigest struct {
	Digest string
	Chunks uint64
}

// CopysetDigests asks the leaders of copysets ids of pool for their
// digests (the dm service's fence query, which changes nothing).
func (c *Client) CopysetDigests(ctx context.Context, pool uint32, ids []uint32) (map[uint32]CopysetDigest, error) {
	var resp *dmpb.SourceFenceResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmpb.NewDMInternalClient(cc).SourceFence(ctx, &dmpb.SourceFenceRequest{Pool: pool, Copysets: ids,
			Op: dmpb.FenceOp_FENCE_GET, Digest: true})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("digest pool %d: %w", pool, err)
	}
	if resp.GetCode() != 0 {
		return nil, fmt.Errorf("digest pool %d: %s", pool, resp.GetMsg())
	}
	out := map[uint32]CopysetDigest{}
	for _, r := range resp.GetCopysets() {
		out[r.GetCopyset()] = CopysetDigest{Digest: r.GetDigest(), Chunks: r.GetChunks()}
	}
	return out, nil
}

// DMHandleError is pb.Worker's HandleError: op (skip, replace, inject,
// revert, list) on task name at binlog position pos (P/C:index.op; ""
// for the current apply error) with ops in the text form (replace,
// inject). A refusal is a *DMError with the answer's message.
func (c *Client) DMHandleError(ctx context.Context, name string, op dmworkerpb.ErrorOp, pos string, ops []string) (*dmworkerpb.CommonWorkerResponse, error) {
	var resp *dmworkerpb.CommonWorkerResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmworkerpb.NewWorkerClient(cc).HandleError(ctx, &dmworkerpb.HandleWorkerErrorRequest{Op: op, Task: name, BinlogPos: pos, Sqls: ops})
		return err
	})
	if err == nil && !resp.GetResult() {
		return resp, &DMError{Msg: resp.GetMsg()}
	}
	return resp, err
}

// DMOperateSchema is pb.Worker's OperateSchema: op on task name's chunk
// table (an id) of database (a source copyset, pool-P/copyset-C); schema
// is SetSchema's text. A refusal is a *DMError with the answer's message.
func (c *Client) DMOperateSchema(ctx context.Context, req *dmworkerpb.OperateWorkerSchemaRequest) (*dmworkerpb.CommonWorkerResponse, error) {
	var resp *dmworkerpb.CommonWorkerResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmworkerpb.NewWorkerClient(cc).OperateSchema(ctx, req)
		return err
	})
	if err == nil && !resp.GetResult() {
		return resp, &DMError{Msg: resp.GetMsg()}
	}
	return resp, err
}

// DMPurgeRelay is pb.Worker's PurgeRelay over the relays of dm's tasks:
// exactly one of inactive, before (a time) or file (a packet name, with
// subDir pool-P/copyset-C). A refusal is a *DMError with the answer's
// message.
func (c *Client) DMPurgeRelay(ctx context.Context, inactive bool, before time.Time, file, subDir string) (*dmworkerpb.CommonWorkerResponse, error) {
	req := &dmworkerpb.PurgeRelayRequest{Inactive: inactive, Filename: file, SubDir: subDir}
	if !before.IsZero() {
		req.Time = before.Unix()
	}
	var resp *dmworkerpb.CommonWorkerResponse
	err := c.onAnyServerWithin(ctx, c.timeout, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dmworkerpb.NewWorkerClient(cc).PurgeRelay(ctx, req)
		return err
	})
	if err == nil && !resp.GetResult() {
		return resp, &DMError{Msg: resp.GetMsg()}
	}
	return resp, err
}

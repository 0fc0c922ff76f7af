package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	dspb "github.com/chunkraft/chunkraft/proto/openmldb/datasync"
)

// The sync service's SyncTool (openmldb.datasync) answers on every server
// for every task: a call goes to the first of --servers that answers.

// SyncError is a SyncTool answer with code -1: the task was not changed.
type SyncError struct{ Msg string }

func (e *SyncError) Error() string { return e.Msg }

// onAnyServer runs call against the servers in turn (rotating) until one
// answers, retrying transient failures on each.
func (c *Client) onAnyServer(ctx context.Context, call rpcCall) error {
	return c.onAnyServerWithin(ctx, c.attemptTimeout, call)
}

// onAnyServerWithin is onAnyServer with each attempt bounded by attempt:
// for calls that do a server's work across the cluster (dm's control
// calls), the operation's timeout.
func (c *Client) onAnyServerWithin(ctx context.Context, attempt time.Duration, call rpcCall) error {
	var errs []error
	for _, addr := range c.serverOrder() {
		err := c.callWithin(ctx, addr, attempt, call)
		if err == nil {
			return nil
		}
		if !retryable(err) {
			return err
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return fmt.Errorf("no server answered: %w", errors.Join(errs...))
}

func syncAnswer(r *dspb.GeneralResponse) error {
	if r.GetCode() != 0 {
		return &SyncError{Msg: r.GetMsg()}
	}
	return nil
}

// CreateSyncTask creates an export task of a pool (SyncTool.CreateSyncTask).
func (c *Client) CreateSyncTask(ctx context.Context, req *dspb.CreateSyncTaskRequest) (string, error) {
	var resp *dspb.GeneralResponse
	err := c.onAnyServer(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dspb.NewSyncToolClient(cc).CreateSyncTask(ctx, req)
		return err
	})
	if err != nil {
		return "", err
	}
	return resp.GetMsg(), syncAnswer(resp)
}

// DeleteSyncTask removes an export task (SyncTool.DeleteSyncTask).
func (c *Client) DeleteSyncTask(ctx context.Context, db, name string) (string, error) {
	var resp *dspb.GeneralResponse
	err := c.onAnyServer(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dspb.NewSyncToolClient(cc).DeleteSyncTask(ctx, &dspb.DeleteSyncTaskRequest{Db: &db, Name: &name})
		return err
	})
	if err != nil {
		return "", err
	}
	return resp.GetMsg(), syncAnswer(resp)
}

// SyncTaskStatus lists every sub-task of every export task
// (SyncTool.TaskStatus). A partial answer (code -1: some copyset's leader
// did not answer) returns the response with its *SyncError.
func (c *Client) SyncTaskStatus(ctx context.Context) (*dspb.TaskStatusResponse, error) {
	var resp *dspb.TaskStatusResponse
	err := c.onAnyServer(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		var err error
		resp, err = dspb.NewSyncToolClient(cc).TaskStatus(ctx, &dspb.TaskStatusRequest{})
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, syncAnswer(resp.GetResponse())
}

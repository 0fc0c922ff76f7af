package cli

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	commonpb "github.com/chunkraft/chunkraft/proto/curve/common"
)

// minTransferAttempt is the least time one TransferLeader attempt gets: the
// server answers only once the new leader has taken over.
const minTransferAttempt = 10 * time.Second

// GetLeader asks the servers (not the cache) for the leader of cs and returns
// its peer id ("ip:port:0"), retrying until one knows or the timeout ends.
func (c *Client) GetLeader(ctx context.Context, cs CopysetID) (string, error) {
	op := "get leader of " + cs.String()
	start := time.Now()
	dctx, cancel := c.withDeadline(ctx)
	defer cancel()
	bo := newBackoff()
	var last error
	for dctx.Err() == nil {
		id, err := c.discover(dctx, cs)
		if err == nil {
			return id, nil
		}
		if bo.final(err) {
			return "", fmt.Errorf("%s: %w", op, err)
		}
		last = err
		bo.wait(dctx)
	}
	return "", giveUp(ctx, op, start, last)
}

// TransferLeader makes peer `to` ("host:port" or "ip:port:0") the leader of
// cs. It sends the request to the current leader and returns the previous
// leader's peer id once the transfer is done. If `to` already leads, it
// returns at once.
func (c *Client) TransferLeader(ctx context.Context, cs CopysetID, to string) (string, error) {
	start := time.Now()
	dctx, cancel := c.withDeadline(ctx)
	defer cancel()
	toID, err := ResolvePeerID(dctx, to)
	if err != nil {
		return "", fmt.Errorf("transfer leader of %s: %w", cs, err)
	}
	op := fmt.Sprintf("transfer leader of %s to %s", cs, toID)
	bo := newBackoff()
	var last error
	for dctx.Err() == nil {
		leader, err := c.leaderOf(dctx, cs)
		if bo.final(err) {
			return "", fmt.Errorf("%s: %w", op, err)
		}
		if err != nil {
			last = err
			bo.wait(dctx)
			continue
		}
		if leader == toID {
			return leader, nil
		}
		addr, err := PeerAddr(leader)
		if err != nil {
			c.forgetLeader(cs, leader)
			last = err
			bo.wait(dctx)
			continue
		}
		svc, err := c.cliService(addr)
		if err != nil {
			return "", fmt.Errorf("%s: %w", op, err)
		}
		actx, acancel := context.WithTimeout(dctx, max(c.attemptTimeout, minTransferAttempt))
		_, err = svc.TransferLeader(actx, &chunkserverpb.TransferLeaderRequest2{
			LogicPoolId: proto.Uint32(cs.Pool),
			CopysetId:   proto.Uint32(cs.Copyset),
			Leader:      &commonpb.Peer{Address: proto.String(leader)},
			Transferee:  &commonpb.Peer{Address: proto.String(toID)},
		})
		acancel()
		if err == nil {
			c.setLeader(cs, toID)
			return leader, nil
		}
		if !retryable(err) && status.Code(err) != codes.FailedPrecondition {
			return "", fmt.Errorf("%s: %w", op, &serverError{Addr: addr, Err: err})
		}
		// Not (or no longer) the leader, or unreachable: find it again.
		c.forgetLeader(cs, leader)
		last = &serverError{Addr: addr, Err: err}
		bo.wait(dctx)
	}
	return "", giveUp(ctx, op, start, last)
}

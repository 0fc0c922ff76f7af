package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	disaggpb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	"github.com/chunkraft/chunkraft/proto/kvproto/tikvpb"
)

// The disagg lock service answers on the lock copyset's leader (the
// owner); every other server answers not_owner. A call goes to the
// servers in turn, the leader a not_owner names first, until the owner
// answers or the timeout.

// errNotOwner is a server's not_owner answer.
var errNotOwner = errors.New("not the owner of the disagg lock table")

// notOwnerAt carries the leader a not_owner answer names.
type notOwnerAt struct{ leader string }

func (e *notOwnerAt) Error() string { return errNotOwner.Error() }
func (e *notOwnerAt) Unwrap() error { return errNotOwner }

// onOwner runs call on the servers until one answers other than
// not_owner or a transient failure.
func (c *Client) onOwner(parent context.Context, call rpcCall) error {
	return c.onOwnerWithin(parent, 0, call)
}

// onOwnerWithin is onOwner with each attempt bounded by attempt (0: the
// client's attempt timeout).
func (c *Client) onOwnerWithin(parent context.Context, attempt time.Duration, call rpcCall) error {
	if attempt <= 0 {
		attempt = c.attemptTimeout
	}
	ctx, cancel := c.withDeadline(parent)
	defer cancel()
	bo := newBackoff()
	var last error
	next := ""
	for ctx.Err() == nil {
		order := c.serverOrder()
		if next != "" {
			order = append([]string{next}, order...)
			next = ""
		}
		for _, addr := range order {
			err := c.callWithin(ctx, addr, attempt, call)
			var no *notOwnerAt
			switch {
			case err == nil:
				return nil
			case errors.As(err, &no):
				if l, err := PeerAddr(no.leader); err == nil && l != addr {
					next = l
				}
			case !retryable(err):
				return err
			}
			last = fmt.Errorf("%s: %w", addr, err)
			if next != "" {
				break
			}
		}
		if next == "" && !bo.wait(ctx) {
			break
		}
	}
	if last == nil {
		last = ctx.Err()
	}
	return fmt.Errorf("no server answered as the disagg lock owner before the timeout: %w", last)
}

// LockAnswer is a lock service answer: Success, or the conflict's reason.
type LockAnswer struct {
	Success  bool
	Conflict string
}

func lockAnswer(r *dpb.S3LockResult) (LockAnswer, error) {
	switch {
	case r.GetNotOwner() != nil:
		return LockAnswer{}, &notOwnerAt{}
	case r.GetConflict() != nil:
		return LockAnswer{Conflict: r.GetConflict().GetReason()}, nil
	case r.GetSuccess() != nil:
		return LockAnswer{Success: true}, nil
	}
	return LockAnswer{}, errors.New("the server answered no result")
}

// DisaggAddLock is tikvpb.Tikv tryAddLock on the owner.
func (c *Client) DisaggAddLock(ctx context.Context, key string, store, seq uint64) (LockAnswer, error) {
	var a LockAnswer
	err := c.onOwner(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := tikvpb.NewTikvClient(cc).TryAddLock(ctx, &dpb.TryAddLockRequest{DataFileKey: []byte(key), LockStoreId: store, LockSeq: seq})
		if err != nil {
			return err
		}
		a, err = lockAnswer(resp.GetResult())
		return err
	})
	return a, err
}

// DisaggMarkDelete is tikvpb.Tikv tryMarkDelete on the owner.
func (c *Client) DisaggMarkDelete(ctx context.Context, key string) (LockAnswer, error) {
	var a LockAnswer
	err := c.onOwner(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := tikvpb.NewTikvClient(cc).TryMarkDelete(ctx, &dpb.TryMarkDeleteRequest{DataFileKey: []byte(key)})
		if err != nil {
			return err
		}
		a, err = lockAnswer(resp.GetResult())
		return err
	})
	return a, err
}

// ownerAnswer is a DisaggInternal answer, not_owner naming the leader.
type ownerAnswer interface {
	GetNotOwner() bool
	GetLeader() string
}

// internalOnOwner runs a DisaggInternal call on the owner (attempts
// bounded by attempt, 0 the client's) and returns its answer.
func internalOnOwner[R ownerAnswer](ctx context.Context, c *Client, attempt time.Duration, call func(context.Context, disaggpb.DisaggInternalClient) (R, error)) (R, error) {
	var out R
	err := c.onOwnerWithin(ctx, attempt, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := call(ctx, disaggpb.NewDisaggInternalClient(cc))
		if err != nil {
			return err
		}
		if resp.GetNotOwner() {
			return &notOwnerAt{leader: resp.GetLeader()}
		}
		out = resp
		return nil
	})
	return out, err
}

// DisaggList is DisaggInternal.List on the owner: the lock table's
// entries whose key starts with prefix.
func (c *Client) DisaggList(ctx context.Context, prefix string) (*disaggpb.ListResponse, error) {
	return internalOnOwner(ctx, c, 0, func(ctx context.Context, cl disaggpb.DisaggInternalClient) (*disaggpb.ListResponse, error) {
		return cl.List(ctx, &disaggpb.ListRequest{Prefix: prefix})
	})
}

// DisaggRelease is DisaggInternal.Release on the owner: store's locks with
// seq <= upTo leave the table and their lock objects are deleted.
func (c *Client) DisaggRelease(ctx context.Context, store, upTo uint64) ([]string, error) {
	resp, err := internalOnOwner(ctx, c, 0, func(ctx context.Context, cl disaggpb.DisaggInternalClient) (*disaggpb.ReleaseResponse, error) {
		return cl.Release(ctx, &disaggpb.ReleaseRequest{LockStoreId: store, UpToSeq: upTo})
	})
	return resp.GetReleased(), err
}

// DisaggConfig is tikvpb.Tikv GetDisaggConfig on any server.
func (c *Client) DisaggConfig(ctx context.Context) (*dpb.DisaggS3Config, error) {
	var out *dpb.DisaggS3Config
	err := c.onAnyServer(ctx, func(ctx context.Context, cc grpc.ClientConnInterface) error {
		resp, err := tikvpb.NewTikvClient(cc).GetDisaggConfig(ctx, &dpb.GetDisaggConfigRequest{})
		if err != nil {
			return err
		}
		out = resp.GetS3Config()
		return nil
	})
	return out, err
}

// DisaggGc is DisaggInternal.Gc on the owner: mark deleted every object
// under prefix no lock holds, remove those marked more than grace ago. An
// empty prefix or a negative grace is refused before any call. The
// attempt is bounded by the operation's timeout only (a run lists and
// proposes per object); a retry after a lost answer is harmless (marks
// and removals are idempotent).
func (c *Client) DisaggGc(ctx context.Context, prefix string, grace time.Duration) (*disaggpb.GcResponse, error) {
	switch {
	case prefix == "":
		return nil, errors.New("gc needs a prefix: an empty one would collect the whole object store")
	case grace < 0:
		return nil, fmt.Errorf("gc grace %v: must not be negative", grace)
	}
	return internalOnOwner(ctx, c, c.timeout, func(ctx context.Context, cl disaggpb.DisaggInternalClient) (*disaggpb.GcResponse, error) {
		return cl.Gc(ctx, &disaggpb.GcRequest{Prefix: prefix, GraceMs: grace.Milliseconds()})
	})
}

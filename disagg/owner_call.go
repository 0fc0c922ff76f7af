package disagg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// Calls of this server to the lock owner (a clone lock for a clone chunk
// created here, a reconciler's list and release): to its own
// DisaggInternal when it leads the lock copyset, else over gRPC to the
// leader it knows, the one a not_owner answer names, or the one the
// cluster map names, until the caller's context ends.

// ownerCall is one call of DisaggInternal; it returns the not_owner
// answer's leader hint and whether the answer was not_owner.
type ownerCall func(ctx context.Context, c pb.DisaggInternalClient) (notOwner bool, leader string, err error)

// localInternal is this server's DisaggInternal as a client: a call on
// the owner itself takes no network hop.
type localInternal struct{ is *internalService }

func (l localInternal) List(ctx context.Context, r *pb.ListRequest, _ ...grpc.CallOption) (*pb.ListResponse, error) {
	return l.is.List(ctx, r)
}

func (l localInternal) Release(ctx context.Context, r *pb.ReleaseRequest, _ ...grpc.CallOption) (*pb.ReleaseResponse, error) {
	return l.is.Release(ctx, r)
}

func (l localInternal) LockClone(ctx context.Context, r *pb.LockCloneRequest, _ ...grpc.CallOption) (*pb.LockCloneResponse, error) {
	return l.is.LockClone(ctx, r)
}

func (l localInternal) ReleaseClone(ctx context.Context, r *pb.ReleaseCloneRequest, _ ...grpc.CallOption) (*pb.ReleaseCloneResponse, error) {
	return l.is.ReleaseClone(ctx, r)
}

func (l localInternal) Gc(ctx context.Context, r *pb.GcRequest, _ ...grpc.CallOption) (*pb.GcResponse, error) {
	return l.is.Gc(ctx, r)
}

// final reports whether err ends the retries: a refusal that a retry on
// another owner would repeat.
func final(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.ResourceExhausted, codes.FailedPrecondition, codes.Canceled, codes.DeadlineExceeded:
		return true
	}
	return false
}

// onOwner runs call on the lock owner until it answers (not not_owner, no
// retryable error) or ctx ends.
func (s *Service) onOwner(ctx context.Context, call ownerCall) error {
	var last error
	hint := ""
	wait := 20 * time.Millisecond
	for {
		c, addr, err := s.ownerClient(ctx, hint)
		hint = ""
		if err == nil {
			var notOwner bool
			notOwner, hint, err = call(ctx, c)
			s.rememberOwner(addr, err == nil && !notOwner)
			switch {
			case err == nil && !notOwner:
				return nil
			case err == nil:
				err = fmt.Errorf("%s answered not_owner", addr)
			case final(err):
				return err
			}
		}
		last = err
		if hint != "" && copyset.PeerID(hint).Addr() != addr {
			continue // follow the hint at once
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("the disagg lock owner (the leader of copyset %d/%d, disagg.lock_copyset) did not answer: %w (last: %v)",
				s.group.Pool(), s.group.Copyset(), ctx.Err(), last)
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// ownerClient returns a DisaggInternal client of the owner as this server
// sees it: itself when it leads the lock copyset, else the hinted peer,
// the leader its replica knows, or the leader of the cluster map.
func (s *Service) ownerClient(ctx context.Context, hint string) (pb.DisaggInternalClient, string, error) {
	if _, _, _, ok := s.owner(); ok {
		return localInternal{is: s.internal}, "local", nil
	}
	leader := copyset.PeerID(hint)
	if n := s.copysets.Get(s.group); leader == "" && n != nil {
		leader = n.Leader()
	}
	if leader == "" {
		s.mu.Lock()
		leader = s.lastOwner
		s.mu.Unlock()
	}
	if leader == "" && s.deps.Cluster != nil {
		cm, err := s.deps.Cluster(ctx, &clusterpb.ClusterMapRequest{})
		if err != nil {
			return nil, "", fmt.Errorf("cluster map: %w", err)
		}
		for _, c := range cm.GetCopysets() {
			if c.GetPool() == s.group.Pool() && c.GetCopyset() == s.group.Copyset() {
				leader = copyset.PeerID(c.GetLeader())
			}
		}
	}
	if leader == "" {
		return nil, "", fmt.Errorf("copyset %d/%d has no leader this server knows of", s.group.Pool(), s.group.Copyset())
	}
	if leader == s.copysets.Local() {
		return localInternal{is: s.internal}, "local", nil // leads by now
	}
	if s.deps.Dial == nil {
		return nil, "", errors.New("no connections to other servers")
	}
	conn, err := s.deps.Dial(leader.Addr())
	if err != nil {
		return nil, "", err
	}
	return pb.NewDisaggInternalClient(conn), leader.Addr(), nil
}

// rememberOwner keeps the remote owner that answered (ok) for the next
// call, so that a server hosting no replica of the lock copyset does not
// crawl the cluster map for every call; one that failed is forgotten.
func (s *Service) rememberOwner(addr string, ok bool) {
	if addr == "local" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case ok:
		s.lastOwner = copyset.PeerID(addr) // host:port: its Addr is itself
	case s.lastOwner.Addr() == addr:
		s.lastOwner = ""
	}
}

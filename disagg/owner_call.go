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
	rep := s.ownerRouter().Route(ctx, s.group, "", func(ctx context.Context, c pb.DisaggInternalClient, to copyset.Target) copyset.Reply {
		notOwner, hint, err := call(ctx, c)
		addr := "local"
		if !to.Local {
			addr = to.Peer.Addr()
		}
		s.rememberOwner(addr, err == nil && !notOwner)
		switch {
		case err == nil && !notOwner:
			return copyset.Answered()
		case err == nil:
			return copyset.Redirect(copyset.PeerID(hint), fmt.Errorf("%s answered not_owner", addr))
		case final(err):
			return copyset.Final(err)
		}
		return copyset.Redirect(copyset.PeerID(hint), err)
	})
	switch {
	case rep.Done():
		return nil
	case rep.Final():
		return rep.Err()
	}
	return fmt.Errorf("the disagg lock owner (the leader of copyset %d/%d, disagg.lock_copyset) did not answer: %w",
		s.group.Pool(), s.group.Copyset(), rep.Err())
}

// ownerBackoff paces the calls to an owner that did not answer.
var ownerBackoff = copyset.Backoff{First: 20 * time.Millisecond, Max: 500 * time.Millisecond}

// ownerRouter routes calls to the owner as this server sees it: itself
// when it leads the lock copyset, else the hinted peer, the leader its
// replica knows, the owner that last answered, or the leader of the
// cluster map.
func (s *Service) ownerRouter() *copyset.Router[pb.DisaggInternalClient] {
	return &copyset.Router[pb.DisaggInternalClient]{
		Self: s.copysets.Local(),
		Replica: func(copyset.GroupID) (copyset.PeerID, bool, bool) {
			_, _, leader, ok := s.owner()
			return leader, ok, true
		},
		Local: localInternal{is: s.internal},
		Dial: func(p copyset.PeerID) (pb.DisaggInternalClient, error) {
			if s.deps.Dial == nil {
				return nil, errors.New("no connections to other servers")
			}
			conn, err := s.deps.Dial(p.Addr())
			if err != nil {
				return nil, err
			}
			return pb.NewDisaggInternalClient(conn), nil
		},
		Map:     s.ownerOfMap,
		Backoff: ownerBackoff,
	}
}

// ownerOfMap is the owner that last answered, else the lock copyset's
// leader in the cluster map.
func (s *Service) ownerOfMap(ctx context.Context, _ []copyset.GroupID) (map[copyset.GroupID]copyset.PeerID, error) {
	s.mu.Lock()
	last := s.lastOwner
	s.mu.Unlock()
	if last != "" || s.deps.Cluster == nil {
		return map[copyset.GroupID]copyset.PeerID{s.group: last}, nil
	}
	cm, err := s.deps.Cluster(ctx, &clusterpb.ClusterMapRequest{})
	if err != nil {
		return nil, err
	}
	out := map[copyset.GroupID]copyset.PeerID{}
	for _, c := range cm.GetCopysets() {
		if c.GetPool() == s.group.Pool() && c.GetCopyset() == s.group.Copyset() {
			out[s.group] = copyset.PeerID(c.GetLeader())
		}
	}
	return out, nil
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

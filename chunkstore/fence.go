package chunkstore

// Epoch fences are replicated state of every copyset, so that a fence holds
// on every server that hosts, or later hosts, a replica of a copyset: an
// added peer, a replaced server, a replica restored from a snapshot, a
// restarted one.
//
//   - The fence op (kinds.Fence, a marshalled raftpb.FenceOp of (fileId,
//     epoch) pairs) raises the server's epochMap on every replica that
//     applies it, and the copyset's own fence table (fences.jsonl in the
//     copyset data dir, a copyset/statefile file). Applying is deterministic, monotonic
//     (an epoch never goes down) and idempotent under replay; a table that
//     cannot be persisted stops the replica (copyset.FatalError), it is
//     never skipped.
//   - UpdateEpoch raises the server's epochMap (persisted, as before) and
//     then proposes the fence op to every copyset this server leads, and
//     forwards it (Fences.ProposeFences) to the leader of every copyset it
//     follows, in parallel within fenceProposeTimeout: it answers SUCCESS
//     only once the fence is committed in the log of every copyset it
//     hosts (broken replicas aside).
//   - A raft snapshot carries the copyset's fence table: fences.jsonl is one
//     of the files streamed to a follower, and opening the fence machine
//     (at startup, or on the installed data after a snapshot install) raises
//     the server's epochMap with it. A prefix of the file, as a fuzzy
//     snapshot stream may cut it, is an earlier table, and the fences
//     applied after the snapshot index are replayed from the log.
//   - A replica that becomes leader learns the fences of its configuration's
//     other members before it accepts a chunk mutation (fencer.prepare, run
//     by copyset.Node.WaitWritable once per term): it asks each of them for
//     its epochMap (Fences.GetFences, fenceAskTimeout each, going on with
//     those that answered), raises its own with them, and proposes its
//     whole table as a fence op; mutations wait until that op is applied,
//     which also means every fence committed before it is applied.
//
// The admission check stays local and cheap: the leader compares a
// request's epoch with its own epochMap (one atomic load), and
// WaitWritable is two atomic loads once the term is prepared.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/statefile"
	"github.com/chunkraft/chunkraft/internal/kinds"
	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// FenceFileName is the fence table file in a copyset's data dir.
const FenceFileName = "fences.jsonl"

const (
	// fenceAskTimeout bounds a new leader's GetFences call to one member.
	fenceAskTimeout = time.Second
	// fenceProposeTimeout bounds UpdateEpoch's wait for its fence ops.
	fenceProposeTimeout = 5 * time.Second
)

// fenceState is one line of fences.jsonl: the copyset's whole fence table.
type fenceState struct {
	Fences fenceTable `json:"fences"`
}

// fenceMachine is the kinds.Fence state machine of one copyset.
type fenceMachine struct {
	epochs *epochMap
	file   *statefile.File
	log    *slog.Logger
	table  fenceTable // the copyset's fences; used by the apply goroutine only
}

var _ copyset.StateMachine = (*fenceMachine)(nil)

// openFenceMachine loads the copyset's fence table from dir and raises the
// server's epochMap with it.
func openFenceMachine(dir string, epochs *epochMap, log *slog.Logger) (*fenceMachine, error) {
	path := filepath.Join(dir, FenceFileName)
	file, b, err := statefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("fence table: %w", err)
	}
	table := fenceTable{}
	bad := statefile.EachLine(b, func(line []byte) bool {
		var st fenceState
		if err := json.Unmarshal(line, &st); err != nil {
			return false
		}
		for f, e := range st.Fences {
			table[f] = max(table[f], e)
		}
		return true
	})
	if bad > 0 {
		log.Warn("fence table file: skipped unreadable lines (torn write or snapshot padding)", "file", path, "lines", bad)
	}
	if err := epochs.raise(table); err != nil {
		return nil, fmt.Errorf("fence table %s: %w", path, err)
	}
	return &fenceMachine{epochs: epochs, file: file, log: log, table: table}, nil
}

// encodeFenceOp builds the replicated fence op raising t.
func encodeFenceOp(t fenceTable) ([]byte, error) {
	return copyset.EncodeOp(kinds.Fence, &raftpb.FenceOp{Fences: fencesPB(t)})
}

// fencesPB lists t in ascending file id.
func fencesPB(t fenceTable) []*raftpb.Fence {
	out := make([]*raftpb.Fence, 0, len(t))
	for _, f := range t.files() {
		out = append(out, &raftpb.Fence{FileId: f, Epoch: t[f]})
	}
	return out
}

// fencesTable is the inverse of fencesPB (the greatest epoch of a file
// listed twice).
func fencesTable(fs []*raftpb.Fence) fenceTable {
	t := make(fenceTable, len(fs))
	for _, f := range fs {
		t[f.GetFileId()] = max(t[f.GetFileId()], f.GetEpoch())
	}
	return t
}

// Apply implements copyset.StateMachine: raise the copyset's table and the
// server's epochMap. The result is nil or a *copyset.FatalError.
func (m *fenceMachine) Apply(index uint64, payload []byte) any {
	op := &raftpb.FenceOp{}
	if err := proto.Unmarshal(payload, op); err != nil {
		m.log.Error("undecodable fence op", "index", index, "err", err)
		return &copyset.FatalError{Err: fmt.Errorf("decode fence op at index %d: %w", index, err)}
	}
	u := fencesTable(op.GetFences())
	if next, changed := m.table.merge(u); changed {
		line, err := json.Marshal(fenceState{Fences: next})
		if err == nil {
			err = m.file.Append(line)
		}
		if err != nil {
			return &copyset.FatalError{Err: fmt.Errorf("apply fence op at index %d: %w", index, err)}
		}
		m.table = next
	}
	if err := m.epochs.raise(u); err != nil {
		return &copyset.FatalError{Err: fmt.Errorf("apply fence op at index %d: %w", index, err)}
	}
	return nil
}

// Sync implements copyset.StateMachine.
func (m *fenceMachine) Sync() error { return m.file.Sync() }

// Files implements copyset.StateMachine.
func (m *fenceMachine) Files() ([]string, error) { return []string{FenceFileName}, nil }

// Close implements copyset.StateMachine.
func (m *fenceMachine) Close() error { return m.file.Close() }

// fencer is the server side of the replicated fences: the Fences service,
// the leader preparation and UpdateEpoch's proposals.
type fencer struct {
	raftpb.UnimplementedFencesServer
	epochs   *epochMap
	copysets *copyset.Manager
	local    copyset.PeerID
	dial     func(addr string) (*grpc.ClientConn, error)
	log      *slog.Logger
}

// GetFences implements raftpb.FencesServer: this server's epochMap.
func (f *fencer) GetFences(context.Context, *raftpb.GetFencesRequest) (*raftpb.GetFencesResponse, error) {
	return &raftpb.GetFencesResponse{Fences: fencesPB(f.epochs.table())}, nil
}

// ProposeFences implements raftpb.FencesServer: commit the fences in the
// log of a copyset this server leads (UpdateEpoch on a follower forwards
// here). A follower answers FailedPrecondition, naming the leader.
func (f *fencer) ProposeFences(ctx context.Context, req *raftpb.ProposeFencesRequest) (*raftpb.ProposeFencesResponse, error) {
	n := f.copysets.Get(copyset.GroupID(req.GetGroup()))
	if n == nil {
		return nil, grpcstatus.Errorf(codes.NotFound, "copyset %s is not hosted here", copyset.GroupID(req.GetGroup()))
	}
	if err := f.epochs.raise(fencesTable(req.GetFences())); err != nil {
		return nil, grpcstatus.Errorf(codes.Internal, "%v", err)
	}
	if err := proposeFences(ctx, n, fencesTable(req.GetFences())); err != nil {
		// Leadership lost after the op was appended is a not-leader answer
		// too: the sender retries on the new leader, and a fence op is a
		// raise, so committing it twice is committing it once.
		var (
			nl *copyset.NotLeaderError
			ou *copyset.OutcomeUnknownError
		)
		if errors.As(err, &nl) || errors.As(err, &ou) {
			return nil, grpcstatus.Errorf(codes.FailedPrecondition, "%v", err)
		}
		return nil, grpcstatus.Errorf(codes.Unavailable, "%v", err)
	}
	return &raftpb.ProposeFencesResponse{}, nil
}

// proposeFences commits a fence op raising t in n's log and waits until
// this leader applied it.
func proposeFences(ctx context.Context, n *copyset.Node, t fenceTable) error {
	op, err := encodeFenceOp(t)
	if err != nil {
		return err
	}
	// The fence machine answers nil, or a *copyset.FatalError.
	if _, _, err := copyset.ProposeAs[error](ctx, n, op); err != nil {
		return fmt.Errorf("propose fence op: %w", err)
	}
	return nil
}

// prepare is the copyset.LeaderPrepare of every copyset: learn the fences
// of the configuration's other members, raise the local epochMap with
// them, and commit the whole table in n's log.
func (f *fencer) prepare(ctx context.Context, n *copyset.Node) error {
	peers, err := n.Peers()
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		learned = fenceTable{}
		wg      sync.WaitGroup
	)
	for _, p := range peers {
		if p == f.local {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := f.ask(ctx, p)
			if err != nil {
				f.log.Warn("new leader could not learn a member's fences", "pool", n.Group().Pool(),
					"copyset", n.Group().Copyset(), "member", p, "err", err)
				return
			}
			mu.Lock()
			for file, e := range t {
				learned[file] = max(learned[file], e)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := f.epochs.raise(learned); err != nil {
		return err
	}
	return proposeFences(ctx, n, f.epochs.table())
}

// ask returns member p's fences.
func (f *fencer) ask(ctx context.Context, p copyset.PeerID) (fenceTable, error) {
	cc, err := f.dial(p.Addr())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, fenceAskTimeout)
	defer cancel()
	resp, err := raftpb.NewFencesClient(cc).GetFences(ctx, &raftpb.GetFencesRequest{})
	if err != nil {
		return nil, err
	}
	return fencesTable(resp.GetFences()), nil
}

// propagate commits t in the log of every copyset this server hosts: it
// proposes to those it leads and forwards to the leaders of the others, in
// parallel within fenceProposeTimeout. It returns an error naming every
// copyset that did not take it; broken replicas are skipped (they apply
// nothing until restarted, and then replay the log).
func (f *fencer) propagate(ctx context.Context, t fenceTable) error {
	ctx, cancel := context.WithTimeout(ctx, fenceProposeTimeout)
	defer cancel()
	nodes := f.copysets.List()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		if n.Broken() != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.commitTo(ctx, n, t); err != nil {
				errs[i] = fmt.Errorf("copyset %d/%d: %w", n.Group().Pool(), n.Group().Copyset(), err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// commitTo commits t in n's log: proposed here when this replica leads,
// else sent to the leader (ProposeFences) through copyset.Router, retried
// every 50 ms as leadership moves until ctx ends.
func (f *fencer) commitTo(ctx context.Context, n *copyset.Node, t fenceTable) error {
	req := &raftpb.ProposeFencesRequest{Group: uint64(n.Group()), Fences: fencesPB(t)}
	r := copyset.Router[raftpb.FencesClient]{
		Self: f.local,
		Replica: func(copyset.GroupID) (copyset.PeerID, bool, bool) {
			return n.Leader(), n.IsLeader() && n.Broken() == nil, true
		},
		Dial: func(p copyset.PeerID) (raftpb.FencesClient, error) {
			cc, err := f.dial(p.Addr())
			if err != nil {
				return nil, err
			}
			return raftpb.NewFencesClient(cc), nil
		},
		Backoff: copyset.Backoff{First: 50 * time.Millisecond, Max: 50 * time.Millisecond},
	}
	rep := r.Route(ctx, n.Group(), "", func(ctx context.Context, c raftpb.FencesClient, to copyset.Target) copyset.Reply {
		var err error
		if to.Local {
			err = proposeFences(ctx, n, t)
		} else if _, err = c.ProposeFences(ctx, req); err != nil {
			err = fmt.Errorf("forward to leader %s: %w", to.Peer, err)
		}
		if err != nil {
			return copyset.Redirect("", err)
		}
		return copyset.Answered()
	})
	if rep.Done() {
		return nil
	}
	return rep.Err()
}

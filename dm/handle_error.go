package dm

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// HandleError: upstream's `binlog skip|replace|revert|inject|list`. An
// operator waits in a share at a source position P/C:index.op (pool P,
// copyset C of the source, the op at log index `index`, position `op`
// in its entry): the applier skips that op, applies the operator's ops
// instead (replace) or before it (inject), and the operator leaves the
// share in the group that carries it out. With no position, skip,
// replace and revert act at each share's current apply error (the
// position of the op whose apply paused it). A Paused share resumes once
// an operator is set or reverted, as upstream's worker resumes a subtask
// after a handled error.

// Position is a source position, P/C:index.op.
type Position struct {
	Pool, Copyset uint32
	At            *pb.Place
}

func (p Position) String() string {
	return fmt.Sprintf("%d/%d:%s", p.Pool, p.Copyset, PlaceString(p.At))
}

// ParsePosition parses P/C:index.op.
func ParsePosition(s string) (Position, error) {
	bad := func(why string) (Position, error) {
		return Position{}, fmt.Errorf("binlog position %q: %s (want P/C:index.op, e.g. 1/3:1042.0)", s, why)
	}
	cs, rest, ok := strings.Cut(s, ":")
	if !ok {
		return bad("no ':'")
	}
	ps, cps, ok := strings.Cut(cs, "/")
	if !ok {
		return bad("no '/' between the pool and the copyset")
	}
	is, ops, ok := strings.Cut(rest, ".")
	if !ok {
		return bad("no '.' between the log index and the op")
	}
	pool, err1 := strconv.ParseUint(ps, 10, 32)
	cp, err2 := strconv.ParseUint(cps, 10, 32)
	index, err3 := strconv.ParseUint(is, 10, 64)
	op, err4 := strconv.ParseUint(ops, 10, 32)
	switch {
	case err1 != nil || pool == 0:
		return bad("pool " + strconv.Quote(ps) + " is not a pool id")
	case err2 != nil || cp == 0:
		return bad("copyset " + strconv.Quote(cps) + " is not a copyset id")
	case err3 != nil || index == 0:
		return bad("log index " + strconv.Quote(is) + " is not a log index")
	case err4 != nil:
		return bad("op " + strconv.Quote(ops) + " is not an op position")
	}
	return Position{Pool: uint32(pool), Copyset: uint32(cp), At: &pb.Place{Index: index, Op: uint32(op)}}, nil
}

// OperatorView is an operator as List shows it.
type OperatorView struct {
	Task     string   `json:"task"`
	Position string   `json:"position"`
	Op       string   `json:"op"`
	Ops      []string `json:"ops,omitempty"`
	Target   string   `json:"target"`
	AddedMs  int64    `json:"addedMs"`
}

// HandleError sets, reverts or lists the operators of a task
// (HandleWorkerErrorRequest: op, task, binlogPos, sqls).
func (w *workerService) HandleError(ctx context.Context, req *dmpb.HandleWorkerErrorRequest) (*dmpb.CommonWorkerResponse, error) {
	resp, err := w.s.handleError(ctx, req)
	if err != nil {
		return &dmpb.CommonWorkerResponse{Msg: err.Error(), Worker: string(w.s.deps.Local)}, nil
	}
	resp.Worker = string(w.s.deps.Local)
	return resp, nil
}

func (s *Service) handleError(ctx context.Context, req *dmpb.HandleWorkerErrorRequest) (*dmpb.CommonWorkerResponse, error) {
	name, opName := req.GetTask(), req.GetOp()
	if name == "" {
		return nil, fmt.Errorf("handle error: no task name")
	}
	switch opName {
	case dmpb.ErrorOp_Skip, dmpb.ErrorOp_Replace, dmpb.ErrorOp_Inject, dmpb.ErrorOp_Revert, dmpb.ErrorOp_List:
	default:
		return nil, fmt.Errorf("handle error: operator %v does not exist (want Skip, Replace, Inject, Revert or List)", opName)
	}
	var pos *Position
	if req.GetBinlogPos() != "" {
		p, err := ParsePosition(req.GetBinlogPos())
		if err != nil {
			return nil, err
		}
		pos = &p
	}
	var ops []*pb.ChunkOp
	switch opName {
	case dmpb.ErrorOp_Replace, dmpb.ErrorOp_Inject:
		if len(req.GetSqls()) == 0 {
			return nil, fmt.Errorf("%v needs the ops to apply (sqls), e.g. \"write 7 0 4096 sn=1 data=zero\"", opName)
		}
		var err error
		if ops, err = ParseChunkOps(req.GetSqls()); err != nil {
			return nil, err
		}
		if len(ops) == 0 {
			return nil, fmt.Errorf("%v needs at least one op; sqls hold none", opName)
		}
		if opName == dmpb.ErrorOp_Inject && pos == nil {
			return nil, fmt.Errorf("inject needs a binlog position: chunk ops have no error to inject before")
		}
	default:
		if len(req.GetSqls()) > 0 {
			return nil, fmt.Errorf("%v takes no ops (sqls)", opName)
		}
	}
	l, err := s.listAll(ctx, 0, name)
	if err != nil {
		return nil, fmt.Errorf("handle error %q: %w", name, err)
	}
	l = l.taskOnly()
	if len(l.shares) == 0 {
		msg := msgNoSubTask(name)
		if len(l.unanswered) > 0 {
			msg += "; no leader answered for " + strings.Join(l.unanswered, ", ")
		}
		return nil, fmt.Errorf("%s", msg)
	}
	srcPool := l.shares[0].GetSubtask().GetConfig().GetSource().GetPool()
	if pos != nil && pos.Pool != srcPool {
		return nil, fmt.Errorf("binlog position %s is in pool %d; task %q migrates pool %d", pos, pos.Pool, name, srcPool)
	}
	var shares []*pb.Located
	for _, sh := range l.shares {
		if pos == nil || sh.GetSubtask().GetSourceCopyset() == pos.Copyset {
			shares = append(shares, sh)
		}
	}
	if pos != nil && len(shares) == 0 {
		msg := fmt.Sprintf("task %q has no share applying source copyset %d/%d", name, pos.Pool, pos.Copyset)
		if len(l.unanswered) > 0 {
			msg += "; no leader answered for " + strings.Join(l.unanswered, ", ")
		}
		return nil, fmt.Errorf("%s", msg)
	}
	if opName == dmpb.ErrorOp_List {
		return listOperators(name, shares, pos)
	}
	now := time.Now().UnixMilli()
	var done, errs []string
	for _, sh := range shares {
		st := sh.GetSubtask()
		at := pos
		if at == nil {
			if st.GetErrorAt() == nil {
				continue
			}
			at = &Position{Pool: srcPool, Copyset: st.GetSourceCopyset(), At: st.GetErrorAt()}
		}
		op := &pb.Op{Op: &pb.Op_HandleError{HandleError: &pb.HandleError{Name: name, Op: opName, At: at.At,
			Ops: ops, Text: req.GetSqls(), NowMs: now}}}
		g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
		if r := s.routePropose(ctx, g, op); r.GetCode() != 0 {
			errs = append(errs, fmt.Sprintf("copyset %d/%d: %s", g.Pool(), g.Copyset(), r.GetMsg()))
			continue
		}
		done = append(done, fmt.Sprintf("%v at %s on copyset %d/%d", opName, at, g.Pool(), g.Copyset()))
	}
	switch {
	case len(done) == 0 && len(errs) == 0:
		return nil, fmt.Errorf("source has no error to handle: task %q has no share paused by an apply error; give a binlog position", name)
	case len(errs) > 0:
		return &dmpb.CommonWorkerResponse{Msg: strings.Join(append(done, errs...), "; ")}, nil
	}
	return &dmpb.CommonWorkerResponse{Result: true, Msg: strings.Join(done, "; ")}, nil
}

// listOperators answers List: the operators of shares at or after pos
// (all with no position), as a JSON array.
func listOperators(name string, shares []*pb.Located, pos *Position) (*dmpb.CommonWorkerResponse, error) {
	out := []OperatorView{}
	for _, sh := range shares {
		st := sh.GetSubtask()
		for _, o := range st.GetOperators() {
			if pos != nil && comparePlace(o.GetAt(), pos.At) < 0 {
				continue
			}
			v := OperatorView{Task: name, Op: o.GetOp().String(), AddedMs: o.GetAddedMs(),
				Position: Position{Pool: st.GetConfig().GetSource().GetPool(), Copyset: st.GetSourceCopyset(), At: o.GetAt()}.String(),
				Target:   fmt.Sprintf("%d/%d", sh.GetPool(), sh.GetCopyset())}
			for _, op := range o.GetOps() {
				v.Ops = append(v.Ops, ChunkOpString(op))
			}
			out = append(out, v)
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &dmpb.CommonWorkerResponse{Result: true, Msg: string(b)}, nil
}

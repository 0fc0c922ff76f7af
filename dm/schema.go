package dm

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/chunkread"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// OperateSchema: upstream's `binlog-schema`, for chunks. A task's
// "database" is a source copyset, named pool-P/copyset-C as in the
// export; a "table" is a chunk id; a chunk's "schema" is the state the
// share applying that copyset tracks for it: a normal chunk, or a clone
// chunk with its sn, corrected sn and written blocks (schema_text.go).
// That state decides how the share replays the source's ops on the
// chunk, as the source's chunk store decided them; SetSchema overrides
// it, e.g. for a clone chunk the export could not carry exactly
// (docs/sync-format.md, Limits). GetSchema also shows the target chunk's
// sn, corrected sn and snapshot sn and the position its image is as of.
// Upstream's preconditions: the request's source (when given) is the
// task's, and the shares involved are Paused in the Sync unit, except
// for ListMigrateTargets, which also serves Running ones.

// SchemaView is a chunk's schema as GetSchema shows it.
type SchemaView struct {
	Task     string `json:"task"`
	Database string `json:"database"` // the source copyset, pool-P/copyset-C
	Chunk    uint64 `json:"chunk"`
	Target   string `json:"target"` // the target copyset, P/C
	// The target chunk as a client reads it (Exists false: not there).
	Exists      bool   `json:"exists"`
	Sn          uint64 `json:"sn,omitempty"`
	CorrectedSn uint64 `json:"correctedSn,omitempty"`
	SnapSn      uint64 `json:"snapSn,omitempty"`
	// Schema is what the share tracks, in the text form; Unwritten a
	// clone's blocks still read from its source.
	Schema    string `json:"schema"`
	Unwritten string `json:"unwritten,omitempty"`
	// AsOf is the source position the chunk's image is as of (P/C:index.op).
	AsOf string `json:"asOf,omitempty"`
	// Override is the operator's SetSchema in force, if any.
	Override *OverrideView `json:"override,omitempty"`
}

// OverrideView is an operator's SetSchema as GetSchema shows it.
type OverrideView struct {
	Text  string `json:"text"`
	SetMs int64  `json:"setMs"`
	// Prior is what the share tracked before; At where it stood then.
	Prior string `json:"prior"`
	At    string `json:"at"`
}

// MigrateTarget is one route of ListMigrateTargets (upstream's
// TaskMigrateTarget): a source copyset (and chunk, when a table pattern
// was given) and where it lands.
type MigrateTarget struct {
	SourceSchema string `json:"source_schema"`
	SourceTable  string `json:"source_table"`
	TargetSchema string `json:"target_schema"`
	TargetTable  string `json:"target_table"`
}

// OperateSchema answers pb.Worker's OperateSchema; its result (a JSON
// value) is in msg.
func (w *workerService) OperateSchema(ctx context.Context, req *dmpb.OperateWorkerSchemaRequest) (*dmpb.CommonWorkerResponse, error) {
	msg, err := w.s.operateSchema(ctx, req)
	if err != nil {
		return &dmpb.CommonWorkerResponse{Msg: err.Error(), Worker: string(w.s.deps.Local)}, nil
	}
	return &dmpb.CommonWorkerResponse{Result: true, Msg: msg, Worker: string(w.s.deps.Local)}, nil
}

// CopysetName is a source copyset as a schema's database: pool-P/copyset-C.
func CopysetName(pool, cs uint32) string {
	return strings.TrimSuffix(exportfmt.CopysetPrefix(pool, cs), "/")
}

// parseCopysetName parses pool-P/copyset-C.
func parseCopysetName(s string) (pool, cs uint32, err error) {
	bad := fmt.Errorf("database %q: want a source copyset, pool-P/copyset-C", s)
	ps, cps, ok := strings.Cut(strings.TrimSuffix(s, "/"), "/")
	if !ok || !strings.HasPrefix(ps, "pool-") || !strings.HasPrefix(cps, "copyset-") {
		return 0, 0, bad
	}
	p, err1 := strconv.ParseUint(strings.TrimPrefix(ps, "pool-"), 10, 32)
	c, err2 := strconv.ParseUint(strings.TrimPrefix(cps, "copyset-"), 10, 32)
	if err1 != nil || err2 != nil || p == 0 || c == 0 {
		return 0, 0, bad
	}
	return uint32(p), uint32(c), nil
}

func (s *Service) operateSchema(ctx context.Context, req *dmpb.OperateWorkerSchemaRequest) (string, error) {
	name, op := req.GetTask(), req.GetOp()
	switch {
	case name == "":
		return "", errors.New("operate schema: no task name")
	case op <= dmpb.SchemaOp_InvalidSchemaOp || op > dmpb.SchemaOp_ListMigrateTargets:
		return "", fmt.Errorf("operate schema: op %v: want GetSchema, SetSchema, RemoveSchema, ListSchema, ListTable or ListMigrateTargets", op)
	case req.GetFromSource() || req.GetFromTarget():
		return "", errors.New("operate schema: a chunk's tracked state is not read from the source or the target; give it as the schema text (docs/dm.md)")
	}
	var clone *pb.Clone
	if op == dmpb.SchemaOp_SetSchema {
		if strings.TrimSpace(req.GetSchema()) == "" {
			return "", errors.New("SetSchema needs the schema: normal, or clone sn=<n> csn=<n> [written=<blocks>]")
		}
		var err error
		if clone, err = ParseSchema(req.GetSchema()); err != nil {
			return "", err
		}
	}
	var dbPool, dbCs uint32
	needDB := op == dmpb.SchemaOp_GetSchema || op == dmpb.SchemaOp_SetSchema || op == dmpb.SchemaOp_RemoveSchema || op == dmpb.SchemaOp_ListTable
	var chunk uint64
	switch {
	case op == dmpb.SchemaOp_ListMigrateTargets:
	case needDB:
		if req.GetDatabase() == "" {
			return "", fmt.Errorf("%v needs the database: a source copyset, pool-P/copyset-C", op)
		}
		var err error
		if dbPool, dbCs, err = parseCopysetName(req.GetDatabase()); err != nil {
			return "", err
		}
		if op != dmpb.SchemaOp_ListTable {
			if req.GetTable() == "" {
				return "", fmt.Errorf("%v needs the table: a chunk id", op)
			}
			if chunk, err = strconv.ParseUint(req.GetTable(), 10, 64); err != nil {
				return "", fmt.Errorf("table %q: want a chunk id", req.GetTable())
			}
		}
	}
	l, err := s.listAll(ctx, 0, name)
	if err != nil {
		return "", fmt.Errorf("operate schema %q: %w", name, err)
	}
	l = l.taskOnly()
	if len(l.shares) == 0 {
		msg := msgNoSubTask(name)
		if len(l.unanswered) > 0 {
			msg += "; no leader answered for " + strings.Join(l.unanswered, ", ")
		}
		return "", errors.New(msg)
	}
	cfg := l.shares[0].GetSubtask().GetConfig()
	if src := req.GetSource(); src != "" && src != sourceOf(cfg) {
		return "", fmt.Errorf("source of request does not match with source in worker: task %q reads %s, not %s", name, sourceOf(cfg), src)
	}
	srcPool := cfg.GetSource().GetPool()
	shares := slices.Clone(l.shares)
	slices.SortFunc(shares, func(a, b *pb.Located) int {
		return cmp.Compare(a.GetSubtask().GetSourceCopyset(), b.GetSubtask().GetSourceCopyset())
	})
	if needDB {
		if dbPool != srcPool {
			return "", fmt.Errorf("database %s is in pool %d; task %q migrates pool %d", req.GetDatabase(), dbPool, name, srcPool)
		}
		i := slices.IndexFunc(shares, func(sh *pb.Located) bool { return sh.GetSubtask().GetSourceCopyset() == dbCs })
		if i < 0 {
			msg := fmt.Sprintf("task %q has no share applying %s", name, req.GetDatabase())
			if len(l.unanswered) > 0 {
				msg += "; no leader answered for " + strings.Join(l.unanswered, ", ")
			}
			return "", errors.New(msg)
		}
		shares = shares[i : i+1]
	} else if len(l.unanswered) > 0 {
		return "", fmt.Errorf("operate schema %q: no leader answered for %s", name, strings.Join(l.unanswered, ", "))
	}
	for _, sh := range shares {
		st := sh.GetSubtask()
		if stage := st.GetStage(); stage != dmpb.Stage_Paused && (op != dmpb.SchemaOp_ListMigrateTargets || stage != dmpb.Stage_Running) {
			return "", fmt.Errorf("current stage is %v but not paused, invalid (task %q, %s)", stage, name, CopysetName(srcPool, st.GetSourceCopyset()))
		}
		if st.GetUnit() != dmpb.UnitType_Sync {
			return "", fmt.Errorf("operation %v only supported for sync unit, but now is %v (task %q, %s)", op, st.GetUnit(), name, CopysetName(srcPool, st.GetSourceCopyset()))
		}
	}
	switch op {
	case dmpb.SchemaOp_ListSchema:
		out := make([]string, 0, len(shares))
		for _, sh := range shares {
			out = append(out, CopysetName(srcPool, sh.GetSubtask().GetSourceCopyset()))
		}
		return jsonString(out)
	case dmpb.SchemaOp_ListTable:
		ids, err := s.shareChunks(ctx, shares[0])
		if err != nil {
			return "", err
		}
		out := make([]string, 0, len(ids))
		for _, id := range ids {
			out = append(out, strconv.FormatUint(id, 10))
		}
		return jsonString(out)
	case dmpb.SchemaOp_ListMigrateTargets:
		return s.migrateTargets(ctx, srcPool, shares, req.GetDatabase(), req.GetTable())
	case dmpb.SchemaOp_GetSchema:
		return s.getSchema(ctx, name, srcPool, shares[0], chunk)
	}
	sh := shares[0]
	set := &pb.SetSchema{Name: name, Chunk: chunk, Clone: clone, Remove: op == dmpb.SchemaOp_RemoveSchema, NowMs: time.Now().UnixMilli()}
	if !set.Remove {
		set.Text = strings.TrimSpace(req.GetSchema())
	}
	g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
	if r := s.routePropose(ctx, g, &pb.Op{Op: &pb.Op_SetSchema{SetSchema: set}}); r.GetCode() != 0 {
		return "", fmt.Errorf("%s", r.GetMsg())
	}
	if set.Remove {
		return fmt.Sprintf("removed the schema set for chunk %d of %s (task %q)", chunk, req.GetDatabase(), name), nil
	}
	return fmt.Sprintf("set the schema of chunk %d of %s (task %q): %s", chunk, req.GetDatabase(), name, SchemaString(clone)), nil
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// trackedChunks is every chunk share st tracks a state for.
func trackedChunks(st *pb.SubTask) []uint64 {
	var ids []uint64
	for id := range st.GetClones() {
		ids = append(ids, id)
	}
	for id := range st.GetAsOf() {
		ids = append(ids, id)
	}
	for id := range st.GetSchemas() {
		ids = append(ids, id)
	}
	return ids
}

// shareChunks lists the chunks of share sh: those of its target copyset
// and those it tracks, ascending.
func (s *Service) shareChunks(ctx context.Context, sh *pb.Located) ([]uint64, error) {
	g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
	r := s.routeChunks(ctx, g, 0)
	if r.GetCode() != 0 {
		return nil, fmt.Errorf("chunks of copyset %d/%d: %s", g.Pool(), g.Copyset(), r.GetMsg())
	}
	ids := append(slices.Clone(r.GetIds()), trackedChunks(sh.GetSubtask())...)
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// getSchema answers GetSchema for chunk of share sh.
func (s *Service) getSchema(ctx context.Context, name string, srcPool uint32, sh *pb.Located, chunk uint64) (string, error) {
	st := sh.GetSubtask()
	g := copyset.NewGroupID(sh.GetPool(), sh.GetCopyset())
	r := s.routeChunks(ctx, g, chunk)
	if r.GetCode() != 0 {
		return "", fmt.Errorf("chunk %d of copyset %d/%d: %s", chunk, g.Pool(), g.Copyset(), r.GetMsg())
	}
	c := st.GetClones()[chunk]
	v := SchemaView{Task: name, Database: CopysetName(srcPool, st.GetSourceCopyset()), Chunk: chunk,
		Target: fmt.Sprintf("%d/%d", g.Pool(), g.Copyset()), Schema: SchemaString(c)}
	if c != nil {
		v.Unwritten = blockRanges(c.GetWritten(), false)
	}
	if cs := r.GetState(); cs != nil {
		v.Exists, v.Sn, v.CorrectedSn, v.SnapSn = true, cs.GetSn(), cs.GetCorrectedSn(), cs.GetSnapSn()
	}
	if p := st.GetAsOf()[chunk]; p != nil {
		v.AsOf = Position{Pool: srcPool, Copyset: st.GetSourceCopyset(), At: p}.String()
	}
	if ov := st.GetSchemas()[chunk]; ov != nil {
		prior := "normal"
		if ov.GetHadClone() {
			prior = SchemaString(ov.GetPrior())
		}
		v.Override = &OverrideView{Text: ov.GetText(), SetMs: ov.GetSetMs(), Prior: prior, At: CheckpointString(ov.GetAt())}
	}
	return jsonString(v)
}

// migrateTargets answers ListMigrateTargets: each share's route whose
// source copyset matches the database pattern; with a table pattern, a
// route per chunk of it whose id matches.
func (s *Service) migrateTargets(ctx context.Context, srcPool uint32, shares []*pb.Located, dbRe, tableRe string) (string, error) {
	compile := func(what, re string) (*regexp.Regexp, error) {
		if re == "" {
			return nil, nil
		}
		r, err := regexp.Compile(re)
		if err != nil {
			return nil, fmt.Errorf("%s pattern %q: %v", what, re, err)
		}
		return r, nil
	}
	dbs, err := compile("database", dbRe)
	if err != nil {
		return "", err
	}
	tables, err := compile("table", tableRe)
	if err != nil {
		return "", err
	}
	out := []MigrateTarget{}
	for _, sh := range shares {
		src := CopysetName(srcPool, sh.GetSubtask().GetSourceCopyset())
		if dbs != nil && !dbs.MatchString(src) {
			continue
		}
		dst := CopysetName(sh.GetPool(), sh.GetCopyset())
		if tables == nil {
			out = append(out, MigrateTarget{SourceSchema: src, TargetSchema: dst})
			continue
		}
		ids, err := s.shareChunks(ctx, sh)
		if err != nil {
			return "", err
		}
		for _, id := range ids {
			if t := strconv.FormatUint(id, 10); tables.MatchString(t) {
				out = append(out, MigrateTarget{SourceSchema: src, SourceTable: t, TargetSchema: dst, TargetTable: t})
			}
		}
	}
	return jsonString(out)
}

// routeChunks asks copyset g's leader for its chunks (chunk 0) or one
// chunk's state.
func (s *Service) routeChunks(ctx context.Context, g copyset.GroupID, chunk uint64) *pb.ChunksResponse {
	return s.routeChunksReq(ctx, g, &pb.ChunksRequest{Chunk: chunk})
}

// routeChunksReq runs Chunks (req) on copyset g's leader.
func (s *Service) routeChunksReq(ctx context.Context, g copyset.GroupID, req *pb.ChunksRequest) *pb.ChunksResponse {
	req.Pool, req.Copyset = g.Pool(), g.Copyset()
	return routeTo(ctx, s, g, func(ctx context.Context) *pb.ChunksResponse { return s.chunksLocal(ctx, g, req) },
		func(ctx context.Context, c pb.DMInternalClient) (*pb.ChunksResponse, error) {
			return c.Chunks(ctx, req)
		},
		func(msg string, notLeader bool) *pb.ChunksResponse {
			return &pb.ChunksResponse{Code: -1, Msg: msg, NotLeader: notLeader}
		})
}

// chunksLocal answers Chunks on copyset g, which this server must lead,
// past a read barrier: its chunk ids, one chunk's state, or (states)
// every chunk's, each read between two readings of the last chunk op.
func (s *Service) chunksLocal(ctx context.Context, g copyset.GroupID, req *pb.ChunksRequest) *pb.ChunksResponse {
	n, _, no := s.led(g)
	if no != nil {
		return &pb.ChunksResponse{Code: -1, Msg: no.msg, NotLeader: no.notLeader, Leader: no.leader}
	}
	fail := func(err error) *pb.ChunksResponse {
		out := &pb.ChunksResponse{Code: -1, Msg: fmt.Sprintf("copyset %d/%d: %v", g.Pool(), g.Copyset(), err)}
		if leader, lost := copyset.LeaderLost(err); lost {
			out.NotLeader, out.Leader = true, string(leader)
		}
		return out
	}
	if _, err := n.ReadBarrier(ctx); err != nil {
		return fail(err)
	}
	st, err := chunkread.Of(n)
	if err != nil {
		return fail(err)
	}
	// last is the index of the last chunk op applied (the applied index
	// where the store does not say, or before its first op).
	last := func() uint64 {
		if lo, ok := st.(chunkread.LastOp); ok {
			if i, _ := lo.LastChunkOp(); i != 0 {
				return i
			}
		}
		return n.AppliedIndex()
	}
	state := func(id uint64) (*pb.ChunkState, error) {
		m, ok, err := st.ChunkMeta(id)
		if err != nil || !ok {
			return nil, err
		}
		cs := &pb.ChunkState{Id: id, Sn: m.Sn, CorrectedSn: m.CorrectedSn, SnapSn: m.SnapSn}
		if req.GetHash() {
			if h, err := st.GetChunkHash(id, 0, st.ChunkSize()); err != nil {
				cs.HashError = err.Error()
			} else {
				cs.Hash = h
			}
		}
		return cs, nil
	}
	switch {
	case req.GetStates():
		out := &pb.ChunksResponse{FromIndex: last()}
		out.Ids = st.ListChunks()
		out.ToIndex = last()
		for _, id := range out.Ids {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			from := last()
			cs, err := state(id)
			if err != nil {
				return fail(fmt.Errorf("chunk %d: %w", id, err))
			}
			if cs == nil {
				continue // deleted since the listing
			}
			cs.FromIndex, cs.ToIndex = from, last()
			out.States = append(out.States, cs)
		}
		return out
	case req.GetChunk() == 0:
		return &pb.ChunksResponse{Ids: st.ListChunks()}
	}
	cs, err := state(req.GetChunk())
	if err != nil {
		return fail(fmt.Errorf("chunk %d: %w", req.GetChunk(), err))
	}
	return &pb.ChunksResponse{State: cs}
}

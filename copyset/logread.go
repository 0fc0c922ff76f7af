package copyset

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Reading the raft log by index, for consumers that follow a copyset's log
// rather than its state (a sync export ships every op after the index its
// snapshot phase pinned, see logpin.go).

// ErrLogCompacted is returned for a log index this replica no longer holds:
// below its first index (truncated after a snapshot), or in the gap a
// snapshot install leaves between the old log and the snapshot index.
var ErrLogCompacted = errors.New("log entry compacted away")

// ErrLogBeyondLast is returned for a log index above the last entry this
// replica knows to be committed: it does not exist yet, or it might still
// be replaced.
var ErrLogBeyondLast = errors.New("log entry beyond the last committed index")

// LogEntryType says what a log entry carries.
type LogEntryType uint8

const (
	// LogEntryOps is a command: the ops in Ops, applied in order at Index.
	LogEntryOps LogEntryType = 1
	// LogEntryConfiguration is a membership change (it advances the
	// configuration epoch, Status.Epoch).
	LogEntryConfiguration LogEntryType = 2
	// LogEntryOther is a no-op or a barrier: nothing for the state machines.
	LogEntryOther LogEntryType = 3
)

// Op is one replicated op of a log entry.
type Op struct {
	Kind    Kind
	Payload []byte // the op without its header; read-only, it may alias the log cache
}

// LogEntry is one committed entry of a copyset's raft log.
type LogEntry struct {
	Index uint64
	Term  uint64
	// AppendedAt is when the leader of Term appended the entry (zero when
	// unknown).
	AppendedAt time.Time
	Type       LogEntryType
	// Ops are the ops of a LogEntryOps entry in apply order: one, or
	// several when concurrent proposals shared the entry (propose.go). Nil
	// for other types.
	Ops []Op
}

// LogEntry returns the committed entry at index. An index below what this
// replica holds is ErrLogCompacted, one above its commit index
// ErrLogBeyondLast (both wrapped with the copyset and the bounds). A
// command entry whose ops do not decode (the FSM skipped them too) is an
// error naming the index. Reads of recent entries come from the log cache,
// older ones from the log store.
func (n *Node) LogEntry(index uint64) (LogEntry, error) {
	if index == 0 {
		return LogEntry{}, fmt.Errorf("copyset %s: index 0: %w (log indexes start at 1)", n.group, ErrLogCompacted)
	}
	commit := n.raft.CommitIndex()
	if index > commit {
		return LogEntry{}, fmt.Errorf("copyset %s: index %d: %w (commit index %d)", n.group, index, ErrLogBeyondLast, commit)
	}
	var l raft.Log
	if err := n.stores.log.GetLog(index, &l); err != nil {
		if errors.Is(err, raft.ErrLogNotFound) {
			first, _ := n.stores.first()
			return LogEntry{}, fmt.Errorf("copyset %s: index %d: %w (first index %d)", n.group, index, ErrLogCompacted, first)
		}
		return LogEntry{}, fmt.Errorf("copyset %s: read log index %d: %w", n.group, index, err)
	}
	return decodeLogEntry(n.group, &l)
}

// decodeLogEntry converts a raft entry to a LogEntry.
func decodeLogEntry(g GroupID, l *raft.Log) (LogEntry, error) {
	e := LogEntry{Index: l.Index, Term: l.Term, AppendedAt: l.AppendedAt}
	switch l.Type {
	case raft.LogCommand:
		e.Type = LogEntryOps
	case raft.LogConfiguration:
		e.Type = LogEntryConfiguration
		return e, nil
	default:
		e.Type = LogEntryOther
		return e, nil
	}
	ops := [][]byte{l.Data}
	if len(l.Data) > 0 && l.Data[0] == opBatchVersion {
		var err error
		if ops, err = decodeBatch(l.Data); err != nil {
			return e, fmt.Errorf("copyset %s: log index %d: %w", g, l.Index, err)
		}
	}
	e.Ops = make([]Op, len(ops))
	for i, op := range ops {
		kind, payload, err := DecodeOp(op)
		if err != nil {
			return e, fmt.Errorf("copyset %s: log index %d, op %d: %w", g, l.Index, i, err)
		}
		e.Ops[i] = Op{Kind: kind, Payload: payload}
	}
	return e, nil
}

// LogBounds returns the first and last index of the log this replica
// holds (first is last + 1 when it holds none): the range LogEntry can
// read, up to the commit index.
func (n *Node) LogBounds() (first, last uint64, err error) { return n.logBounds() }

// CommitIndex returns the highest log index this replica knows to be
// committed: LogEntry reads up to it.
func (n *Node) CommitIndex() uint64 { return n.raft.CommitIndex() }

package kinds

// The kinds. Reserved numbers belong to services that have not landed:
// nothing registers them yet, and nothing else may take them.
const (
	// Chunk is the chunk store of a copyset (chunkstore/chunk_fsm.go).
	Chunk = 1
	// Integrity is a copyset's integrity scan jobs and CHUNK_OP_SCAN ops
	// (integrity/machine.go).
	Integrity = 2
	// Fence is a copyset's epoch fences (chunkstore/fence.go).
	Fence = 3
	// Sync is the sync service's sub-tasks (datasync/).
	Sync = 4
	// Disagg is the disagg service's decisions in flight, clone locks and
	// gc marks (disagg/).
	Disagg = 5
	// DM is the dm service's subtask shares (dm/).
	DM = 6
	// View is the disagg service's read views (disagg/view*.go), applied
	// to the copyset's chunk store (chunkstore/view_fsm.go).
	View = 7
	// WriteFence is a copyset's write fence: from a replicated point on,
	// chunk ops of anyone but the fence's owner are refused
	// (chunkstore/write_fence.go).
	WriteFence = 8
)

// Entry is one row of the table.
type Entry struct {
	Number   uint8
	Name     string
	Reserved bool // no machine registers it yet
}

// Table lists every kind ever assigned, in number order.
var Table = []Entry{
	{Chunk, "chunk", false},
	{Integrity, "integrity", false},
	{Fence, "fence", false},
	{Sync, "sync", false},
	{Disagg, "disagg", false},
	{DM, "dm", false},
	{View, "view", false},
	{WriteFence, "writefence", false},
}

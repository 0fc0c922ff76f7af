package copyset

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/chunkraft/chunkraft/copyset/sharedlog"
)

// logCacheBytes bounds the entry data a copyset's log cache keeps: four
// 1 MiB writes, more than a copyset has in flight under its proposal
// window; older entries are read back from the log store when a lagging
// follower needs them. It is also what the cache can pin per copyset (256
// copysets: 1 GiB). At 16 MiB, 1 MiB writes over 16 copysets keep a
// quarter GiB live, so each GC cycle's heap spreads over fresh memory:
// about seven times the page faults per write of 4 MiB, more server CPU
// per write and fewer writes per second (docs/performance.md, "The raft
// log cache's size").
const logCacheBytes = 4 << 20

// logStores is what a node needs from its raft log storage.
type logStores struct {
	log    raft.LogStore    // cached view handed to raft
	cache  *logCache        // log, as its type
	stable raft.StableStore // term and vote
	first  func() (uint64, error)
	close  func() error
}

// openBoltLogStore opens (creating if needed) the copyset's raft-boltdb/v2
// file under dir as both log and stable store. Every StoreLogs is one
// fsynced bolt transaction. A LogCache of cacheSize entries fronts it so
// replication and read barriers of recent entries do not hit bolt.
func openBoltLogStore(dir string, cacheSize int) (*logStores, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open log store: %w", err)
	}
	path := filepath.Join(dir, "raft.db")
	store, err := raftboltdb.New(raftboltdb.Options{Path: path})
	if err != nil {
		return nil, fmt.Errorf("open log store %s: %w", path, err)
	}
	cached, err := newLogCache(cacheSize, logCacheBytes, store)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("open log cache: %w", err)
	}
	return &logStores{log: cached, cache: cached, stable: store, first: store.FirstIndex, close: store.Close}, nil
}

// openSharedLogStore returns copyset group's view of the server's shared,
// group-committing log (one fsync for many copysets' appends). Closing it
// leaves the shared log open.
func openSharedLogStore(shared *sharedlog.Log, group GroupID, cacheSize int) (*logStores, error) {
	gs, err := shared.Group(uint64(group))
	if err != nil {
		return nil, fmt.Errorf("open shared log of copyset %s: %w", group, err)
	}
	cached, err := newLogCache(cacheSize, logCacheBytes, gs)
	if err != nil {
		return nil, fmt.Errorf("open log cache: %w", err)
	}
	return &logStores{log: cached, cache: cached, stable: gs, first: gs.FirstIndex, close: func() error { return nil }}, nil
}

// openLogStores opens copyset group's raft log and stable store: its view
// of the shared log when there is one, else its own raft-boltdb file.
func openLogStores(shared *sharedlog.Log, group GroupID, dir string, cacheSize int) (*logStores, error) {
	if shared != nil {
		return openSharedLogStore(shared, group, cacheSize)
	}
	return openBoltLogStore(filepath.Join(dir, "raft"), cacheSize)
}

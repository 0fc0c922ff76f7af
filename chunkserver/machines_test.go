package chunkserver

import (
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver/datastore"
	"github.com/chunkraft/chunkraft/copyset"
)

// mustChunkStore returns the chunk store of n or fails the test.
func mustChunkStore(t *testing.T, n *copyset.Node) *datastore.Store {
	t.Helper()
	store, err := chunkStore(n)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

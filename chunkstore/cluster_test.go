package chunkstore_test

import (
	"testing"

	"github.com/chunkraft/chunkraft/chunkserver"
	"github.com/chunkraft/chunkraft/chunkserver/chunkservertest"
	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/internal/chunkread"
)

// startTestCluster starts n in-process chunkservers (chunkservertest) with
// copyset 1 of pool 1 and waits for its leader.
func startTestCluster(t testing.TB, n int, opts ...func(*chunkserver.Config)) *chunkservertest.Cluster {
	t.Helper()
	return chunkservertest.Start(t, n, opts...)
}

var (
	block      = servertest.Block
	writeReq   = servertest.WriteReq
	readReq    = servertest.ReadReq
	cloneReq   = servertest.CloneReq
	mustStatus = servertest.MustStatus
)

// chunksOf is server i's chunk store of the cluster's copyset as tenants
// read it.
func chunksOf(t *testing.T, c *chunkservertest.Cluster, i int) chunkread.Store {
	t.Helper()
	s, err := chunkread.Of(c.Node(i))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// braftStateError is the state CopysetService.GetCopysetStatus reports for
// a broken replica (braft's STATE_ERROR).
const braftStateError = 5

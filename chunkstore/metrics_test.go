package chunkstore

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestChunkOpsListed: chunkOps names every op chunk_service.go reports, so
// each has its series from start-up.
func TestChunkOpsListed(t *testing.T) {
	src, err := os.ReadFile("chunk_service.go")
	if err != nil {
		t.Fatal(err)
	}
	ops := regexp.MustCompile(`s\.(?:mutate|read)\(ctx, "([a-z0-9_]+)"`).FindAllSubmatch(src, -1)
	if len(ops) == 0 {
		t.Fatal("no s.mutate/s.read calls found in chunk_service.go")
	}
	for _, m := range ops {
		if !slices.Contains(chunkOps, string(m[1])) {
			t.Errorf("op %q of chunk_service.go is not in chunkOps", m[1])
		}
	}
}

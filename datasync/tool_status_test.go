package datasync

import (
	"strings"
	"testing"

	"github.com/chunkraft/chunkraft/proto/chunkraft/clusterpb"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/syncstatepb"
)

// TestUnanswered: a status is partial exactly when a copyset of the
// cluster has no leader in the list, and the error names such copysets
// (at most 8, then how many more).
func TestUnanswered(t *testing.T) {
	var css []*clusterpb.Copyset
	for i := uint32(1); i <= 12; i++ {
		css = append(css, &clusterpb.Copyset{Pool: 1, Copyset: i})
	}
	all := &pb.ListResponse{}
	for _, c := range css {
		all.Copysets = append(all.Copysets, &pb.LedCopyset{Pool: c.GetPool(), Copyset: c.GetCopyset()})
	}
	if err := unanswered(css, all); err != nil {
		t.Fatalf("every copyset answered: %v", err)
	}
	some := &pb.ListResponse{Copysets: []*pb.LedCopyset{{Pool: 1, Copyset: 2}, {Pool: 2, Copyset: 3}}}
	err := unanswered(css[:3], some)
	if err == nil || err.Error() != "no leader answered for copysets 1/1, 1/3" {
		t.Fatalf("two copysets without a leader: %v", err)
	}
	err = unanswered(css, &pb.ListResponse{})
	if err == nil || !strings.HasSuffix(err.Error(), "1/8, and 4 more") {
		t.Fatalf("twelve copysets without a leader: %v", err)
	}
}

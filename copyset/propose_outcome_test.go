package copyset_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/copyset/copysettest"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

const toyKind copyset.Kind = 1

func toyCluster(t *testing.T) (*copysettest.Cluster, copyset.GroupID) {
	t.Helper()
	c := copysettest.NewCluster(t, 3, []copyset.MachineSpec{copysettest.ToySpec(toyKind, "toy")}, copysettest.FastRaft())
	g := copyset.NewGroupID(1, 1)
	c.Create(g)
	return c, g
}

// A follower proposes nothing: NotLeaderError, naming the leader.
func TestProposeAsOnFollowerIsNotLeader(t *testing.T) {
	c, g := toyCluster(t)
	leader := c.Leader(g)
	follower := c.Node((leader+1)%3, g)
	// The follower knows the leader once it has heard from it.
	testwait.Until(t, 10*time.Second, func() error {
		if follower.Leader() == "" {
			return errors.New("follower knows no leader yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	index, _, err := copyset.ProposeAs[error](ctx, follower, copysettest.ToyOp(toyKind, "k", "v"))
	var nl *copyset.NotLeaderError
	if !errors.As(err, &nl) || index != 0 {
		t.Fatalf("ProposeAs on a follower: got index %d, %v; want a NotLeaderError", index, err)
	}
	if want := c.Servers[leader].Peer(); nl.Leader != want {
		t.Errorf("NotLeaderError names leader %q, want %q", nl.Leader, want)
	}
	var ou *copyset.OutcomeUnknownError
	if errors.As(err, &ou) {
		t.Errorf("a refused proposal is also an OutcomeUnknownError: %v", err)
	}
}

// A leader cut off from its followers appends the op, cannot commit it and
// steps down when its lease runs out: the op's outcome is unknown, which
// Propose says with an OutcomeUnknownError, not a NotLeaderError.
func TestProposeAfterLeadershipLostIsOutcomeUnknown(t *testing.T) {
	c, g := toyCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	testwait.Until(t, 20*time.Second, func() error {
		i := c.Leader(g)
		n := c.Node(i, g)
		c.Cut(i)
		defer c.Heal(i)
		_, _, err = copyset.ProposeAs[error](ctx, n, copysettest.ToyOp(toyKind, "k", "v"))
		var nl *copyset.NotLeaderError
		if errors.As(err, &nl) {
			// It stepped down before the op reached raft: try again on
			// the next leader.
			return fmt.Errorf("refused before the append: %w", err)
		}
		return nil
	})
	var ou *copyset.OutcomeUnknownError
	if !errors.As(err, &ou) {
		t.Fatalf("proposal on a leader cut off after the append: %v, want an OutcomeUnknownError", err)
	}
}

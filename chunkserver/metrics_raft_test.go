package chunkserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/chunkserver/servertest"
	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// TestRaftTrafficMetrics: after client writes, the leader counts its
// proposals and the entries that carried them (no more entries than
// proposals), and the AppendEntries and entries it sent each follower and
// the gRPC messages that carried them and their answers, which each
// follower counts as received from it; heartbeats are counted
// both ways; the gRPC server metrics count the ChunkService's writes.
func TestRaftTrafficMetrics(t *testing.T) {
	c := startTestCluster(t, 3)
	l := c.Leader(t)
	const writes = 20
	for i := range writes {
		c.Write(t, uint64(i%4+1), 1, 0, servertest.Block(byte(i)), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	}
	leader := string(c.Servers[l].Local().Addr())
	testwait.Until(t, 30*time.Second, func() error {
		got := c.scrape(t, l)
		props, entries := got["chunkraft_raft_proposals_total"][""], got["chunkraft_raft_proposal_entries_total"][""]
		if props < writes || entries < 1 || entries > props {
			return fmt.Errorf("proposals %v, entries %v", props, entries)
		}
		if n := got["grpc_server_handled_total"]["grpc_code=OK,grpc_method=WriteChunk,grpc_service=curve.chunkserver.ChunkService,grpc_type=unary"]; n < writes {
			return fmt.Errorf("grpc_server_handled_total of WriteChunk: %v", n)
		}
		for i := range c.Servers {
			if i == l {
				continue
			}
			peer := string(c.Servers[i].Local().Addr())
			sent, sentEntries := got["chunkraft_raft_append_entries_messages_total"]["direction=sent,peer="+peer],
				got["chunkraft_raft_append_entries_entries_total"]["direction=sent,peer="+peer]
			if sent < 1 || sentEntries < writes {
				return fmt.Errorf("to %s: %v AppendEntries, %v entries", peer, sent, sentEntries)
			}
			if msgs := got["chunkraft_raft_append_entries_grpc_messages_total"]["direction=sent,peer="+peer]; msgs < 1 || msgs > sent {
				return fmt.Errorf("to %s: %v AppendEntries in %v gRPC messages", peer, sent, msgs)
			}
			if answers := got["chunkraft_raft_append_entries_answer_messages_total"]["direction=received,peer="+peer]; answers < 1 || answers > sent {
				return fmt.Errorf("from %s: %v messages answering %v AppendEntries", peer, answers, sent)
			}
			if hb := got["chunkraft_raft_heartbeats_total"]["direction=sent,peer="+peer]; hb < 1 {
				return fmt.Errorf("no heartbeat to %s", peer)
			}
			f := c.scrape(t, i)
			recv, recvEntries := f["chunkraft_raft_append_entries_messages_total"]["direction=received,peer="+leader],
				f["chunkraft_raft_append_entries_entries_total"]["direction=received,peer="+leader]
			if recv < 1 || recvEntries < writes {
				return fmt.Errorf("%s from the leader: %v AppendEntries, %v entries", peer, recv, recvEntries)
			}
			if hb, msgs := f["chunkraft_raft_heartbeats_total"]["direction=received,peer="+leader],
				f["chunkraft_raft_heartbeat_messages_total"]["direction=received,peer="+leader]; hb < 1 || msgs < 1 || msgs > hb {
				return fmt.Errorf("%s: %v heartbeats in %v messages from the leader", peer, hb, msgs)
			}
		}
		return nil
	})
}

package chunkserver

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chunkraft/chunkraft/copyset"
)

// raftCollector exports the raft traffic counters of the server's
// transport (copyset.TransportManager.Stats), read at scrape time: the
// proposals and the entries carrying them, and per peer server the
// AppendEntries requests, the entries in them and the gRPC messages
// carrying them and their answers, held idle repeats, and heartbeats and
// the messages carrying them, each way.
type raftCollector struct {
	trans *copyset.TransportManager

	proposals, entries             *prometheus.Desc
	appends, entriesByPeer, held   *prometheus.Desc
	appendMessages, answerMessages *prometheus.Desc
	heartbeats, heartbeatMessages  *prometheus.Desc
}

func newRaftCollector(t *copyset.TransportManager) *raftCollector {
	d := descMaker("chunkraft_raft_")
	peer := descMaker("chunkraft_raft_", "peer", "direction")
	return &raftCollector{
		trans:     t,
		proposals: d("proposals_total", "Proposals this server's copysets handed to raft while leading (client ops and service ops)."),
		entries:   d("proposal_entries_total", "Raft entries that carried the proposals (proposals_total / proposal_entries_total: proposals per entry)."),
		appends: peer("append_entries_messages_total",
			"AppendEntries requests that are not heartbeats (entries, or a commit index), per peer server and direction (sent, received)."),
		entriesByPeer: peer("append_entries_entries_total", "Log entries in those AppendEntries requests, per peer server and direction."),
		appendMessages: peer("append_entries_grpc_messages_total",
			"gRPC messages that carried those AppendEntries requests (a batch of every copyset's, or one alone), per peer server and direction."),
		answerMessages: peer("append_entries_answer_messages_total",
			"gRPC messages that carried the answers to AppendEntries requests (a batch, or one alone), per peer server and direction."),
		held: descMaker("chunkraft_raft_", "peer")("append_entries_held_total",
			"Idle AppendEntries repeats a pipeline held back instead of sending them to the peer server."),
		heartbeats:        peer("heartbeats_total", "Raft heartbeats, per peer server and direction."),
		heartbeatMessages: peer("heartbeat_messages_total", "gRPC messages that carried the heartbeats (a batch of every copyset's, or one alone), per peer server and direction."),
	}
}

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(ch, c.proposals, c.entries, c.appends, c.entriesByPeer, c.appendMessages, c.answerMessages, c.held, c.heartbeats, c.heartbeatMessages)
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.trans.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.proposals, s.Proposals)
	counter(c.entries, s.Entries)
	for _, p := range s.Peers {
		counter(c.appends, p.AppendsSent, p.Peer, "sent")
		counter(c.appends, p.AppendsReceived, p.Peer, "received")
		counter(c.entriesByPeer, p.EntriesSent, p.Peer, "sent")
		counter(c.entriesByPeer, p.EntriesReceived, p.Peer, "received")
		counter(c.appendMessages, p.AppendMessagesSent, p.Peer, "sent")
		counter(c.appendMessages, p.AppendMessagesReceived, p.Peer, "received")
		counter(c.answerMessages, p.AnswerMessagesSent, p.Peer, "sent")
		counter(c.answerMessages, p.AnswerMessagesReceived, p.Peer, "received")
		counter(c.held, p.AppendsHeld, p.Peer)
		counter(c.heartbeats, p.HeartbeatsSent, p.Peer, "sent")
		counter(c.heartbeats, p.HeartbeatsReceived, p.Peer, "received")
		counter(c.heartbeatMessages, p.HeartbeatMessagesSent, p.Peer, "sent")
		counter(c.heartbeatMessages, p.HeartbeatMessagesReceived, p.Peer, "received")
	}
}

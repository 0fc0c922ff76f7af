package copyset

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// RaftStats counts a server's raft traffic since its TransportManager was
// created: what the batching of proposals and of messages saves is the
// ratio of these counters (proposals per entry, entries per AppendEntries,
// heartbeats per batch).
type RaftStats struct {
	// Proposals handed to raft by this server's copysets while they led,
	// and the raft entries (raft.Apply calls) that carried them: an entry
	// carries several proposals when they queued together.
	Proposals, Entries uint64
	// Peers is the traffic with each peer server, by its address.
	Peers []PeerStats
}

// PeerStats counts the raft messages between this server and one peer
// server, of every copyset they share.
type PeerStats struct {
	Peer string
	// AppendsSent: AppendEntries requests sent to the peer that are not
	// heartbeats (entries, or a commit index the follower has not seen),
	// EntriesSent the log entries in them, AppendMessagesSent the gRPC
	// messages that carried them (a batch of every group's, or one alone),
	// AppendsHeld the idle repeats a pipeline held back instead of sending
	// (they ride on the next one). AnswerMessagesSent: the gRPC messages
	// that carried this server's answers to the peer's AppendEntries.
	AppendsSent, EntriesSent, AppendMessagesSent, AppendsHeld uint64
	AnswerMessagesSent                                        uint64
	// HeartbeatsSent: heartbeats sent to the peer; HeartbeatMessagesSent
	// the gRPC messages that carried them (a batch, or one heartbeat alone).
	HeartbeatsSent, HeartbeatMessagesSent uint64
	// The same, received from the peer (AppendsHeld has no inbound side).
	AppendsReceived, EntriesReceived, AppendMessagesReceived uint64
	AnswerMessagesReceived                                   uint64
	HeartbeatsReceived, HeartbeatMessagesReceived            uint64
}

// peerCounters are one peer's counters, each way.
type peerCounters struct {
	sent, recv  flowCounters
	appendsHeld atomic.Uint64
}

// flowCounters count the raft messages of one direction between two
// servers.
type flowCounters struct {
	appends, entries, appendMsgs, answerMsgs atomic.Uint64
	heartbeats, heartbeatMsgs                atomic.Uint64
}

// message counts one AppendEntries message on its own: a heartbeat, or a
// message with n entries.
func (f *flowCounters) message(heartbeat bool, n int) {
	if heartbeat {
		f.heartbeats.Add(1)
		f.heartbeatMsgs.Add(1)
		return
	}
	f.appends.Add(1)
	f.appendMsgs.Add(1)
	f.entries.Add(uint64(n))
}

// appendBatch counts one message carrying n AppendEntries with entries
// entries in all.
func (f *flowCounters) appendBatch(n, entries int) {
	f.appendMsgs.Add(1)
	f.appends.Add(uint64(n))
	f.entries.Add(uint64(entries))
}

// answerBatch counts one message carrying answers to AppendEntries.
func (f *flowCounters) answerBatch() { f.answerMsgs.Add(1) }

// heartbeatBatch counts one message carrying n heartbeats.
func (f *flowCounters) heartbeatBatch(n int) {
	f.heartbeatMsgs.Add(1)
	f.heartbeats.Add(uint64(n))
}

// raftCounters are a TransportManager's counters. Peers are added as
// traffic with them is first counted, and never removed (a server talks to
// the few servers of its cluster).
type raftCounters struct {
	proposals, entries atomic.Uint64
	peers              sync.Map // raft.ServerAddress -> *peerCounters
}

// peer returns the counters of peer addr.
func (c *raftCounters) peer(addr raft.ServerAddress) *peerCounters {
	if p, ok := c.peers.Load(addr); ok {
		return p.(*peerCounters)
	}
	p, _ := c.peers.LoadOrStore(addr, &peerCounters{})
	return p.(*peerCounters)
}

// Stats returns the manager's raft traffic counters, peers by address.
func (m *TransportManager) Stats() RaftStats {
	s := RaftStats{Proposals: m.stats.proposals.Load(), Entries: m.stats.entries.Load()}
	m.stats.peers.Range(func(k, v any) bool {
		p := v.(*peerCounters)
		s.Peers = append(s.Peers, PeerStats{Peer: string(k.(raft.ServerAddress)),
			AppendsSent: p.sent.appends.Load(), EntriesSent: p.sent.entries.Load(), AppendsHeld: p.appendsHeld.Load(),
			AppendMessagesSent: p.sent.appendMsgs.Load(), AnswerMessagesSent: p.sent.answerMsgs.Load(),
			AppendMessagesReceived: p.recv.appendMsgs.Load(), AnswerMessagesReceived: p.recv.answerMsgs.Load(),
			HeartbeatsSent: p.sent.heartbeats.Load(), HeartbeatMessagesSent: p.sent.heartbeatMsgs.Load(),
			AppendsReceived: p.recv.appends.Load(), EntriesReceived: p.recv.entries.Load(),
			HeartbeatsReceived: p.recv.heartbeats.Load(), HeartbeatMessagesReceived: p.recv.heartbeatMsgs.Load()})
		return true
	})
	slices.SortFunc(s.Peers, func(a, b PeerStats) int { return cmp.Compare(a.Peer, b.Peer) })
	return s
}

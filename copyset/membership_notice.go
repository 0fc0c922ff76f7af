// Removal notices: once the removal of a peer has committed, the leader tells
// the removed server so (noticeRemoved), since raft stops replicating to it
// before the removal commits; see membership.go's overview.

package copyset

import (
	"errors"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// Removal notices are retried this long (a removed server that restarts
// within it is told on its return), backing off up to noticeMaxWait; a
// peer that answers it has no such copyset for noticeNotFoundFor is given
// up on.
const (
	noticeFor         = 10 * time.Minute
	noticeMaxWait     = 5 * time.Second
	noticeNotFoundFor = time.Minute
)

// noticeRemoved tells removed peer p that the configuration entry at idx,
// which removed it, has committed (see membership.go's overview): it sends the
// entries p lacks up to idx (MaxAppendEntries at a time) with idx as the
// commit index, in the entry's term, as this server, the leader of that
// term. It gives up when p follows a newer term, its log conflicts, the
// entries it needs were compacted away, or after noticeFor.
func (n *Node) noticeRemoved(p PeerID, idx uint64) {
	var entry raft.Log
	if err := n.stores.log.GetLog(idx, &entry); err != nil {
		n.log.Warn("removal notice: read removal entry", "peer", p, "index", idx, "err", err)
		return
	}
	term := entry.Term
	prev := idx // first assume p has everything up to idx
	wait := 100 * time.Millisecond
	var notFound time.Time
	for deadline := time.Now().Add(noticeFor); time.Now().Before(deadline); {
		req, err := n.noticeRequest(term, prev, idx)
		if err != nil {
			n.log.Warn("removal notice: entries no longer in the log", "peer", p, "from", prev+1, "err", err)
			return
		}
		var resp raft.AppendEntriesResponse
		err = n.trans.AppendEntries(raft.ServerID(p), raft.ServerAddress(p.Addr()), req, &resp)
		switch {
		case errors.Is(err, raft.ErrTransportShutdown):
			return
		case err != nil:
			if grpcstatus.Code(err) != codes.NotFound {
				notFound = time.Time{}
			} else if notFound.IsZero() {
				notFound = time.Now()
			} else if time.Since(notFound) > noticeNotFoundFor {
				return // it has no replica (any more)
			}
			if !n.bg.sleep(wait) {
				return
			}
			wait = min(2*wait, noticeMaxWait)
		case resp.Term > term:
			return // it follows a newer term's leader, which will not replicate to it
		case resp.Success:
			if prev += uint64(len(req.Entries)); prev >= idx {
				n.log.Info("removed peer told its removal committed", "peer", p, "index", idx)
				return
			}
		case resp.LastLog >= prev:
			return // its log conflicts with ours: not ours to fix
		default:
			prev = resp.LastLog // it lacks entries: send them
		}
	}
}

// noticeRequest builds one removal notice: entries prev+1.. (at most
// MaxAppendEntries, up to idx) after prev, commit index idx.
func (n *Node) noticeRequest(term, prev, idx uint64) (*raft.AppendEntriesRequest, error) {
	self := []byte(n.local.Addr())
	req := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(n.local), Addr: self},
		Term:      term, PrevLogEntry: prev, LeaderCommitIndex: idx,
	}
	if prev > 0 {
		var l raft.Log
		if err := n.stores.log.GetLog(prev, &l); err != nil {
			return nil, err
		}
		req.PrevLogTerm = l.Term
	}
	for i := prev + 1; i <= idx && len(req.Entries) < n.opts.MaxAppendEntries; i++ {
		l := new(raft.Log)
		if err := n.stores.log.GetLog(i, l); err != nil {
			return nil, err
		}
		req.Entries = append(req.Entries, l)
	}
	return req, nil
}

package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Health of a copyset as `cluster status` classifies it, most severe first.
const (
	HealthMissing         = "missing"          // no replica answered
	HealthBroken          = "broken"           // a replica is in state ERROR (5)
	HealthNoLeader        = "no-leader"        // no replica that answered is the leader
	HealthUnderReplicated = "under-replicated" // fewer healthy replicas answer than the copyset has peers
	HealthLagging         = "lagging"          // a replica applied too far behind the leader's commit index, or nothing yet
	HealthStale           = "stale"            // a replica is not in the configuration the leader has
	HealthOK              = "ok"
)

// HealthOptions tune ClassifyCopyset.
type HealthOptions struct {
	// Replicas is how many peers every copyset is expected to have. A copyset
	// whose replicas name more members (a leader that did not answer) expects
	// that many.
	Replicas int
	// Lag is how far (in log entries) a replica's applied index may be behind
	// the leader's commit index before the copyset is lagging.
	Lag int64
}

// CopysetHealth is the classification of one copyset from the status of its
// replicas.
type CopysetHealth struct {
	Copyset CopysetID
	Health  string   // one of the Health* values: the most severe problem
	Details []string // every problem found, most severe first
	Leader  string   // peer id of the replica in state LEADER, "" if none answered
	// Peers are the members: the configuration the leader reports
	// (Configured), else the replicas that answered plus a leader they name
	// that did not answer; sorted.
	Peers      []string
	Configured bool
	// Stale are the replicas that answered but are not in the leader's
	// configuration (removed while they were away): they never rejoin and
	// can be moved to their server's trash (copyset delete-broken).
	Stale       []StaleReplica
	Answering   int      // replicas that answered
	Unreachable []string // servers that could not be asked (they may host a replica)
	Term        int64    // the leader's term (the highest reported without a leader)
	Committed   int64    // the leader's commit index (the highest without a leader)
	MinApplied  int64    // the lowest applied index of the replicas that answered
	Epoch       uint64   // the leader's configuration epoch (the highest without a leader)
}

// StaleReplica is a replica outside its copyset's configuration.
type StaleReplica struct {
	Peer   string `json:"peer"`
	Server string `json:"server"` // the address it answered on
	// Empty: the replica knows no configuration at all: an empty one made
	// for a peer add that has not happened (yet).
	Empty bool `json:"empty,omitempty"`
}

// OK reports whether the copyset is healthy.
func (h CopysetHealth) OK() bool { return h.Health == HealthOK }

// replicaName is the peer id a replica reports, else its server's address.
func replicaName(r ReplicaStatus) string {
	if r.Peer != "" {
		return r.Peer
	}
	return r.Server
}

// Membership is a copyset's raft configuration as its leader reports it.
type Membership struct {
	Known  bool     // a leader that answered reported its configuration
	Leader string   // that leader's peer id
	Peers  []string // the configuration's peer ids, sorted
	// Committed: the configuration has committed (else a change is under way).
	Committed bool
	// Previous are the peers of the committed configuration while a change
	// is under way (a peer being removed is still a member until it commits).
	Previous []string
}

// Member reports whether peer is in the configuration, or in the committed
// one a change under way replaces.
func (m Membership) Member(peer string) bool {
	return slices.Contains(m.Peers, peer) || slices.Contains(m.Previous, peer)
}

// LeaderConfig returns the configuration of the leader among rows (the
// replica in state LEADER with the highest term), when it reported one.
func LeaderConfig(rows []ReplicaStatus) Membership {
	var leader *ReplicaStatus
	for i, r := range rows {
		if r.Err == nil && r.Hosted && r.State == StateLeader && (leader == nil || r.Term > leader.Term) {
			leader = &rows[i]
		}
	}
	if leader == nil || !leader.HasConfig {
		return Membership{}
	}
	peers := slices.Clone(leader.Config)
	slices.Sort(peers)
	m := Membership{Known: true, Leader: replicaName(*leader), Peers: peers, Committed: leader.ConfigCommitted()}
	if !m.Committed {
		m.Previous = leader.CommittedConfig
	}
	return m
}

// ClassifyCopyset classifies a copyset from the CopysetStatus rows of every
// server (rows of servers that do not host it are ignored).
func ClassifyCopyset(cs CopysetID, rows []ReplicaStatus, opt HealthOptions) CopysetHealth {
	h := CopysetHealth{Copyset: cs}
	var hosted []ReplicaStatus
	for _, r := range rows {
		switch {
		case r.Err != nil:
			h.Unreachable = append(h.Unreachable, r.Server)
		case r.Hosted:
			hosted = append(hosted, r)
		}
	}
	h.Answering = len(hosted)
	if len(hosted) == 0 {
		h.Health = HealthMissing
		if len(h.Unreachable) > 0 {
			h.Details = []string{fmt.Sprintf("no replica answered; %d servers could not be asked", len(h.Unreachable))}
		} else {
			h.Details = []string{"no server in --servers hosts it"}
		}
		return h
	}

	conf := LeaderConfig(hosted)
	if conf.Known {
		var in []ReplicaStatus
		for _, r := range hosted {
			if conf.Member(replicaName(r)) {
				in = append(in, r)
			} else {
				h.Stale = append(h.Stale, StaleReplica{Peer: replicaName(r), Server: r.Server, Empty: r.HasConfig && len(r.Config) == 0})
			}
		}
		hosted = in
	}
	var leader *ReplicaStatus
	members := map[string]bool{}
	named := map[string]bool{} // leaders the replicas name
	for i, r := range hosted {
		members[replicaName(r)] = true
		if r.Leader != "" {
			named[r.Leader] = true
		}
		if r.State == StateLeader && (leader == nil || r.Term > leader.Term) {
			leader = &hosted[i]
		}
		if i == 0 || r.Applied < h.MinApplied {
			h.MinApplied = r.Applied
		}
		h.Term, h.Committed, h.Epoch = max(h.Term, r.Term), max(h.Committed, r.Committed), max(h.Epoch, r.Epoch)
	}
	var absent []string // named leaders that did not answer
	for l := range named {
		if !members[l] {
			members[l] = true
			absent = append(absent, l)
		}
	}
	slices.Sort(absent)
	for m := range members {
		h.Peers = append(h.Peers, m)
	}
	slices.Sort(h.Peers)
	if conf.Known {
		h.Peers, h.Configured = conf.Peers, true
	}
	if leader != nil {
		h.Leader = replicaName(*leader)
		h.Term, h.Committed, h.Epoch = leader.Term, leader.Committed, leader.Epoch
	}

	problems := map[string][]string{}
	healthy := 0
	for _, r := range hosted {
		if r.State == StateError {
			problems[HealthBroken] = append(problems[HealthBroken], fmt.Sprintf("%s is broken (state %s)", replicaName(r), StateName(r.State)))
		} else {
			healthy++
		}
	}
	if leader == nil {
		msg := "no replica is leader"
		if len(absent) > 0 {
			msg += " (replicas name " + strings.Join(absent, ",") + ", which did not answer)"
		}
		problems[HealthNoLeader] = append(problems[HealthNoLeader], msg)
	}
	if want := max(opt.Replicas, len(h.Peers)); healthy < want {
		msg := fmt.Sprintf("%d of %d replicas healthy and answering", healthy, want)
		// A member whose server answered without a replica holds no data
		// although it counts in every quorum: named apart.
		empty := map[string]bool{}
		for _, r := range rows {
			if id, err := PeerID(r.Server); err == nil && r.Err == nil && !r.Hosted {
				empty[id] = true
			}
		}
		var silent, noReplica []string
		for _, m := range conf.Peers {
			switch {
			case members[m]:
			case empty[m]:
				noReplica = append(noReplica, m)
			default:
				silent = append(silent, m)
			}
		}
		if len(noReplica) > 0 {
			msg += "; members that have no replica (their server answers without one; re-create it with peer add): " + strings.Join(noReplica, ",")
		}
		if len(silent) > 0 {
			msg += "; members not answering: " + strings.Join(silent, ",")
		}
		if len(h.Unreachable) > 0 {
			msg += fmt.Sprintf("; %s could not be asked", strings.Join(h.Unreachable, ","))
		}
		problems[HealthUnderReplicated] = append(problems[HealthUnderReplicated], msg)
	}
	if leader != nil {
		for _, r := range hosted {
			switch behind := leader.Committed - r.Applied; {
			case r.Applied == 0 && leader.Committed > 0:
				problems[HealthLagging] = append(problems[HealthLagging],
					fmt.Sprintf("%s has applied nothing yet (the leader's commit is %d)", replicaName(r), leader.Committed))
			case behind > opt.Lag:
				problems[HealthLagging] = append(problems[HealthLagging],
					fmt.Sprintf("%s applied %d, %d behind the leader's commit %d", replicaName(r), r.Applied, behind, leader.Committed))
			}
		}
	}
	for _, st := range h.Stale {
		msg := fmt.Sprintf("%s on %s is not in the configuration leader %s has (%s): a stale replica; move it to trash with copyset delete-broken --server %s",
			st.Peer, st.Server, conf.Leader, strings.Join(conf.Peers, ","), st.Server)
		if st.Empty {
			msg = fmt.Sprintf("%s on %s is an empty replica not in the configuration leader %s has (%s): add it with peer add, or move it to trash with copyset delete-broken --server %s",
				st.Peer, st.Server, conf.Leader, strings.Join(conf.Peers, ","), st.Server)
		}
		problems[HealthStale] = append(problems[HealthStale], msg)
	}
	h.Health = HealthOK
	for _, level := range []string{HealthBroken, HealthNoLeader, HealthUnderReplicated, HealthLagging, HealthStale} {
		if len(problems[level]) == 0 {
			continue
		}
		if h.Health == HealthOK {
			h.Health = level
		}
		h.Details = append(h.Details, problems[level]...)
	}
	return h
}

// CopysetLeadership is the input of PlanLeaderBalance for one copyset.
type CopysetLeadership struct {
	Copyset CopysetID
	Leader  string   // peer id of the leader; copysets without one are left alone
	Peers   []string // members that may take the leadership, the leader included
}

// LeaderMove is one leadership transfer of a plan.
type LeaderMove struct {
	Copyset CopysetID
	From    string
	To      string
}

// LeaderCounts counts the leaders per server over copysets; every peer of a
// copyset with a leader appears, with 0 when it leads nothing.
func LeaderCounts(copysets []CopysetLeadership) map[string]int {
	n := map[string]int{}
	for _, c := range copysets {
		if c.Leader == "" {
			continue
		}
		n[c.Leader]++
		for _, p := range c.Peers {
			n[p] += 0
		}
	}
	return n
}

// PlanLeaderBalance plans leadership transfers that spread leaders evenly.
// While the most and the least loaded servers differ by two leaders or more,
// it gives the least loaded server that can take one a copyset it is a member
// of, from the most loaded leader among those copysets, only when that
// leader holds at least two more (so every move narrows the spread and the
// plan ends). Among equal choices it takes the copyset with the fewest peers
// (leaving copysets more servers can take for later), then the first.
// Each copyset moves at most once. The plan is deterministic. It returns the
// moves in order and the leader counts after them.
func PlanLeaderBalance(copysets []CopysetLeadership) ([]LeaderMove, map[string]int) {
	counts := LeaderCounts(copysets)
	leader := make([]string, len(copysets))
	for i, c := range copysets {
		leader[i] = c.Leader
	}
	moved := make([]bool, len(copysets))
	var moves []LeaderMove
	for {
		servers := make([]string, 0, len(counts))
		for s := range counts {
			servers = append(servers, s)
		}
		slices.SortFunc(servers, func(a, b string) int {
			if counts[a] != counts[b] {
				return counts[a] - counts[b]
			}
			return strings.Compare(a, b)
		})
		if len(servers) < 2 || counts[servers[len(servers)-1]]-counts[servers[0]] <= 1 {
			break
		}
		best, to := -1, ""
		for _, t := range servers {
			for i, c := range copysets {
				from := leader[i]
				if moved[i] || from == "" || from == t || counts[from] < counts[t]+2 || !slices.Contains(c.Peers, t) {
					continue
				}
				if best < 0 || counts[from] > counts[leader[best]] ||
					(counts[from] == counts[leader[best]] && len(c.Peers) < len(copysets[best].Peers)) {
					best = i
				}
			}
			if best >= 0 {
				to = t
				break
			}
		}
		if best < 0 {
			break
		}
		from := leader[best]
		moves = append(moves, LeaderMove{Copyset: copysets[best].Copyset, From: from, To: to})
		counts[from]--
		counts[to]++
		leader[best] = to
		moved[best] = true
	}
	return moves, counts
}

// FormatIDList renders ids as a sorted range list: "1-3,5,8-10" (the form
// ParseIDList reads); "" for none.
func FormatIDList(ids []uint32) string { return formatRanges(ids) }

func formatRanges[T uint32 | uint64](ids []T) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	s = slices.Compact(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.FormatUint(uint64(s[i]), 10))
		} else {
			parts = append(parts, strconv.FormatUint(uint64(s[i]), 10)+"-"+strconv.FormatUint(uint64(s[j]), 10))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

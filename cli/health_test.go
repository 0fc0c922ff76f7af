package cli

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// replica is a hosted ReplicaStatus row of server s ("a" -> peer "a:0").
func replica(s string, state uint32, term, commit, applied int64, leader string) ReplicaStatus {
	r := ReplicaStatus{Server: s, Hosted: true, Peer: s + ":0", State: state, Term: term, Committed: commit, Applied: applied, Epoch: 2}
	if leader != "" {
		r.Leader = leader + ":0"
	}
	return r
}

func unreachable(s string) ReplicaStatus {
	return ReplicaStatus{Server: s, Err: errors.New("unreachable")}
}

func notHosting(s string) ReplicaStatus { return ReplicaStatus{Server: s} }

func TestClassifyCopyset(t *testing.T) {
	const L, F, E = StateLeader, StateFollower, StateError
	opt := HealthOptions{Replicas: 3, Lag: 100}
	cs := CopysetID{Pool: 1, Copyset: 7}
	for _, tc := range []struct {
		name    string
		rows    []ReplicaStatus
		opt     HealthOptions
		health  string
		leader  string
		peers   int
		detail  string // a substring of the joined details
		minAppl int64
	}{
		{name: "ok",
			rows:   []ReplicaStatus{replica("a", L, 3, 50, 50, "a"), replica("b", F, 3, 50, 49, "a"), replica("c", F, 3, 50, 50, "a")},
			health: HealthOK, leader: "a:0", peers: 3, minAppl: 49},
		{name: "servers without the copyset are ignored",
			rows:   []ReplicaStatus{notHosting("x"), replica("a", L, 3, 50, 50, "a"), replica("b", F, 3, 50, 50, "a"), replica("c", F, 3, 50, 50, "a")},
			health: HealthOK, leader: "a:0", peers: 3, minAppl: 50},
		{name: "four replicas while a peer is added",
			rows:   []ReplicaStatus{replica("a", L, 3, 50, 50, "a"), replica("b", F, 3, 50, 50, "a"), replica("c", F, 3, 50, 50, "a"), replica("d", F, 3, 50, 50, "a")},
			health: HealthOK, leader: "a:0", peers: 4, minAppl: 50},
		{name: "lag at the limit is ok",
			rows:   []ReplicaStatus{replica("a", L, 3, 500, 500, "a"), replica("b", F, 3, 480, 400, "a"), replica("c", F, 3, 500, 500, "a")},
			health: HealthOK, leader: "a:0", peers: 3, minAppl: 400},
		{name: "lagging",
			rows:   []ReplicaStatus{replica("a", L, 3, 500, 500, "a"), replica("b", F, 3, 480, 399, "a"), replica("c", F, 3, 500, 500, "a")},
			health: HealthLagging, leader: "a:0", peers: 3, detail: "b:0 applied 399, 101 behind the leader's commit 500", minAppl: 399},
		{name: "lag option",
			rows:   []ReplicaStatus{replica("a", L, 3, 500, 500, "a"), replica("b", F, 3, 480, 499, "a"), replica("c", F, 3, 500, 500, "a")},
			opt:    HealthOptions{Replicas: 3, Lag: 0},
			health: HealthLagging, leader: "a:0", peers: 3, detail: "b:0 applied 499", minAppl: 499},
		{name: "no leader",
			rows:   []ReplicaStatus{replica("a", F, 4, 50, 50, ""), replica("b", 3, 5, 50, 50, ""), replica("c", F, 4, 50, 50, "")},
			health: HealthNoLeader, peers: 3, detail: "no replica is leader", minAppl: 50},
		{name: "the named leader does not answer",
			rows:   []ReplicaStatus{replica("a", F, 4, 50, 50, "c"), replica("b", F, 4, 50, 50, "c"), unreachable("c")},
			health: HealthNoLeader, peers: 3, detail: "replicas name c:0, which did not answer", minAppl: 50},
		{name: "no leader outranks under-replication",
			rows:   []ReplicaStatus{replica("a", F, 4, 50, 50, "c"), unreachable("c")},
			health: HealthNoLeader, peers: 2, detail: "1 of 3 replicas healthy and answering; c could not be asked", minAppl: 50},
		{name: "under-replicated",
			rows:   []ReplicaStatus{replica("a", L, 3, 50, 50, "a"), replica("b", F, 3, 50, 50, "a"), notHosting("c")},
			health: HealthUnderReplicated, leader: "a:0", peers: 2, detail: "2 of 3 replicas healthy and answering", minAppl: 50},
		{name: "under-replicated: a server could not be asked",
			rows:   []ReplicaStatus{replica("a", L, 3, 50, 50, "a"), replica("b", F, 3, 50, 50, "a"), unreachable("c")},
			health: HealthUnderReplicated, leader: "a:0", peers: 2, detail: "c could not be asked", minAppl: 50},
		{name: "one replica wanted",
			rows:   []ReplicaStatus{replica("a", L, 3, 50, 50, "a")},
			opt:    HealthOptions{Replicas: 1, Lag: 100},
			health: HealthOK, leader: "a:0", peers: 1, minAppl: 50},
		{name: "broken",
			rows:   []ReplicaStatus{replica("a", L, 3, 500, 500, "a"), replica("b", E, 3, 480, 100, "a"), replica("c", F, 3, 500, 500, "a")},
			health: HealthBroken, leader: "a:0", peers: 3, detail: "b:0 is broken (state Error); 2 of 3 replicas healthy and answering; b:0 applied 100", minAppl: 100},
		{name: "the highest term leader wins",
			rows:   []ReplicaStatus{replica("a", L, 3, 40, 40, "a"), replica("b", L, 4, 50, 50, "b"), replica("c", F, 4, 50, 50, "b")},
			health: HealthOK, leader: "b:0", peers: 3, minAppl: 40},
		{name: "missing",
			rows:   []ReplicaStatus{notHosting("a"), notHosting("b")},
			health: HealthMissing, detail: "no server in --servers hosts it"},
		{name: "missing: nobody answered",
			rows:   []ReplicaStatus{unreachable("a"), notHosting("b")},
			health: HealthMissing, detail: "no replica answered; 1 servers could not be asked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opt
			if tc.opt != (HealthOptions{}) {
				o = tc.opt
			}
			h := ClassifyCopyset(cs, tc.rows, o)
			if h.Health != tc.health || h.Leader != tc.leader || len(h.Peers) != tc.peers || h.MinApplied != tc.minAppl {
				t.Errorf("got health %s leader %q peers %v minApplied %d, want %s %q %d peers %d; details %q",
					h.Health, h.Leader, h.Peers, h.MinApplied, tc.health, tc.leader, tc.peers, tc.minAppl, h.Details)
			}
			if joined := strings.Join(h.Details, "; "); !strings.Contains(joined, tc.detail) {
				t.Errorf("details %q, want %q in them", joined, tc.detail)
			}
			if h.OK() != (tc.health == HealthOK) || (h.OK() && len(h.Details) > 0) {
				t.Errorf("OK() = %v with details %q", h.OK(), h.Details)
			}
			if h.Copyset != cs || !slices.IsSorted(h.Peers) {
				t.Errorf("copyset %v peers %v", h.Copyset, h.Peers)
			}
		})
	}
}

func TestClassifyCopysetLeaderFields(t *testing.T) {
	rows := []ReplicaStatus{replica("a", StateFollower, 7, 90, 90, "b"), replica("b", StateLeader, 7, 100, 95, "b")}
	rows[1].Epoch = 9
	h := ClassifyCopyset(CopysetID{1, 1}, rows, HealthOptions{Replicas: 2, Lag: 100})
	if h.Term != 7 || h.Committed != 100 || h.Epoch != 9 || h.MinApplied != 90 || h.Answering != 2 {
		t.Errorf("%+v", h)
	}
}

func cl(cs uint32, leader string, peers ...string) CopysetLeadership {
	return CopysetLeadership{Copyset: CopysetID{Pool: 1, Copyset: cs}, Leader: leader, Peers: peers}
}

func moveText(moves []LeaderMove) string {
	var parts []string
	for _, m := range moves {
		parts = append(parts, fmt.Sprintf("%d:%s>%s", m.Copyset.Copyset, m.From, m.To))
	}
	return strings.Join(parts, " ")
}

func TestPlanLeaderBalance(t *testing.T) {
	abc := []string{"a", "b", "c"}
	all := func(n int, leader string) []CopysetLeadership {
		var out []CopysetLeadership
		for i := 1; i <= n; i++ {
			out = append(out, cl(uint32(i), leader, abc...))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		in    []CopysetLeadership
		moves string
		after map[string]int
	}{
		{name: "empty", in: nil, after: map[string]int{}},
		{name: "balanced", in: []CopysetLeadership{cl(1, "a", abc...), cl(2, "b", abc...), cl(3, "c", abc...), cl(4, "a", abc...)},
			after: map[string]int{"a": 2, "b": 1, "c": 1}},
		{name: "all on one server", in: all(6, "a"),
			moves: "1:a>b 2:a>c 3:a>b 4:a>c", after: map[string]int{"a": 2, "b": 2, "c": 2}},
		{name: "sixteen on one server", in: all(16, "a"),
			moves: "1:a>b 2:a>c 3:a>b 4:a>c 5:a>b 6:a>c 7:a>b 8:a>c 9:a>b 10:a>c",
			after: map[string]int{"a": 6, "b": 5, "c": 5}},
		{name: "only to members", in: []CopysetLeadership{
			cl(1, "a", "a", "b"), cl(2, "a", "a", "b"), cl(3, "a", "a", "b"), cl(4, "a", "a", "b"), cl(5, "b", "b", "c")},
			moves: "1:a>b 5:b>c 2:a>b", after: map[string]int{"a": 2, "b": 2, "c": 1}},
		{name: "no member can take one", in: []CopysetLeadership{cl(1, "a", "a"), cl(2, "a", "a"), cl(3, "b", "b", "c")},
			after: map[string]int{"a": 2, "b": 1, "c": 0}},
		{name: "copysets without a leader are left alone", in: []CopysetLeadership{cl(1, "", abc...), cl(2, "", abc...), cl(3, "a", abc...)},
			after: map[string]int{"a": 1, "b": 0, "c": 0}},
		{name: "each copyset moves once", in: []CopysetLeadership{cl(1, "a", "a", "b", "c"), cl(2, "a", "a", "b"), cl(3, "a", "a", "b")},
			moves: "2:a>b 1:a>c", after: map[string]int{"a": 1, "b": 1, "c": 1}},
		{name: "a fourth server joins", in: append(all(3, "a"), cl(4, "b", "b", "c", "d"), cl(5, "c", "b", "c", "d")),
			moves: "1:a>b 4:b>d", after: map[string]int{"a": 2, "b": 1, "c": 1, "d": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			moves, after := PlanLeaderBalance(tc.in)
			if got := moveText(moves); got != tc.moves {
				t.Errorf("moves %q, want %q", got, tc.moves)
			}
			if fmt.Sprint(after) != fmt.Sprint(tc.after) {
				t.Errorf("after %v, want %v", after, tc.after)
			}
		})
	}
}

// TestPlanLeaderBalanceRandom checks the plan's invariants on random
// layouts: moves go to members, no copyset moves twice, counts add up, and in
// the end no further move could narrow the spread.
func TestPlanLeaderBalanceRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	servers := []string{"a", "b", "c", "d", "e"}
	for round := range 300 {
		var in []CopysetLeadership
		for i := range 1 + rng.IntN(40) {
			perm := rng.Perm(len(servers))[:1+rng.IntN(4)]
			var peers []string
			for _, k := range perm {
				peers = append(peers, servers[k])
			}
			leader := peers[rng.IntN(len(peers))]
			if rng.IntN(10) == 0 {
				leader = ""
			}
			in = append(in, cl(uint32(i+1), leader, peers...))
		}
		moves, after := PlanLeaderBalance(in)
		leader := map[uint32]string{}
		for _, c := range in {
			leader[c.Copyset.Copyset] = c.Leader
		}
		seen := map[uint32]bool{}
		for _, m := range moves {
			c := in[m.Copyset.Copyset-1]
			if seen[m.Copyset.Copyset] || leader[m.Copyset.Copyset] != m.From || !slices.Contains(c.Peers, m.To) || m.From == m.To {
				t.Fatalf("round %d: bad move %+v of %+v", round, m, c)
			}
			seen[m.Copyset.Copyset] = true
			leader[m.Copyset.Copyset] = m.To
		}
		want := map[string]int{}
		for _, c := range in {
			if c.Leader != "" {
				for _, p := range c.Peers {
					want[p] += 0
				}
				want[leader[c.Copyset.Copyset]]++
			}
		}
		if fmt.Sprint(want) != fmt.Sprint(after) {
			t.Fatalf("round %d: counts %v, recomputed %v", round, after, want)
		}
		for _, c := range in {
			if c.Leader == "" || seen[c.Copyset.Copyset] {
				continue
			}
			for _, p := range c.Peers {
				if after[p] <= after[c.Leader]-2 {
					lo, hi := 1<<30, 0
					for _, n := range after {
						lo, hi = min(lo, n), max(hi, n)
					}
					if hi-lo > 1 {
						t.Fatalf("round %d: copyset %d could still move %s>%s (%v)", round, c.Copyset.Copyset, c.Leader, p, after)
					}
				}
			}
		}
	}
}

func TestFormatIDList(t *testing.T) {
	for _, tc := range []struct {
		in   []uint32
		want string
	}{
		{nil, ""},
		{[]uint32{7}, "7"},
		{[]uint32{3, 1, 2}, "1-3"},
		{[]uint32{1, 2, 3, 5, 8, 9, 10, 10}, "1-3,5,8-10"},
		{[]uint32{4294967295, 4294967294}, "4294967294-4294967295"},
	} {
		if got := FormatIDList(tc.in); got != tc.want {
			t.Errorf("FormatIDList(%v) = %q, want %q", tc.in, got, tc.want)
		}
		if tc.want != "" {
			back, err := ParseIDList(tc.want)
			if err != nil || FormatIDList(back) != tc.want {
				t.Errorf("round trip of %q: %v %v", tc.want, back, err)
			}
		}
	}
	if got := formatChunkList([]uint64{1, 2, 64}); got != "1-2,64" {
		t.Errorf("formatChunkList: %q", got)
	}
}

func TestParseAt(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
		err  string
	}{
		{in: "", want: time.Time{}},
		{in: "10m", want: now.Add(10 * time.Minute)},
		{in: "2025-02-03T04:05:06Z", want: time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC)},
		{in: "-5m", err: "in the past"},
		{in: "tomorrow", err: "neither a duration"},
	} {
		got, err := parseAt(tc.in, now)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseAt(%q): %v, want error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseAt(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

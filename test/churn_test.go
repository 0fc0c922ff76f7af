package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/cli"
	"github.com/chunkraft/chunkraft/internal/testwait"
)

// Membership churn. Environment:
//
//	CHUNKRAFT_CHURN_SEED      the seed (default: the clock; always printed)
//	CHUNKRAFT_CHURN_DURATION  how long faults run, e.g. 10m (default 15s, the
//	                          short version make test runs; the run also
//	                          completes one action of every kind first)
//	CHUNKRAFT_CHURN_LOGS      a directory the servers' logs are copied to
//	                          when the test fails (cs<i>.log)
const (
	churnServers  = 5
	churnCopysets = 3
	churnWriters  = 3
	churnBlocks   = 16 // 4 KiB blocks per writer
	// churnConfig makes every add of an empty replica install a snapshot:
	// the test snapshots a copyset before such adds and the log keeps only
	// 16 entries behind it.
	churnConfig = "raft:\n  trailing_logs: 16\n  snapshot_threshold: 512\n  snapshot_interval: 2s\n"
	// churnBulk: MiB written to each copyset before the churn (chunks 20..),
	// so that a snapshot install takes a while.
	churnBulk = 4
)

// churnEnv reads the seed and duration from the environment.
func churnEnv(t *testing.T) (int64, time.Duration) {
	seed := time.Now().UnixNano()
	if v := os.Getenv("CHUNKRAFT_CHURN_SEED"); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("CHUNKRAFT_CHURN_SEED=%q: not an integer", v)
		}
		seed = s
	}
	d := 15 * time.Second
	if v := os.Getenv("CHUNKRAFT_CHURN_DURATION"); v != "" {
		p, err := time.ParseDuration(v)
		if err != nil || p <= 0 {
			t.Fatalf("CHUNKRAFT_CHURN_DURATION=%q: not a positive duration", v)
		}
		d = p
	}
	return seed, d
}

// churnCounts are what the run did; the summary line prints them.
type churnCounts struct {
	moves, readds, transfers, transferFailures, killLeaderAdds, killInstalls, pauseKills int
	kills, installs, swept, addFailures, noReplicaAfterAdd                               int
}

// churn is the state of one TestMembershipChurn run.
type churn struct {
	t        *testing.T
	c        *cluster
	rng      *rand.Rand
	copysets []cli.CopysetID
	start    time.Time
	former   map[cli.CopysetID]map[string]bool // peer ids once removed
	n        churnCounts
}

func (ch *churn) logf(format string, args ...any) {
	ch.t.Helper()
	ch.t.Logf("[%6.2fs] %s", time.Since(ch.start).Seconds(), fmt.Sprintf(format, args...))
}

func (ch *churn) opCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func peerOf(p *Proc) string { return p.Addr + ":0" }

// membership returns the configuration of cs as its leader reports it and
// the peers of the servers hosting a replica, asking again for up to wait
// until a leader answers.
func (ch *churn) membership(cs cli.CopysetID, wait time.Duration) (cli.Membership, []string) {
	var m cli.Membership
	var hosting []string
	// At the timeout the caller judges what it got.
	_ = testwait.For(wait, func() error {
		ctx, cancel := ch.opCtx(5 * time.Second)
		rows, _ := ch.c.client.CopysetStatus(ctx, cs)
		cancel()
		hosting = nil
		for _, r := range rows {
			if r.Err == nil && r.Hosted {
				hosting = append(hosting, r.Server+":0")
			}
		}
		slices.Sort(hosting)
		if m = cli.LeaderConfig(rows); !m.Known || !m.Committed {
			return errors.New("no leader reports a committed configuration")
		}
		return nil
	})
	return m, hosting
}

// pick returns a random element.
func pick[T any](rng *rand.Rand, list []T) T { return list[rng.IntN(len(list))] }

// newcomer picks a server that is not a member of cs: a former member when
// readd and one exists.
func (ch *churn) newcomer(cs cli.CopysetID, members []string, readd bool) (*Proc, bool) {
	var fresh, former []*Proc
	for _, p := range ch.c.procs {
		if slices.Contains(members, peerOf(p)) {
			continue
		}
		if ch.former[cs][peerOf(p)] {
			former = append(former, p)
		} else {
			fresh = append(fresh, p)
		}
	}
	if readd && len(former) > 0 || len(fresh) == 0 {
		return pick(ch.rng, former), true
	}
	return pick(ch.rng, fresh), false
}

// add makes p a member of cs: an empty replica on p, then AddPeer, retried
// after failures (an add whose outcome is unknown is completed), then a
// wait until p's replica has caught up. A p the leader already lists is not
// given a replica again (that would repair a member that lost its replica,
// the defect the test looks for): it only waits. It reports whether p ended
// up a member that caught up.
func (ch *churn) add(cs cli.CopysetID, p *Proc, why string) bool {
	for attempt := 1; attempt <= 3; attempt++ {
		if m, hosting := ch.membership(cs, 20*time.Second); m.Known && slices.Contains(m.Peers, peerOf(p)) {
			ch.logf("%v: %s: %s already a member (configuration %v, replicas on %v)", cs, why, p.Addr, m.Peers, hosting)
		} else {
			ctx, cancel := ch.opCtx(20 * time.Second)
			nr, err := ch.c.client.CreateEmptyReplica(ctx, cs, p.Addr)
			if err != nil {
				cancel()
				ch.logf("%v: %s: create empty replica on %s (attempt %d): %v", cs, why, p.Addr, attempt, err)
				continue
			}
			mc, err := ch.c.client.AddPeer(ctx, cs, p.Addr)
			cancel()
			if err != nil {
				ch.logf("%v: %s: add peer %s (replica existed %v, attempt %d): %v", cs, why, p.Addr, nr.Existed, attempt, err)
				continue
			}
			ch.logf("%v: %s: add peer %s (replica existed %v): leader %s, %v -> %v", cs, why, p.Addr, nr.Existed, mc.Leader, mc.OldPeers, mc.NewPeers)
		}
		ctx, cancel := ch.opCtx(25 * time.Second)
		err := ch.c.client.WaitCaughtUp(ctx, cs, p.Addr, 20*time.Second, io.Discard)
		cancel()
		if err != nil {
			ch.n.noReplicaAfterAdd++
			_, hosting := ch.membership(cs, 5*time.Second)
			ch.logf("%v: %s: new member %s did not catch up (replicas on %v): %v", cs, why, p.Addr, hosting, err)
			return false
		}
		ch.logf("%v: %s: new member %s caught up", cs, why, p.Addr)
		return true
	}
	ch.n.addFailures++
	return false
}

// remove takes one member other than keep out of cs (only while cs has more
// than 3 members), preferring victim when it is a member.
func (ch *churn) trim(cs cli.CopysetID, keep, victim string, why string) {
	m, _ := ch.membership(cs, 20*time.Second)
	if !m.Known {
		ch.logf("%v: %s: no leader to trim the configuration", cs, why)
		return
	}
	for len(m.Peers) > 3 {
		var cands []string
		for _, p := range m.Peers {
			if p != keep {
				cands = append(cands, p)
			}
		}
		out := pick(ch.rng, cands)
		if slices.Contains(cands, victim) {
			out = victim
		}
		ctx, cancel := ch.opCtx(20 * time.Second)
		mc, err := ch.c.client.RemovePeer(ctx, cs, out)
		cancel()
		if err != nil {
			ch.logf("%v: %s: remove peer %s: %v", cs, why, out, err)
			return
		}
		ch.former[cs][out] = true
		ch.logf("%v: %s: remove peer %s: leader %s, %v -> %v", cs, why, out, mc.Leader, mc.OldPeers, mc.NewPeers)
		m, _ = ch.membership(cs, 20*time.Second)
		if !m.Known {
			return
		}
	}
}

// move: a peer add (a re-add of a former member when readd and there is
// one) then a peer remove.
func (ch *churn) move(readd bool) {
	cs := pick(ch.rng, ch.copysets)
	if readd {
		// A copyset with a former member to bring back, if there is one.
		var with []cli.CopysetID
		for _, id := range ch.copysets {
			if len(ch.former[id]) > 0 {
				with = append(with, id)
			}
		}
		if len(with) > 0 {
			cs = pick(ch.rng, with)
		}
	}
	m, _ := ch.membership(cs, 20*time.Second)
	if !m.Known {
		ch.logf("%v: move: no leader, skipped", cs)
		return
	}
	p, former := ch.newcomer(cs, m.Peers, readd)
	why := "move"
	if former {
		why = "move (re-add of a former member)"
		ch.n.readds++
		ch.waitDropped(cs, p, why)
	}
	ch.n.moves++
	if ch.add(cs, p, why) {
		ch.trim(cs, peerOf(p), "", why)
	}
}

// waitDropped waits (up to 10 s) until the former member p no longer hosts
// its old replica of cs, so that its re-add starts from an empty replica
// that must catch up past its own removal.
func (ch *churn) waitDropped(cs cli.CopysetID, p *Proc, why string) {
	err := testwait.For(10*time.Second, func() error {
		if _, hosting := ch.membership(cs, 5*time.Second); slices.Contains(hosting, peerOf(p)) {
			return errors.New("still hosting")
		}
		return nil
	})
	if err != nil {
		ch.logf("%v: %s: %s still holds its old replica after 10s; re-adding it as it is", cs, why, p.Addr)
		return
	}
	ch.logf("%v: %s: %s holds no replica any more", cs, why, p.Addr)
}

// transfer moves the leadership of a random copyset to another member.
func (ch *churn) transfer() {
	cs := pick(ch.rng, ch.copysets)
	m, _ := ch.membership(cs, 20*time.Second)
	if !m.Known {
		ch.logf("%v: transfer: no leader, skipped", cs)
		return
	}
	var others []string
	for _, p := range m.Peers {
		if p != m.Leader {
			others = append(others, p)
		}
	}
	to := pick(ch.rng, others)
	ch.n.transfers++
	ctx, cancel := ch.opCtx(20 * time.Second)
	_, err := ch.c.client.TransferLeader(ctx, cs, to)
	cancel()
	if err != nil {
		ch.n.transferFailures++
		ch.logf("%v: transfer leader %s -> %s: %v", cs, m.Leader, to, err)
		return
	}
	ch.logf("%v: transfer leader %s -> %s: done", cs, m.Leader, to)
}

// restart starts p again after a kill, logging the outcome.
func (ch *churn) restart(p *Proc) {
	ctx, cancel := ch.opCtx(60 * time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		ch.t.Fatalf("restart %s: %v", p.Addr, err)
	}
	ch.logf("restarted %s", p.Addr)
}

func (ch *churn) kill(p *Proc, why string) {
	if err := p.Kill(syscall.SIGKILL); err != nil {
		ch.t.Fatalf("kill -9 %s: %v", p.Addr, err)
	}
	ch.n.kills++
	ch.logf("kill -9 %s (%s)", p.Addr, why)
}

// killDuringAdd: an empty replica on a newcomer, AddPeer, and kill -9 of
// the leader (leader) or of the newcomer (installing: after a snapshot, so
// that the newcomer must install one) a moment later; then a restart and the
// add completed and the copyset trimmed back to three members.
func (ch *churn) killDuringAdd(installing bool) {
	cs := pick(ch.rng, ch.copysets)
	m, _ := ch.membership(cs, 20*time.Second)
	if !m.Known {
		ch.logf("%v: kill during add: no leader, skipped", cs)
		return
	}
	p, former := ch.newcomer(cs, m.Peers, ch.rng.IntN(2) == 0)
	leader := ch.c.proc(m.Leader)
	what := "kill -9 of the leader during an add"
	if installing {
		what = "kill -9 of a new replica during its snapshot install"
		ch.n.killInstalls++
		ctx, cancel := ch.opCtx(20 * time.Second)
		_, err := ch.c.client.SnapshotCopyset(ctx, cs)
		cancel()
		ch.logf("%v: snapshot before the add: err %v", cs, err)
	} else {
		ch.n.killLeaderAdds++
	}
	if former {
		ch.n.readds++
	}
	ch.n.moves++
	ctx, cancel := ch.opCtx(20 * time.Second)
	nr, err := ch.c.client.CreateEmptyReplica(ctx, cs, p.Addr)
	cancel()
	if err != nil {
		ch.logf("%v: %s: create empty replica on %s: %v", cs, what, p.Addr, err)
		return
	}
	ch.logf("%v: %s: empty replica on %s (former member %v, existed %v), adding it; leader %s", cs, what, p.Addr, former, nr.Existed, m.Leader)
	installsBefore := strings.Count(readLog(p), "snapshot installed")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := ch.opCtx(30 * time.Second)
		defer cancel()
		_, err := ch.c.client.AddPeer(ctx, cs, p.Addr)
		done <- err
	}()
	victim := leader
	if installing {
		victim = p
		time.Sleep(time.Duration(20+ch.rng.IntN(300)) * time.Millisecond)
	} else {
		time.Sleep(time.Duration(ch.rng.IntN(60)) * time.Millisecond)
	}
	ch.kill(victim, what)
	if installing {
		installed := strings.Count(readLog(p), "snapshot installed") > installsBefore
		ch.logf("%v: %s had installed the snapshot before the kill: %v", cs, p.Addr, installed)
	}
	err = <-done
	ch.logf("%v: %s: add peer %s returned: %v", cs, what, p.Addr, err)
	ch.restart(victim)
	if ch.add(cs, p, what+" (completing the add)") {
		ch.trim(cs, peerOf(p), "", what)
	}
}

// pauseKill: SIGSTOP of one server while another is killed, then SIGCONT
// and a restart.
func (ch *churn) pauseKill() {
	i := ch.rng.IntN(len(ch.c.procs))
	j := (i + 1 + ch.rng.IntN(len(ch.c.procs)-1)) % len(ch.c.procs)
	a, b := ch.c.procs[i], ch.c.procs[j]
	ch.n.pauseKills++
	if err := a.Pause(); err != nil {
		ch.t.Fatal(err)
	}
	ch.logf("SIGSTOP %s", a.Addr)
	ch.kill(b, "while "+a.Addr+" is stopped")
	time.Sleep(time.Duration(500+ch.rng.IntN(1500)) * time.Millisecond)
	if err := a.Resume(); err != nil {
		ch.t.Fatal(err)
	}
	ch.logf("SIGCONT %s", a.Addr)
	ch.restart(b)
}

func readLog(p *Proc) string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// TestMembershipChurn: five servers, three copysets, verified
// load, and random membership churn: moves of replicas (peer add, then
// peer remove; re-adds of former members among them), leader transfers,
// kill -9 of a leader during an add, kill -9 of a new replica during its
// snapshot install, SIGSTOP of one server while another is killed. At the
// end every copyset has a leader whose configuration is exactly the set of
// servers hosting a replica, every acknowledged write reads back, and
// check-consistency passes.
func TestMembershipChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	seed, duration := churnEnv(t)
	t.Logf("seed %d (CHUNKRAFT_CHURN_SEED), duration %s (CHUNKRAFT_CHURN_DURATION)", seed, duration)
	rng := rand.New(rand.NewPCG(uint64(seed), 17))
	c := startClusterWithConfig(t, churnServers, churnConfig)
	ch := &churn{t: t, c: c, rng: rng, start: time.Now(), former: map[cli.CopysetID]map[string]bool{}}
	if dir := os.Getenv("CHUNKRAFT_CHURN_LOGS"); dir != "" {
		t.Cleanup(func() {
			if !t.Failed() {
				return
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Logf("keep server logs: %v", err)
				return
			}
			for i, p := range c.procs {
				dst := filepath.Join(dir, fmt.Sprintf("cs%d.log", i))
				if err := os.WriteFile(dst, []byte(readLog(p)), 0o644); err != nil {
					t.Logf("keep server logs: %v", err)
				}
			}
			t.Logf("server logs copied to %s (cs<i>.log: %v in that order)", dir, c.addrs())
		})
	}

	// Copysets on three random servers each.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 1; i <= churnCopysets; i++ {
		cs := cli.CopysetID{Pool: pool, Copyset: uint32(i)}
		perm := rng.Perm(churnServers)[:3]
		var peers []string
		for _, k := range perm {
			peers = append(peers, c.procs[k].Addr)
		}
		r, err := c.client.CreateCopyset(ctx, cs, peers)
		if err != nil {
			t.Fatalf("create %v on %v: %v", cs, peers, err)
		}
		if _, _, failed := r.Counts(); failed > 0 {
			t.Fatalf("create %v on %v: %+v", cs, peers, r)
		}
		if _, err := c.client.GetLeader(ctx, cs); err != nil {
			t.Fatalf("no leader for %v: %v", cs, err)
		}
		ch.copysets = append(ch.copysets, cs)
		ch.former[cs] = map[string]bool{}
		ch.logf("%v on %v", cs, peers)
	}
	// Bulk data, so that snapshot installs take a while.
	bulk := make([]byte, 1<<20)
	for i := range bulk {
		bulk[i] = byte(rng.Uint32())
	}
	for _, cs := range ch.copysets {
		for k := range churnBulk {
			if err := c.client.WriteChunk(ctx, cli.ChunkID{CopysetID: cs, Chunk: uint64(20 + k)}, 0, bulk, 1); err != nil {
				t.Fatalf("bulk write %v: %v", cs, err)
			}
		}
	}

	// Verified load: each writer overwrites its own blocks and reads one
	// back now and then; a read must return the last acknowledged write or
	// a failed one (indeterminate).
	var (
		stop                 atomic.Bool
		acked, failed, reads atomic.Int64
		mismatches           atomic.Int64
		wg                   sync.WaitGroup
	)
	owned := make([][]*crashBlock, churnWriters)
	seen := map[string]bool{}
	for w := range owned {
		for len(owned[w]) < churnBlocks {
			b := &crashBlock{
				id:  cli.ChunkID{CopysetID: pick(rng, ch.copysets), Chunk: uint64(1 + rng.IntN(2))},
				off: uint32(rng.IntN(256)) * 4096,
			}
			if key := fmt.Sprint(b.id, b.off); !seen[key] {
				seen[key] = true
				owned[w] = append(owned[w], b)
			}
		}
	}
	writerSeeds := make([]uint64, churnWriters)
	for w := range writerSeeds {
		writerSeeds[w] = rng.Uint64()
	}
	check := func(b *crashBlock, got []byte, when string) {
		if !b.accepts(got) {
			mismatches.Add(1)
			t.Errorf("MISMATCH %s: %v offset %d holds neither the last acknowledged write nor a failed one", when, b.id, b.off)
		}
	}
	for w := range churnWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(writerSeeds[w], uint64(w)))
			for n := 0; !stop.Load(); n++ {
				b := pick(r, owned[w])
				if b.acked != nil && n%3 == 0 {
					rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
					got, err := c.client.ReadChunk(rctx, b.id, b.off, 4096)
					rcancel()
					if err == nil {
						reads.Add(1)
						check(b, got, "during the churn")
					}
					continue
				}
				d := make([]byte, 4096)
				for i := range d {
					d[i] = byte(r.Uint32())
				}
				wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := c.client.WriteChunk(wctx, b.id, b.off, d, 1)
				wcancel()
				if err != nil {
					b.failed = append(b.failed, d)
					failed.Add(1)
					continue
				}
				b.acked = d
				acked.Add(1)
			}
		}()
	}
	stopLoad := func() {
		if !stop.Swap(true) {
			wg.Wait()
		}
	}
	defer stopLoad()
	// The summary, also when the test stops early.
	var noReplica, outside, leaderless int
	consistency := "not run"
	defer func() {
		for _, p := range c.procs {
			ch.n.installs += strings.Count(readLog(p), "snapshot installed")
			ch.n.swept += strings.Count(readLog(p), "stale replica moved to trash")
		}
		n := ch.n
		t.Logf("churn summary: seed %d, %s, actions: moves %d (re-adds %d), transfers %d (failed %d), kills %d "+
			"(leader during add %d, new replica during install %d, during a SIGSTOP %d), snapshot installs %d, stale replicas swept %d, "+
			"adds never completed %d, new members not caught up %d; writes acknowledged %d, failed %d, reads checked %d, "+
			"mismatches %d; members without replica %d, replicas outside the configuration %d, copysets without leader %d, check-consistency %s",
			seed, time.Since(ch.start).Round(time.Second), n.moves, n.readds, n.transfers, n.transferFailures, n.kills,
			n.killLeaderAdds, n.killInstalls, n.pauseKills, n.installs, n.swept, n.addFailures, n.noReplicaAfterAdd,
			acked.Load(), failed.Load(), reads.Load(), mismatches.Load(), noReplica, outside, leaderless, consistency)
	}()

	// The churn: first one action of every kind (a move first, so that
	// there is a former member to re-add), in random order, then random
	// actions until the duration is over.
	actions := []func(){
		func() { ch.move(false) },
		func() { ch.move(true) },
		ch.transfer,
		func() { ch.killDuringAdd(false) },
		func() { ch.killDuringAdd(true) },
		ch.pauseKill,
	}
	order := []int{0}
	for _, k := range rng.Perm(len(actions) - 1) {
		order = append(order, k+1)
	}
	for step := 0; step < len(order) || time.Since(ch.start) < duration; step++ {
		k := rng.IntN(len(actions))
		if step < len(order) {
			k = order[step]
		}
		actions[k]()
	}
	ch.logf("churn over; %d writes acknowledged so far", acked.Load())
	time.Sleep(time.Second) // writes on the final configuration
	stopLoad()

	// Every block reads back as its last acknowledged write.
	for _, blocks := range owned {
		for _, b := range blocks {
			rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
			got, err := c.client.ReadChunk(rctx, b.id, b.off, 4096)
			rcancel()
			if err != nil {
				if b.acked != nil {
					t.Errorf("read back %v offset %d: %v", b.id, b.off, err)
				}
				continue
			}
			reads.Add(1)
			check(b, got, "at the end")
		}
	}

	// Every copyset led, its configuration exactly the servers hosting a
	// replica (a removed replica may take a moment to go: one never told of
	// its removal goes once its server's stale sweep, every 10 s, finds it
	// unled for 10 s and asks the leader).
	for _, cs := range ch.copysets {
		var m cli.Membership
		var hosting []string
		// At the timeout the checks below report what is still wrong.
		_ = testwait.For(45*time.Second, func() error {
			if m, hosting = ch.membership(cs, 20*time.Second); !m.Known || !slices.Equal(m.Peers, hosting) {
				return errors.New("the configuration is not the servers hosting a replica")
			}
			return nil
		})
		if !m.Known {
			leaderless++
			t.Errorf("%v: no leader reports a committed configuration; replicas on %v", cs, hosting)
			continue
		}
		for _, p := range m.Peers {
			if !slices.Contains(hosting, p) {
				noReplica++
				t.Errorf("%v: member %s holds no replica (configuration %v, leader %s)", cs, p, m.Peers, m.Leader)
			}
		}
		for _, p := range hosting {
			if !slices.Contains(m.Peers, p) {
				outside++
				t.Errorf("%v: %s hosts a replica but is not a member (configuration %v)", cs, p, m.Peers)
			}
		}
		ch.logf("%v: final configuration %v, leader %s, replicas on %v", cs, m.Peers, m.Leader, hosting)
	}

	var list []string
	for _, cs := range ch.copysets {
		list = append(list, fmt.Sprint(cs.Copyset))
	}
	out, code := ctl(t, c.addrs(), "cluster", "check-consistency", "--pool", "1", "--copyset", strings.Join(list, ","),
		"--chunks", fmt.Sprintf("1-%d", 20+churnBulk), "--wait", "20s")
	consistency = "ok"
	if code != 0 {
		consistency = fmt.Sprintf("FAILED (exit %d)", code)
		t.Errorf("check-consistency: exit %d:\n%s", code, out)
	}
	if acked.Load() == 0 {
		t.Error("no write was acknowledged during the churn")
	}
}

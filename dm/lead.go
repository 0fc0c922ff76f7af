package dm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/slack"
	pb "github.com/chunkraft/chunkraft/proto/chunkraft/dmpb"
	dmpb "github.com/chunkraft/chunkraft/proto/dm/pb"
)

// shareRun is the applier of one share on a copyset this server leads.
type shareRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why it ended; read after done
	// operators is the share's operators when the run began
	// (operatorsKey): a run goes by those it started with.
	operators string
}

// operatorsKey identifies share sh's operators (HandleError): the run of a
// share whose operators changed starts again, after a barrier, so that no
// op an operator now covers is proposed by a run that does not know it.
func operatorsKey(sh *pb.SubTask) string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.SubTask{Operators: sh.GetOperators()})
	return string(b)
}

// resumeState is the auto-resume backoff of a share paused by a
// resumable error, on this leader: it keeps doubling while the share
// fails again, for as long as this server leads the copyset.
type resumeState struct {
	at      time.Time // when to resume next
	backoff time.Duration
}

// lead is the leader work of target copyset n: after a barrier, an
// applier per Running share, reconciled when the machine's shares change
// and every check interval; shares paused by a resumable error (not by a
// user) are resumed after a backoff doubling from resume_backoff_min to
// resume_backoff_max.
func (s *Service) lead(ctx context.Context, n *copyset.Node) error {
	m, ok := MachineOf(n)
	if !ok {
		<-ctx.Done()
		return nil
	}
	if err := n.Barrier(ctx); err != nil {
		return err
	}
	runs := map[string]*shareRun{}
	resume := map[string]*resumeState{}
	stop := func(name string) {
		if r := runs[name]; r != nil {
			r.cancel()
			<-r.done
			delete(runs, name)
		}
	}
	defer func() {
		for name := range runs {
			stop(name)
		}
	}()
	every := min(time.Second, s.deps.Config.CheckInterval)
	for {
		changed := m.Changed()
		s.liftOrphanFence(ctx, n, m)
		live := map[string]bool{}
		restart := false
		for _, sh := range m.List() {
			name := sh.GetConfig().GetName()
			if r := runs[name]; r != nil {
				select {
				case <-r.done:
					if errors.Is(r.err, errRestart) {
						restart = true
					}
					delete(runs, name)
				default:
				}
			}
			switch {
			case sh.GetStage() == dmpb.Stage_Running:
				live[name] = true
				if r := runs[name]; r != nil && r.operators != operatorsKey(sh) {
					restart = true
				}
				if runs[name] == nil && !restart {
					runs[name] = s.startShare(ctx, n, m, sh)
				}
			case sh.GetStage() == dmpb.Stage_Paused && sh.GetResumable() && !sh.GetResult().GetIsCanceled():
				s.autoResume(ctx, n, name, resume)
			}
		}
		for name := range runs {
			if !live[name] {
				stop(name)
			}
		}
		if restart {
			// A run lost track of a group, or a share's operators changed
			// under its run: nothing starts again before every entry
			// appended so far has applied.
			for name := range runs {
				stop(name)
			}
			if err := n.Barrier(ctx); err != nil {
				return err
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-slack.After(every):
		case <-changed:
		}
	}
}

// startShare starts the applier of share sh.
func (s *Service) startShare(ctx context.Context, n *copyset.Node, m *Machine, sh *pb.SubTask) *shareRun {
	rctx, cancel := context.WithCancel(ctx)
	r := &shareRun{cancel: cancel, done: make(chan struct{}), operators: operatorsKey(sh)}
	s.applying.Add(1)
	go func() {
		defer close(r.done)
		defer s.applying.Add(-1)
		r.err = s.applyShare(rctx, n, m, proto.CloneOf(sh))
	}()
	return r
}

// applyShare runs share sh's applier until ctx ends or an error stops it;
// an error that stops the share pauses it (Fail).
func (s *Service) applyShare(ctx context.Context, n *copyset.Node, m *Machine, sh *pb.SubTask) error {
	a, err := s.newApplier(ctx, n, m, sh)
	if err == nil {
		defer a.close()
		if validating(sh.GetConfig()) {
			vctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.validate(vctx, n, sh, a.prog)
			}()
			defer func() {
				stop()
				<-done
			}()
		}
		err = a.run(ctx)
	}
	var ae *applyError
	switch {
	case err == nil || ctx.Err() != nil:
		return nil
	case errors.As(err, &ae):
		name := sh.GetConfig().GetName()
		s.log.Warn("dm sub task stopped", "task", name, "pool", n.Group().Pool(), "copyset", n.Group().Copyset(),
			"resumable", ae.resumable, "error", ae.pe.GetMessage())
		op := &pb.Op{Op: &pb.Op_Fail{Fail: &pb.Fail{Name: name, Error: ae.pe, Resumable: ae.resumable, NowMs: time.Now().UnixMilli(), At: ae.at}}}
		if r := s.proposeLocal(ctx, n.Group(), op); r.GetCode() != 0 {
			return fmt.Errorf("%w: pausing %s: %s", errRestart, name, r.GetMsg())
		}
		return nil
	}
	s.log.Warn("dm applier ended", "task", sh.GetConfig().GetName(), "pool", n.Group().Pool(), "copyset", n.Group().Copyset(), "error", err)
	return err
}

// autoResume resumes share name once its backoff has passed.
func (s *Service) autoResume(ctx context.Context, n *copyset.Node, name string, resume map[string]*resumeState) {
	cfg := s.deps.Config
	st := resume[name]
	if st == nil {
		st = &resumeState{backoff: cfg.ResumeBackoffMin}
		st.at = time.Now().Add(st.backoff)
		resume[name] = st
	}
	if time.Now().Before(st.at) {
		return
	}
	op := &pb.Op{Op: &pb.Op_SetStage{SetStage: &pb.SetStage{Name: name, Stage: dmpb.Stage_Running, NowMs: time.Now().UnixMilli()}}}
	if r := s.proposeLocal(ctx, n.Group(), op); r.GetCode() != 0 {
		s.log.Warn("dm auto-resume failed", "task", name, "error", r.GetMsg())
	} else {
		s.log.Info("dm sub task resumed automatically", "task", name, "pool", n.Group().Pool(), "copyset", n.Group().Copyset())
	}
	st.backoff = min(2*st.backoff, cfg.ResumeBackoffMax)
	st.at = time.Now().Add(st.backoff)
}

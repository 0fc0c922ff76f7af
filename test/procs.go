package test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// RepoRoot returns the directory of the chunkraft checkout these tests are in.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// BuildBinaries builds the chunkraft commands into dir and returns dir.
func BuildBinaries(ctx context.Context, dir string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+string(os.PathSeparator), "./cmd/...")
	cmd.Dir = RepoRoot()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("build binaries: %w\n%s", err, out)
	}
	return nil
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Proc is one chunkserver process with fixed flags, restartable on the
// same data dir.
type Proc struct {
	Bin         string
	Addr        string // gRPC host:port
	MetricsAddr string
	DataDir     string
	LogPath     string

	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
}

// NewProc picks free ports for a server with its data under dir.
func NewProc(bin, dir string) (*Proc, error) {
	p1, err := FreePort()
	if err != nil {
		return nil, err
	}
	p2, err := FreePort()
	if err != nil {
		return nil, err
	}
	return &Proc{
		Bin:         bin,
		Addr:        fmt.Sprintf("127.0.0.1:%d", p1),
		MetricsAddr: fmt.Sprintf("127.0.0.1:%d", p2),
		DataDir:     filepath.Join(dir, "data"),
		LogPath:     filepath.Join(dir, "server.log"),
	}, nil
}

// StartFirst is Start for a server's first launch: its ports were free
// when NewProc picked them, but another process (an outgoing connection's
// ephemeral port, say) may have taken one since. If the server exits
// because a port is in use, StartFirst picks new ports and tries again, up
// to 5 times. A restart must keep its address (peers know it): use Start.
func (p *Proc) StartFirst(ctx context.Context) error {
	var err error
	for range 5 {
		if err = p.Start(ctx); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
		fresh, perr := NewProc(p.Bin, filepath.Dir(p.DataDir))
		if perr != nil {
			return perr
		}
		p.Addr, p.MetricsAddr = fresh.Addr, fresh.MetricsAddr
	}
	return err
}

// Start launches the process (output appended to LogPath) and waits until
// /healthz answers 200.
func (p *Proc) Start(ctx context.Context) error {
	if p.cmd != nil {
		return errors.New("start: already running")
	}
	log, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	cmd := exec.Command(p.Bin, "--listen", p.Addr, "--metrics-listen", p.MetricsAddr,
		"--data-dir", p.DataDir, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.Addr, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); log.Close(); close(p.done) }()
	return p.waitHealthy(ctx)
}

func (p *Proc) waitHealthy(ctx context.Context) error {
	url := "http://" + p.MetricsAddr + "/healthz"
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			p.cmd = nil
			return fmt.Errorf("server %s exited before healthy; log:\n%s", p.Addr, p.LogTail())
		case <-ctx.Done():
			return fmt.Errorf("server %s not healthy: %w; log:\n%s", p.Addr, ctx.Err(), p.LogTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Kill sends sig (SIGKILL for a crash, SIGTERM for a clean stop) and waits
// for the process to exit.
func (p *Proc) Kill(sig syscall.Signal) error {
	if p.cmd == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s: %w", p.Addr, err)
	}
	if p.paused {
		// A stopped process only acts on SIGTERM once continued.
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.paused = false
	}
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("server %s ignored %v for 20s", p.Addr, sig)
	}
	p.cmd = nil
	return nil
}

// Pause stops the process with SIGSTOP: it keeps its sockets and state but
// answers nothing until Resume.
func (p *Proc) Pause() error {
	if p.cmd == nil {
		return errors.New("pause: not running")
	}
	if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pause %s: %w", p.Addr, err)
	}
	p.paused = true
	return nil
}

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() error {
	if p.cmd == nil {
		return errors.New("resume: not running")
	}
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume %s: %w", p.Addr, err)
	}
	p.paused = false
	return nil
}

// Restart crashes the process (kill -9, if it is running) and starts it
// again with the same flags on the same data dir, waiting until healthy.
func (p *Proc) Restart(ctx context.Context) error {
	if err := p.Kill(syscall.SIGKILL); err != nil {
		return err
	}
	return p.Start(ctx)
}

// LogTail returns the last lines of the server log.
func (p *Proc) LogTail() string {
	b, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// RunWithBinaries is a TestMain body: it builds the binaries into a
// temporary directory, sets *dir to it, runs the tests, removes it and
// returns the exit code.
func RunWithBinaries(m interface{ Run() int }, dir *string) int {
	d, err := os.MkdirTemp("", "chunkraft-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(d)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	err = BuildBinaries(ctx, d)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*dir = d
	return m.Run()
}

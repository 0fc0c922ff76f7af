package bench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

const (
	// ChunkSize is the size of a chunk's data on a chunkserver (16 MiB).
	ChunkSize = 16 << 20
	// SectorSize is the I/O alignment the servers require and the unit of the
	// verification pattern (4 KiB).
	SectorSize = 4 << 10
	// MinBS and MaxBS bound the block size of a run.
	MinBS = SectorSize
	MaxBS = 4 << 20
	// DefaultSpan is the chunk space per copyset when Config.Span is 0.
	DefaultSpan = 64 << 20
	// DefaultRuntime is how long a run lasts when neither Runtime nor Ops is set.
	DefaultRuntime = 10 * time.Second
	// prefillUnit is the size of prefill writes (or BS when larger).
	prefillUnit = 1 << 20
	// prefillDepth is the number of prefill writes in flight.
	prefillDepth = 8
)

// Mode is a workload.
type Mode string

// The workloads.
const (
	RandWrite Mode = "randwrite"
	RandRead  Mode = "randread"
	SeqWrite  Mode = "write"
	SeqRead   Mode = "read"
	RandRW    Mode = "randrw"
)

// Modes lists the workloads in the order the help text shows them.
var Modes = []Mode{RandWrite, RandRead, SeqWrite, SeqRead, RandRW}

// ParseMode parses a --rw value.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown workload %q: want randwrite, randread, write, read or randrw", s)
}

// Sequential reports whether workers walk their regions in order.
func (m Mode) Sequential() bool { return m == SeqWrite || m == SeqRead }

// Reads reports whether the workload reads at all.
func (m Mode) Reads() bool { return m == RandRead || m == SeqRead || m == RandRW }

// Writes reports whether the workload writes at all.
func (m Mode) Writes() bool { return m == RandWrite || m == SeqWrite || m == RandRW }

// Config describes one run.
type Config struct {
	Mode Mode
	// RWMixRead is the percentage of reads in RandRW (0..100).
	RWMixRead int
	// BS is the size of every operation: a multiple of 4 KiB, 4 KiB..4 MiB.
	BS uint32
	// IODepth is the number of requests in flight (workers).
	IODepth int
	// Runtime bounds the run's duration; Ops bounds its operation count
	// (successful or not). With both, whichever comes first ends the run;
	// with neither, the run lasts DefaultRuntime.
	Runtime time.Duration
	Ops     int64
	// Rate bounds the operations started per second over all workers (0:
	// none): operation k starts no earlier than k/Rate seconds into the
	// run, so a run that falls behind catches up at the workers' pace.
	Rate float64
	// Pool and Copysets name the copysets the run spreads over.
	Pool     uint32
	Copysets []uint32
	// Span is the chunk space per copyset in bytes (DefaultSpan if 0): a
	// multiple of 4 KiB holding at least one block.
	Span uint64
	// Sn is the sequence number writes are made under.
	Sn uint64
	// Prefill writes the whole span before the measured phase.
	Prefill bool
	// Verify writes self-describing patterns and checks every read.
	Verify bool
	// Seed seeds the random offsets (0: a random seed).
	Seed uint64
	// Progress, when not nil, receives a line every ProgressInterval
	// (a second if 0) during the measured phase.
	Progress         io.Writer
	ProgressInterval time.Duration
	// Log, when not nil, receives notes about phases (prefill) and the
	// first mismatches as they are found.
	Log io.Writer
	// BeforeMeasure, when not nil, is called after the prefill, right
	// before the measured phase starts (to reset outside counters).
	BeforeMeasure func()
}

// withDefaults returns c with zero fields filled in.
func (c Config) withDefaults() Config {
	if c.Span == 0 {
		c.Span = DefaultSpan
	}
	if c.Runtime <= 0 && c.Ops <= 0 {
		c.Runtime = DefaultRuntime
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = time.Second
	}
	return c
}

// Validate checks c (after defaults are applied).
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return err
	}
	var errs []error
	if c.RWMixRead < 0 || c.RWMixRead > 100 {
		errs = append(errs, fmt.Errorf("rwmixread %d: want 0..100", c.RWMixRead))
	}
	if c.BS < MinBS || c.BS > MaxBS || c.BS%SectorSize != 0 {
		errs = append(errs, fmt.Errorf("bs %d: want a multiple of 4 KiB from 4 KiB to 4 MiB", c.BS))
	}
	if c.IODepth < 1 {
		errs = append(errs, fmt.Errorf("iodepth %d: want at least 1", c.IODepth))
	}
	if c.Ops < 0 {
		errs = append(errs, fmt.Errorf("ops %d: want >= 0", c.Ops))
	}
	if c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		errs = append(errs, fmt.Errorf("rate %v: want >= 0", c.Rate))
	}
	if len(c.Copysets) == 0 {
		errs = append(errs, errors.New("no copysets given"))
	}
	if c.Span%SectorSize != 0 {
		errs = append(errs, fmt.Errorf("span %d: want a multiple of 4 KiB", c.Span))
	}
	if c.Sn == 0 {
		errs = append(errs, errors.New("sn: want > 0"))
	}
	if len(errs) == 0 {
		l := newLayout(c)
		if l.blocksPerCopyset == 0 {
			errs = append(errs, fmt.Errorf("span %d holds no block of %d bytes", c.Span, c.BS))
		} else if c.Mode.Sequential() && l.total < uint64(c.IODepth) {
			errs = append(errs, fmt.Errorf("%d blocks in all are fewer than iodepth %d: sequential workers need a block each", l.total, c.IODepth))
		}
	}
	return errors.Join(errs...)
}

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkraft/chunkraft/cli"
	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// jsonReportKeys are the keys of the -o json report, sorted.
var jsonReportKeys = []string{"bs", "copysets", "errors", "errors_by_kind", "iodepth", "iops", "lat_us", "mb_per_s", "ops", "pool", "runtime_s", "rw", "seed"}

func TestJSONSchemaExact(t *testing.T) {
	f := newFakeIO()
	cfg := testConfig(RandWrite, 4<<10, 1<<20)
	cfg.Ops = 50
	cfg.Seed = 77
	res, err := Run(context.Background(), f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if strings.Count(buf.String(), "\n") != 1 {
		t.Fatalf("want one line: %q", buf.String())
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(keys, jsonReportKeys) {
		t.Fatalf("fields %v, want %v", keys, jsonReportKeys)
	}
	var lat map[string]float64
	if err := json.Unmarshal(m["lat_us"], &lat); err != nil {
		t.Fatal(err)
	}
	var latKeys []string
	for k := range lat {
		latKeys = append(latKeys, k)
	}
	slices.Sort(latKeys)
	if !slices.Equal(latKeys, []string{"max", "mean", "p50", "p99", "p999"}) {
		t.Fatalf("lat_us fields %v", latKeys)
	}
	var j struct {
		RW       string  `json:"rw"`
		BS       int     `json:"bs"`
		IODepth  int     `json:"iodepth"`
		RuntimeS float64 `json:"runtime_s"`
		Ops      int     `json:"ops"`
		Errors   int     `json:"errors"`
		Seed     uint64  `json:"seed"`
		Pool     uint32  `json:"pool"`
		Copysets []int   `json:"copysets"`
		ByKind   map[string]int
	}
	if err := json.Unmarshal(buf.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if j.RW != "randwrite" || j.BS != 4096 || j.IODepth != 4 || j.Ops != 50 || j.Errors != 0 || j.RuntimeS < 0 ||
		j.Seed != 77 || j.Pool != 1 || !slices.Equal(j.Copysets, []int{1, 2, 3}) {
		t.Fatalf("values %+v", j)
	}
	if string(m["errors_by_kind"]) != "{}" {
		t.Fatalf("errors_by_kind of a run without errors: %s", m["errors_by_kind"])
	}
}

func TestHistogramPercentiles(t *testing.T) {
	h := newHistogram()
	for us := 1; us <= 10000; us++ {
		recordLatency(h, time.Duration(us)*time.Microsecond)
	}
	l := LatencyOf(h)
	near := func(name string, got, want int64) {
		if math.Abs(float64(got-want)) > float64(want)/500+1 { // 3 significant digits
			t.Errorf("%s = %d, want about %d", name, got, want)
		}
	}
	near("p50", l.P50, 5000)
	near("p99", l.P99, 9900)
	near("p999", l.P999, 9990)
	near("max", l.Max, 10000)
	if math.Abs(l.Mean-5000.5) > 10 {
		t.Errorf("mean %.1f", l.Mean)
	}
	if !(l.P50 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("not monotonic: %+v", l)
	}
	// Out-of-range values are clamped, not lost.
	recordLatency(h, time.Hour)
	recordLatency(h, 0)
	if h.TotalCount() != 10002 || h.Max() < histMaxUs-histMaxUs/500 {
		t.Errorf("clamping: count %d max %d", h.TotalCount(), h.Max())
	}
	if (LatencyOf(newHistogram()) != Latency{}) {
		t.Error("empty histogram")
	}
}

func TestClassify(t *testing.T) {
	gaveUp := func(last error) error {
		return fmt.Errorf("write pool 1 copyset 2 chunk 3: %w", &cli.GaveUpError{After: 15 * time.Second, Last: last})
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("read x: %w", &cli.ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_CHUNK_NOTEXIST}), "CHUNK_OP_STATUS_CHUNK_NOTEXIST"},
		{&cli.ChunkStatusError{Status: chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_INVALID_REQUEST}, "CHUNK_OP_STATUS_INVALID_REQUEST"},
		{gaveUp(errors.New(`127.0.0.1:8200: CHUNK_OP_STATUS_REDIRECTED (no usable leader hint "")`)), "CHUNK_OP_STATUS_REDIRECTED"},
		{gaveUp(errors.New("127.0.0.1:8200: CHUNK_OP_STATUS_OVERLOAD")), "CHUNK_OP_STATUS_OVERLOAD"},
		{gaveUp(errors.New("127.0.0.1:8201: CHUNK_OP_STATUS_COPYSET_NOTEXIST")), "CHUNK_OP_STATUS_COPYSET_NOTEXIST"},
		{gaveUp(fmt.Errorf("127.0.0.1:8200: %w", status.Error(codes.Unavailable, "connection refused"))), KindUnavailable},
		{gaveUp(status.Error(codes.DeadlineExceeded, "context deadline exceeded")), KindTimeout},
		{gaveUp(context.DeadlineExceeded), KindTimeout},
		{gaveUp(nil), KindTimeout},
		{gaveUp(errors.New("something odd")), KindTimeout},
		{gaveUp(errors.New("no leader found: 127.0.0.1:8200: unreachable: refused")), KindUnavailable},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), KindTimeout},
		{fmt.Errorf("op: %w", context.Canceled), KindCanceled},
		{status.Error(codes.Unavailable, "down"), KindUnavailable},
		{status.Error(codes.Canceled, "bye"), KindCanceled},
		{fmt.Errorf("op: %w", status.Error(codes.ResourceExhausted, "too big")), "grpc:ResourceExhausted"},
		{errors.New("read x: server returned 0 bytes, asked for 4096"), KindOther},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if Classify(nil) != "" {
		t.Error("nil error has a kind")
	}
}

func TestAttemptCounter(t *testing.T) {
	a := NewAttemptCounter()
	call := func(reply any, err error) {
		_ = a.intercept(context.Background(), "/m", nil, reply, nil, func(ctx context.Context, method string, req, r any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
			return err
		})
	}
	redirected := chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_REDIRECTED
	success := chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS
	call(&chunkserverpb.ChunkResponse{Status: &redirected}, nil)
	call(&chunkserverpb.ChunkResponse{Status: &redirected}, nil)
	call(&chunkserverpb.ChunkResponse{Status: &success}, nil)
	call(&chunkserverpb.ChunkResponse{}, status.Error(codes.Unavailable, "down"))
	call(&chunkserverpb.GetLeaderResponse2{}, nil)
	got := a.Counts()
	if fmt.Sprint(got) != fmt.Sprint(map[string]int64{"CHUNK_OP_STATUS_REDIRECTED": 2, KindUnavailable: 1}) {
		t.Fatalf("counts %v", got)
	}
	a.Reset()
	if len(a.Counts()) != 0 {
		t.Fatal("reset")
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[uint64]string{4096: "4KiB", 64 << 20: "64MiB", 1 << 30: "1GiB", 5000: "5000B", 12 << 10: "12KiB"} {
		if got := sizeString(in); got != want {
			t.Errorf("sizeString(%d) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[int64]string{850: "850us", 12345: "12.35ms", 2500000: "2.50s"} {
		if got := usString(in); got != want {
			t.Errorf("usString(%d) = %q, want %q", in, got, want)
		}
	}
	if got := idRanges([]uint32{1, 2, 3, 5, 8, 9}); got != "1-3,5,8-9" {
		t.Errorf("idRanges = %q", got)
	}
}

func TestAttemptCounterSkipsOwnCancellations(t *testing.T) {
	a := NewAttemptCounter()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = a.intercept(ctx, "/m", nil, &chunkserverpb.GetLeaderResponse2{}, nil, func(ctx context.Context, method string, req, r any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return status.Error(codes.Canceled, "context canceled")
	})
	if len(a.Counts()) != 0 {
		t.Fatalf("counts %v", a.Counts())
	}
}

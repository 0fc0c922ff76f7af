package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/datasync/restore"
)

// Bad flags of sync restore are refused with one line before anything is
// opened or asked (the server does not exist).
func TestSyncRestoreBadFlags(t *testing.T) {
	srv := []string{deadAddr(t)}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pool", "1"}, `required flag(s) "from" not set`},
		{[]string{"--from", "/abs/dir", "--pool", "1"}, "no scheme"},
		{[]string{"--from", "file:rel", "--pool", "1"}, "relative path"},
		{[]string{"--from", "s3://bucket/p", "--pool", "1", "--s3-endpoint", ""}, "needs --s3-endpoint"},
		{[]string{"--from", "file:///x", "--pool", "0"}, "--pool: pool ids start at 1"},
		{[]string{"--from", "file:///x", "--pool", "1", "--to-pool", "0"}, "--to-pool: pool ids start at 1"},
		{[]string{"--from", "file:///x", "--pool", "1", "--copysets", "3-1"}, "--copysets: range"},
		{[]string{"--from", "file:///x", "--pool", "1", "--until-index", "3", "--until-time", "5"}, "not both"},
		{[]string{"--from", "file:///x", "--pool", "1", "--until-time", "yesterday"}, "want an RFC 3339 time"},
		{[]string{"--from", "file:///x", "--pool", "1", "--parallel", "0"}, "--parallel 0"},
		{[]string{"--from", "file:///x", "--pool", "1", "--chunk-parallel", "0"}, "--chunk-parallel 0"},
		{[]string{"--from", "file:///x", "--pool", "1", "--write-depth", "0"}, "--write-depth 0"},
		{[]string{"--from", "file:///x", "--pool", "1", "--progress", "loud"}, `--progress "loud"`},
	} {
		_, err := run(t, srv, nil, append([]string{"sync", "restore"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line with %q", c.args, err, c.want)
		}
	}
	if _, err := run(t, srv, nil, "sync", "frob"); err == nil || !strings.Contains(err.Error(), `unknown command "frob" for "chunkctl sync"`) {
		t.Errorf("sync frob: %v", err)
	}
}

func TestParseUntilTime(t *testing.T) {
	for in, want := range map[string]int64{
		"1700000000123":               1700000000123,
		"2023-11-14T22:13:20Z":        1700000000000,
		"2023-11-14T23:13:20.5+01:00": 1700000000500,
	} {
		if got, err := parseUntilTime(in); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", in, got, err, want)
		}
	}
	if _, err := parseUntilTime("-5"); err == nil {
		t.Error("-5 accepted")
	}
}

func TestRestoreSummaryTable(t *testing.T) {
	var out bytes.Buffer
	tot := restore.Totals{Packets: 5, Chunks: 2, Records: 9, Skipped: 1, Refused: 1, Bytes: 2_000_000}
	sum := &restore.Summary{Copysets: []restore.CopysetSummary{{Pool: 1, Copyset: 3, ToPool: 2, UntilIndex: 40, Totals: tot}},
		Totals: tot, Elapsed: 2 * time.Second, Checked: 300 * time.Millisecond}
	if err := printRestoreSummary(&printer{w: &out, format: formatTable}, restore.Options{Pool: 1, ToPool: 2}, sum); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"COPYSET", "UNTIL-INDEX", "3  ", "40", "restored 1 copysets of pool 1 into pool 2: 2 chunks, 9 records (1 skipped, 1 refused as in the source), 2.0 MB in 2s (checked in 300ms), 1.0 MB/s"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
}

#!/usr/bin/env bash
# The standard chunkraft benchmark: a fresh local 3-node cluster, the chunkbench
# matrix against it, the disk's own ceiling measured with fio on the same
# filesystem, all written as Markdown to docs/benchmarks.md.
#
#   scripts/bench.sh
#
# Matrix (each run BENCH_RUNTIME long, default 10s; pool 1, copysets 1-16,
# 64 MiB of chunk space per copyset, laid out once before the first run):
#   4 KiB randwrite, iodepth 1 and 64       1 MiB sequential write, iodepth 8
#   4 KiB randread,  iodepth 1 and 64       4 KiB randrw 70/30, iodepth 64
# fio: 4 KiB write+fdatasync serially (appending, and overwriting), 4 KiB
# direct random writes at depth 64, 1 MiB direct sequential writes at depth 8.
# The document's hand-written part (from the line
# "<!-- bench.sh keeps what follows -->" to its end: the hand-written runs of
# the sync and disagg services) is carried over from the file being replaced.
# The write runs again on a cluster with raft.log_store: boltdb (per-copyset
# raft-boltdb), for a table of the two log stores side by side.
# etcd, for comparison in the same run: a 3-member etcd on loopback (data on
# the same filesystem) driven by chunkbench's etcd target (--etcd-endpoints):
# 4 KiB puts and linearizable 4 KiB gets, iodepth 64 (etcd-server is installed
# with apt-get when missing and running as root; otherwise the document says
# why it was skipped). Also recorded: the servers' CPU
# when idle, and per run the cores used by the servers, by chunkbench and by
# everything else on the machine. Then the sync service (scripts/sync_bench.sh)
# and the dm service (scripts/dm_bench.sh), each on a fresh cluster of its own.
# A "Cost per op" table follows the etcd section: for every chunkbench run of
# the matrix and the two etcd runs, machine-wide counters over the run divided
# by the ops it completed: CPU busy time and context switches (/proc/stat),
# syscalls entered (perf stat -e raw_syscalls:sys_enter -a, n/a without perf)
# and, for writes, the bytes written to the block device holding BENCH_DIR's
# filesystem (/proc/diskstats) per byte the client wrote.
#
# Environment:
#   BENCH_RUNTIME      duration of every chunkbench and fio run (default 10s)
#   BENCH_OUT          the Markdown file to write (default <repo>/docs/benchmarks.md)
#   BENCH_DIR          where the cluster and fio files live (default: mktemp -d;
#                      the measured filesystem is the one holding it)
#   BASE_PORT          first gRPC port of the cluster (default 8400)
#   METRICS_BASE_PORT  first metrics port (default 9400)
#   BENCH_PROFILE      1 (default): one extra 4 KiB randwrite run at iodepth 64
#                      while a CPU profile of cs0 is taken; its top entries go
#                      into the document. 0 skips it.
#   BENCH_FIO          1 (default): run fio (installed with apt-get when missing
#                      and running as root). 0 skips it.
#   BENCH_BOLTDB       1 (default): repeat the write runs on a cluster with
#                      raft.log_store: boltdb, for the comparison table. 0 skips it.
#   BENCH_ETCD         1 (default): measure etcd (etcd-server installed with
#                      apt-get when missing and running as root). 0 skips it.
#   BENCH_PERF         1 (default): count the syscalls of every measured run with
#                      perf (/usr/bin/perf, or perf on PATH). 0 skips it (the
#                      syscall column then says n/a).
#   BENCH_SERVICES     1 (default): run the sync and dm services' benchmarks.
#                      0 skips them (and their sections).
#   BENCH_COMMIT       the commit to record (default: git rev-parse --short HEAD,
#                      marked when the tree has uncommitted changes)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNTIME="${BENCH_RUNTIME:-10s}"
OUT="${BENCH_OUT:-$ROOT/docs/benchmarks.md}"
export BASE_PORT="${BASE_PORT:-8400}"
export METRICS_BASE_PORT="${METRICS_BASE_PORT:-9400}"
PROFILE="${BENCH_PROFILE:-1}"
RUN_FIO="${BENCH_FIO:-1}"
RUN_BOLT="${BENCH_BOLTDB:-1}"
RUN_PERF="${BENCH_PERF:-1}"
RUN_SERVICES="${BENCH_SERVICES:-1}"
BENCH="$ROOT/bin/chunkbench"

die() {
    echo "bench.sh: $*" >&2
    exit 1
}
log() { echo "==> $*" >&2; }

# seconds converts a Go-style duration (10s, 1m, 90s, 1m30s) to whole seconds.
seconds() {
    local d="$1" total=0 n unit
    [[ "$d" =~ ^[0-9]+$ ]] && d="${d}s"
    while [[ -n "$d" ]]; do
        [[ "$d" =~ ^([0-9]+)(h|m|s)(.*)$ ]] || die "BENCH_RUNTIME=$RUNTIME: want e.g. 10s, 1m or 1m30s"
        n="${BASH_REMATCH[1]}" unit="${BASH_REMATCH[2]}" d="${BASH_REMATCH[3]}"
        case "$unit" in
        h) total=$((total + n * 3600)) ;;
        m) total=$((total + n * 60)) ;;
        s) total=$((total + n)) ;;
        esac
    done
    ((total > 0)) || die "BENCH_RUNTIME=$RUNTIME: must be at least 1s"
    echo "$total"
}
RUNTIME_S="$(seconds "$RUNTIME")"

if [[ -n "${BENCH_DIR:-}" ]]; then
    WORK="$BENCH_DIR"
    mkdir -p "$WORK"
    OWN_WORK=0
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/chunkbench.XXXXXX")"
    OWN_WORK=1
fi
WORK="$(cd "$WORK" && pwd)"
export CLUSTER_DIR="$WORK/cluster"
RESULTS="$WORK/results"
mkdir -p "$RESULTS"

SERVERS="127.0.0.1:$BASE_PORT,127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2))"
ETCD_PIDS=()
PERF_PID="" # the perf stat counting the syscalls of the run under way

cleanup() {
    local rc=$?
    local pid
    for pid in "${ETCD_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    if [[ -n "$PERF_PID" ]]; then
        kill -INT "$PERF_PID" 2>/dev/null || true
    fi
    "$ROOT/scripts/cluster.sh" down --clean >/dev/null 2>&1 || true
    rm -rf "$WORK/fio" "$WORK/etcd"
    if ((OWN_WORK)); then
        rm -rf "$WORK"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# json_field FILE NAME prints a numeric field of a chunkbench -o json report.
json_field() {
    sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" "$1" | head -n 1
}

# fmt_num rounds a number to an integer with thousands separators.
fmt_num() { LC_ALL=C awk -v x="$1" 'BEGIN { if (x == "") { print "-"; exit } s = sprintf("%.0f", x); out = ""; while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) } print s out }'; }
# fmt_ms renders microseconds as milliseconds with 2 decimals.
fmt_ms() { LC_ALL=C awk -v x="$1" 'BEGIN { if (x == "") print "-"; else printf "%.2f", x / 1000 }'; }
fmt_1() { LC_ALL=C awk -v x="$1" 'BEGIN { if (x == "") print "-"; else printf "%.1f", x }'; }

# ---------------------------------------------------------------------------
# chunkbench matrix

# Each entry: id | label | target | chunkbench arguments. Before them the
# whole span is laid out once (see layout), so every run, writes included,
# works on chunks that exist and reads hit written blocks.
MATRIX=(
    "rw4k1|4 KiB randwrite|p50 <= 1.5 ms|--rw randwrite --bs 4k --iodepth 1"
    "rw4k64|4 KiB randwrite|>= 10,000 IOPS, p99 <= 20 ms|--rw randwrite --bs 4k --iodepth 64"
    "sw1m8|1 MiB sequential write|>= 150 MB/s|--rw write --bs 1m --iodepth 8"
    "rr4k1|4 KiB randread||--rw randread --bs 4k --iodepth 1"
    "rr4k64|4 KiB randread|>= 20,000 IOPS|--rw randread --bs 4k --iodepth 64"
    "rrw4k64|4 KiB randrw 70/30|-|--rw randrw --rwmixread 70 --bs 4k --iodepth 64"
)
COMMON="--servers $SERVERS --pool 1 --copysets 1-16 --span 64m --runtime $RUNTIME -o json"

# met ID prints whether the run meets its target (the MATRIX entry's).
met() {
    local f="$RESULTS/$1.json" iops p50 p99 mbs
    [[ -s "$f" ]] || {
        echo "no result"
        return
    }
    iops="$(json_field "$f" iops)" p50="$(json_field "$f" p50)" p99="$(json_field "$f" p99)" mbs="$(json_field "$f" mb_per_s)"
    case "$1" in
    rw4k1) awk -v a="$p50" 'BEGIN { print (a <= 1500 ? "yes" : "no") }' ;;
    rw4k64) awk -v a="$iops" -v b="$p99" 'BEGIN { print (a >= 10000 && b <= 20000 ? "yes" : "no") }' ;;
    sw1m8) awk -v a="$mbs" 'BEGIN { print (a >= 150 ? "yes" : "no") }' ;;
    rr4k64) awk -v a="$iops" 'BEGIN { print (a >= 20000 ? "yes" : "no") }' ;;
    *) echo "-" ;;
    esac
}

# CPU accounting around each run, in clock ticks / seconds: the whole
# machine's busy time (/proc/stat), the chunkservers' (/proc/PID/stat) and
# chunkbench's (bash's children times), so that "other" is what the rest of
# the machine used meanwhile.
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"
busy_ticks() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
server_ticks() {
    local t=0 f pid
    for f in "$CLUSTER_DIR"/cs*.pid; do
        [[ -s "$f" ]] || continue
        pid="$(<"$f")"
        if [[ -r "/proc/$pid/stat" ]]; then
            t=$((t + $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{ print $12 + $13 }')))
        fi
    done
    echo "$t"
}
# children_secs prints the CPU seconds of this shell's finished children. The
# `times` builtin must run in this shell, not in a $(...) subshell.
children_secs() {
    times >"$WORK/times"
    sed -n 2p "$WORK/times" | LC_ALL=C awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%.3f", n }'
}
now_secs() { date +%s.%N; }

# Cost per op: machine-wide counters over each measured run, from right
# before chunkbench starts (for a run with --prefill: from the moment it logs
# the end of its prefill) to right after it exits, so chunkbench's start
# (connecting) and end (draining, the report) are in the window:
# busy ticks and context switches (/proc/stat), sectors written to the block
# device holding $WORK's filesystem (/proc/diskstats, field 10, 512 bytes
# each) and the syscalls entered on every CPU, counted by a perf stat started
# (with its counters disabled) before chunkbench, whose counters its control
# FIFO enables when the window opens and disables when it closes, and which
# SIGINT then stops.
# Per run ID: $RESULTS/ID.cost ("busy_ticks ctxt sectors seconds", sectors
# "-" without a device), $RESULTS/ID.syscalls (the count) or
# $RESULTS/ID.perfnote (why there is none).
PERF="$(command -v perf 2>/dev/null || true)"
[[ -n "$PERF" || ! -x /usr/bin/perf ]] || PERF=/usr/bin/perf
DISK_DEV=""  # the device's name in /proc/diskstats, "" when not found
DISK_NOTE="" # what the disk column measures, or why it cannot
COST_START=""

# disk_device DIR prints the name in /proc/diskstats of the block device
# holding DIR's filesystem (a partition such as vda1 and a device-mapper
# device such as dm-0 have lines of their own there): by the filesystem's
# device number, else by its source device (btrfs reports an anonymous device
# number; its source may carry a [/subvolume] suffix). Nothing when there is
# none (tmpfs, overlay, a network filesystem).
disk_device() {
    local majmin="" src="" dev name=""
    if command -v findmnt >/dev/null; then
        majmin="$(findmnt -n -o MAJ:MIN -T "$1" 2>/dev/null | head -n 1 | tr -d ' ')" || true
        src="$(findmnt -n -o SOURCE -T "$1" 2>/dev/null | head -n 1)" || true
    fi
    if [[ -z "$majmin" ]] && dev="$(stat -c %d "$1" 2>/dev/null)"; then
        majmin="$(((dev >> 8) & 0xfff)):$(((dev & 0xff) | ((dev >> 12) & 0xfff00)))"
    fi
    [[ -n "$src" ]] || src="$(df -P "$1" 2>/dev/null | awk 'NR == 2 { print $1 }')" || true
    if [[ -n "$majmin" ]]; then
        name="$(awk -v mm="$majmin" '$1 ":" $2 == mm { print $3; exit }' /proc/diskstats)"
    fi
    if [[ -z "$name" && "$src" == /dev/* ]]; then
        src="$(readlink -f "${src%%\[*}" 2>/dev/null)" || true
        name="$(awk -v n="${src#/dev/}" '$3 == n { print $3; exit }' /proc/diskstats)"
    fi
    echo "$name"
}

# cost_sample prints "busy_ticks ctxt sectors_written" for now.
cost_sample() {
    local sectors=""
    if [[ -n "$DISK_DEV" ]]; then
        sectors="$(awk -v d="$DISK_DEV" '$3 == d { print $10; exit }' /proc/diskstats)"
    fi
    awk -v s="${sectors:--}" '/^cpu / { b = $2 + $3 + $4 + $7 + $8 } /^ctxt / { c = $2 } END { print b, c, s }' /proc/stat
}

# nap SECONDS sleeps without starting a process (a read timing out on a FIFO
# nobody writes to), so that polling adds nothing to the children's CPU times.
nap() { read -r -t "$1" <>"$WORK/nap.fifo" || true; }

# first_line FILE DEFAULT prints the first line of FILE that says something
# (not empty, not a perf comment or its "Events disabled/enabled" notes),
# else DEFAULT.
first_line() {
    awk -v d="$2" 'NF && !/^#/ && !/^Events (dis|en)abled$/ { print; f = 1; exit } END { if (!f) print d }' "$1" 2>/dev/null || echo "$2"
}

# perf_note ID MESSAGE records why run ID has no syscall count (the first
# reason given is kept).
perf_note() { [[ -s "$RESULTS/$1.perfnote" ]] || echo "$2" >"$RESULTS/$1.perfnote"; }

# perf_alive PID: whether the process is there and not a zombie.
perf_alive() {
    local st
    [[ -r "/proc/$1/stat" ]] || return 1
    st="$(<"/proc/$1/stat")" || return 1
    st="${st##*) }"
    [[ "${st:0:1}" != Z ]]
}

# cost_prepare ID starts perf stat for run ID with its counters disabled and
# waits (at most 10 s) until they are open. Whatever goes wrong ends in
# $RESULTS/ID.perfnote, never in the script's exit status.
cost_prepare() {
    local id="$1" i
    rm -f "$RESULTS/$id.cost" "$RESULTS/$id.syscalls" "$RESULTS/$id.perfnote" "$RESULTS/$id.perf"
    COST_START=""
    if [[ "$RUN_PERF" != 1 ]]; then
        perf_note "$id" "not counted (BENCH_PERF=0)"
        return 0
    fi
    if [[ -z "$PERF" ]]; then
        perf_note "$id" "perf is not installed (Debian: apt-get install linux-perf)"
        return 0
    fi
    rm -f "$WORK/perf.ctl" "$WORK/perf.ack"
    if ! mkfifo "$WORK/perf.ctl" "$WORK/perf.ack" 2>/dev/null; then
        perf_note "$id" "could not make perf's control FIFOs in $WORK"
        return 0
    fi
    "$PERF" stat -e raw_syscalls:sys_enter -a -x, -D -1 --control "fifo:$WORK/perf.ctl,$WORK/perf.ack" \
        -o "$RESULTS/$id.perf" </dev/null >"$RESULTS/$id.perf.err" 2>&1 &
    PERF_PID=$!
    for i in $(seq 1 200); do
        if ! perf_alive "$PERF_PID"; then
            wait "$PERF_PID" 2>/dev/null || true
            perf_note "$id" "perf stat failed: $(first_line "$RESULTS/$id.perf.err" "it exited before counting")"
            PERF_PID=""
            return 0
        fi
        if readlink "/proc/$PERF_PID/fd/"* 2>/dev/null | grep -q 'perf_event'; then
            return 0
        fi
        sleep 0.05
    done
    perf_note "$id" "perf stat had not opened its counters after 10 s"
    perf_stop "$id"
}

# perf_control ID CMD sends CMD (enable, disable) to run ID's perf stat
# through its control FIFO; without its acknowledgement within 5 s the
# syscall count is dropped.
perf_control() {
    local id="$1" ack=""
    [[ -n "$PERF_PID" ]] || return 0
    { echo "$2" >&3; } 2>/dev/null 3<>"$WORK/perf.ctl" || true
    read -r -t 5 ack 2>/dev/null <>"$WORK/perf.ack" || true
    if [[ "$ack" != ack* ]]; then
        perf_note "$id" "perf stat did not acknowledge \"$2\" on its control FIFO"
        perf_stop "$id"
    fi
}

# cost_begin ID opens run ID's window: perf's counters enabled, the first
# sample taken.
cost_begin() {
    perf_control "$1" enable
    COST_START="$(cost_sample) $(now_secs)"
}

# cost_end ID closes run ID's window: the second sample, into $RESULTS/ID.cost
# (nothing when the window never opened: a run that failed in its prefill),
# then perf's counters disabled (perf_stop ends it later).
cost_end() {
    local id="$1" end
    [[ -n "$COST_START" ]] || return 0
    end="$(cost_sample) $(now_secs)"
    perf_control "$id" disable
    LC_ALL=C awk -v a="$COST_START" -v b="$end" 'BEGIN {
        split(a, x, " "); split(b, y, " ")
        s = (x[3] == "-" || y[3] == "-") ? "-" : y[3] - x[3]
        printf "%d %d %s %.3f\n", y[1] - x[1], y[2] - x[2], s, y[4] - x[4] }' >"$RESULTS/$id.cost"
    COST_START=""
}

# perf_stop ID stops run ID's perf stat (SIGINT; SIGKILL after 5 s) and
# writes its count of raw_syscalls:sys_enter to $RESULTS/ID.syscalls.
perf_stop() {
    local id="$1" i n
    [[ -n "$PERF_PID" ]] || return 0
    kill -INT "$PERF_PID" 2>/dev/null || true
    for i in $(seq 1 100); do
        perf_alive "$PERF_PID" || break
        sleep 0.05
    done
    if perf_alive "$PERF_PID"; then
        kill -KILL "$PERF_PID" 2>/dev/null || true
        perf_note "$id" "perf stat did not stop on SIGINT"
    fi
    wait "$PERF_PID" 2>/dev/null || true
    PERF_PID=""
    rm -f "$WORK/perf.ctl" "$WORK/perf.ack"
    [[ ! -s "$RESULTS/$id.perfnote" ]] || return 0
    n="$(awk -F, '$3 ~ /sys_enter/ && $1 ~ /^[0-9]+$/ { print $1; exit }' "$RESULTS/$id.perf" 2>/dev/null)" || true
    if [[ -n "$n" ]]; then
        echo "$n" >"$RESULTS/$id.syscalls"
    else
        perf_note "$id" "perf stat printed no count of raw_syscalls:sys_enter: $(first_line "$RESULTS/$id.perf" "$(first_line "$RESULTS/$id.perf.err" "no output")")"
    fi
}

# prefill_done FILE: whether chunkbench's stderr, FILE, has the end of its prefill.
prefill_done() {
    local line
    [[ -f "$1" ]] || return 1 # not yet created by chunkbench's redirection
    while IFS= read -r line; do
        [[ "$line" != "prefill: wrote "* ]] || return 0
    done <"$1"
    return 1
}

# layout writes the whole span once (chunkbench's prefill, then one read).
LAYOUT_ARGS="--rw read --bs 1m --iodepth 1 --ops 1 --prefill"
layout() {
    log "laying out the span: chunkbench $LAYOUT_ARGS"
    # shellcheck disable=SC2086
    "$BENCH" $COMMON $LAYOUT_ARGS >"$RESULTS/layout.json" 2>"$RESULTS/layout.err" ||
        die "layout failed: $(tail -n 5 "$RESULTS/layout.err")"
}

# measured_run ID TICKS ARGS... runs chunkbench ARGS into $RESULTS/ID.json
# (.err, .rc) and writes to $RESULTS/ID.cpu the cores used on average over
# the run (its prefill included) by the servers (whose CPU ticks the
# function TICKS prints), by chunkbench and by everything else.
# The run's cost counters go to $RESULTS/ID.cost, .syscalls, .perfnote (see
# cost_prepare); perf's own CPU is not chunkbench's (it is reaped after c1).
measured_run() {
    local id="$1" ticks="$2" rc=0 b0 s0 c0 t0 b1 s1 c1 t1 pid prefill=0
    shift 2
    [[ " $* " != *" --prefill "* ]] || prefill=1
    rm -f "$RESULTS/$id.err" # prefill_done must not read an earlier run's
    cost_prepare "$id"
    children_secs >"$WORK/c0"
    b0="$(busy_ticks)" s0="$("$ticks")" c0="$(<"$WORK/c0")" t0="$(now_secs)"
    ((prefill)) || cost_begin "$id"
    "$BENCH" "$@" >"$RESULTS/$id.json" 2>"$RESULTS/$id.err" &
    pid=$!
    while ((prefill)); do
        if prefill_done "$RESULTS/$id.err"; then
            cost_begin "$id"
            break
        fi
        kill -0 "$pid" 2>/dev/null || break
        nap 0.02
    done
    wait "$pid" || rc=$?
    cost_end "$id"
    b1="$(busy_ticks)" s1="$("$ticks")" t1="$(now_secs)"
    children_secs >"$WORK/c1"
    c1="$(<"$WORK/c1")"
    perf_stop "$id"
    LC_ALL=C awk -v b="$((b1 - b0))" -v s="$((s1 - s0))" -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v hz="$CLK_TCK" \
        'BEGIN { w = t1 - t0; srv = s / hz / w; cli = (c1 - c0) / w; oth = b / hz / w - srv - cli; if (oth < 0) oth = 0; printf "%.2f %.2f %.2f\n", srv, cli, oth }' \
        >"$RESULTS/$id.cpu"
    echo "$rc" >"$RESULTS/$id.rc"
    if [[ -s "$RESULTS/$id.json" ]]; then
        cat "$RESULTS/$id.json" >&2
    fi
    if ((rc != 0)); then
        echo "chunkbench exited $rc:" >&2
        tail -n 20 "$RESULTS/$id.err" >&2 || true
    fi
}

run_matrix() {
    local entry id label target args
    for entry in "${MATRIX[@]}"; do
        IFS='|' read -r id label target args <<<"$entry"
        log "chunkbench $args"
        # shellcheck disable=SC2086 # the argument strings are meant to split
        measured_run "$id" server_ticks $COMMON $args
    done
}

# wait_pool waits (up to 5 min) until every server's chunk file pool is
# formatted, as an operator would before putting load on a new server: the
# background formatting otherwise competes with the measured runs.
wait_pool() {
    local i ready target deadline=$((SECONDS + 300))
    log "waiting for the chunk file pools to be formatted"
    for i in 0 1 2; do
        while :; do
            ready=$(curl -fsS -m 2 "http://127.0.0.1:$((METRICS_BASE_PORT + i))/metrics" 2>/dev/null |
                awk '$1 == "chunkraft_chunkfilepool_ready" { print $2 }')
            target=$(curl -fsS -m 2 "http://127.0.0.1:$((METRICS_BASE_PORT + i))/metrics" 2>/dev/null |
                awk '$1 == "chunkraft_chunkfilepool_target" { print $2 }')
            [[ -n "$ready" && -n "$target" && "$ready" == "$target" ]] && break
            ((SECONDS < deadline)) || { log "pool of server $i not ready ($ready/$target); measuring anyway"; break; }
            sleep 1
        done
    done
}

# measure_idle NAME SECONDS writes to $RESULTS/NAME.cpu the chunkservers'
# CPU (percent of one core per server) over SECONDS while nothing talks to
# them.
measure_idle() {
    local s0 s1 t0 t1
    sleep 2
    s0="$(server_ticks)" t0="$(now_secs)"
    sleep "$2"
    s1="$(server_ticks)" t1="$(now_secs)"
    LC_ALL=C awk -v s="$((s1 - s0))" -v t0="$t0" -v t1="$t1" -v hz="$CLK_TCK" \
        'BEGIN { printf "%.1f\n", 100 * s / hz / (t1 - t0) / 3 }' >"$RESULTS/$1.cpu"
}

# idle_256 brings up a fresh cluster with 256 copysets (3 replicas each, so
# 256 per server), waits for its chunk file pools, and measures it idle for
# at least 30 s (target: <= 5% of one core per server).
IDLE256_SECS=$((RUNTIME_S > 30 ? RUNTIME_S : 30))
idle_256() {
    log "256 copysets per server: measuring idle CPU for ${IDLE256_SECS}s"
    COPYSETS=1-256 "$ROOT/scripts/cluster.sh" up >"$RESULTS/cluster256-up.log" 2>&1 || {
        echo "cluster with 256 copysets did not come up: $(tail -n 3 "$RESULTS/cluster256-up.log")" >"$RESULTS/idle256.err"
        "$ROOT/scripts/cluster.sh" down --clean >/dev/null 2>&1 || true
        return 0
    }
    wait_pool
    sleep 5 # leader elections and the first snapshots settle
    measure_idle idle256 "$IDLE256_SECS"
    "$ROOT/scripts/cluster.sh" down --clean >/dev/null 2>&1 || true
}

# The write runs again on a fresh cluster whose copysets keep their raft logs
# in raft-boltdb (one bolt file per copyset) instead of the shared log
# (both are reported). Reads do not touch the log store and are not repeated.
BOLT_RUNS=(rw4k1 rw4k64 sw1m8)

# bolt_entries prints the MATRIX entries of BOLT_RUNS, in that order.
bolt_entries() {
    local want entry
    for want in "${BOLT_RUNS[@]}"; do
        for entry in "${MATRIX[@]}"; do
            [[ "$entry" == "$want|"* ]] && echo "$entry"
        done
    done
    return 0
}
run_boltdb() {
    [[ "$RUN_BOLT" == 1 ]] || return 0
    log "raft.log_store: boltdb: the write runs again on a fresh cluster"
    printf 'raft:\n  log_store: boltdb\n' >"$WORK/boltdb.yaml"
    CHUNKSERVER_CONFIG="$WORK/boltdb.yaml" "$ROOT/scripts/cluster.sh" up >"$RESULTS/cluster-bolt-up.log" 2>&1 || {
        echo "cluster with raft.log_store: boltdb did not come up: $(tail -n 3 "$RESULTS/cluster-bolt-up.log")" >"$RESULTS/bolt.err"
        "$ROOT/scripts/cluster.sh" down --clean >/dev/null 2>&1 || true
        return 0
    }
    wait_pool
    log "laying out the span: chunkbench $LAYOUT_ARGS"
    # shellcheck disable=SC2086
    "$BENCH" $COMMON $LAYOUT_ARGS >"$RESULTS/bolt-layout.json" 2>"$RESULTS/bolt-layout.err" || true
    wait_pool
    local id label target args
    while IFS='|' read -r id label target args; do
        log "chunkbench $args (boltdb)"
        # shellcheck disable=SC2086 # the argument strings are meant to split
        measured_run "bolt-$id" server_ticks $COMMON $args </dev/null
    done < <(bolt_entries)
    "$ROOT/scripts/cluster.sh" down --clean >/dev/null 2>&1 || true
}

# write_bolt_section writes the boltdb-against-shared table to stdout.
write_bolt_section() {
    [[ "$RUN_BOLT" == 1 ]] || return 0
    echo "## Log store: raft-boltdb against the shared log"
    echo
    if [[ -s "$RESULTS/bolt.err" ]]; then
        echo "Not measured ($(cat "$RESULTS/bolt.err"))."
        echo
        return 0
    fi
    echo "The write runs of the table above again, on a fresh cluster started with \`raft.log_store: boltdb\`"
    echo "(one raft-boltdb file per copyset, an fsync per append: no group commit across copysets), laid"
    echo "out the same way first. The shared-log columns are the main table's runs."
    echo
    echo "| workload | iodepth | boltdb IOPS | boltdb MB/s | boltdb p50 | boltdb p99 | boltdb CPU srv/bench/other | shared IOPS | shared p50 | shared p99 | shared/boltdb |"
    echo "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"
    local id label target args f g depth
    while IFS='|' read -r id label target args; do
        f="$RESULTS/bolt-$id.json" g="$RESULTS/$id.json"
        depth="$(sed -n 's/.*--iodepth \([0-9]*\).*/\1/p' <<<"$args")"
        if [[ -s "$f" ]]; then
            echo "| $label | $depth | $(fmt_num "$(json_field "$f" iops)") | $(fmt_1 "$(json_field "$f" mb_per_s)") | $(fmt_ms "$(json_field "$f" p50)") | $(fmt_ms "$(json_field "$f" p99)") | $(tr ' ' '/' <"$RESULTS/bolt-$id.cpu") | $(fmt_num "$(iops_of "$g")") | $( [[ -s "$g" ]] && fmt_ms "$(json_field "$g" p50)" || echo -) | $( [[ -s "$g" ]] && fmt_ms "$(json_field "$g" p99)" || echo -) | $(ratio "$(iops_of "$g")" "$(iops_of "$f")") |"
        else
            echo "| $label | $depth | - | - | - | - | - | $(fmt_num "$(iops_of "$g")") | - | - | no ratio |"
        fi
    done < <(bolt_entries)
    echo
    if grep -q '^prefill: wrote' "$RESULTS/bolt-layout.err" 2>/dev/null; then
        echo "Layout with boltdb: $(grep '^prefill: wrote' "$RESULTS/bolt-layout.err" | sed 's/^prefill: //')."
        echo
    fi
}

run_profile() {
    [[ "$PROFILE" == 1 ]] || return 0
    command -v go >/dev/null || {
        echo "go not installed: no profile" >"$RESULTS/profile.txt"
        return 0
    }
    local secs=$((RUNTIME_S > 4 ? RUNTIME_S - 3 : 1))
    log "profiling cs0 for ${secs}s during a 4 KiB randwrite at iodepth 64"
    # shellcheck disable=SC2086
    "$BENCH" $COMMON --rw randwrite --bs 4k --iodepth 64 >"$RESULTS/profile-run.json" 2>/dev/null &
    local bench_pid=$!
    sleep 2
    curl -fsS -m $((secs + 30)) -o "$WORK/cs0.cpu.pprof" \
        "http://127.0.0.1:$METRICS_BASE_PORT/debug/pprof/profile?seconds=$secs" || true
    wait "$bench_pid" || true
    if [[ -s "$WORK/cs0.cpu.pprof" ]]; then
        (cd "$ROOT" && go tool pprof -top -cum -nodecount=15 bin/chunkserver "$WORK/cs0.cpu.pprof" 2>/dev/null) |
            sed -n '/flat%/,$p' >"$RESULTS/profile.txt" || true
        (cd "$ROOT" && go tool pprof -top -cum -nodecount=15 bin/chunkserver "$WORK/cs0.cpu.pprof" 2>/dev/null) |
            grep -E '^(Duration|Showing nodes)' >"$RESULTS/profile.head" || true
        "$ROOT/scripts/profile_split.sh" "$ROOT/bin/chunkserver" "$WORK/cs0.cpu.pprof" >"$RESULTS/profile.split" 2>/dev/null || true
    fi
}

# ---------------------------------------------------------------------------
# fio

FIO_JOBS=(
    "sync4k_append|4 KiB write + fdatasync, serial, appending to a new file|--rw=write --bs=4k --size=4g --fallocate=none --ioengine=psync --iodepth=1 --fdatasync=1"
    "sync4k_over|4 KiB write + fdatasync, serial, overwriting a 64 MiB file|--rw=write --bs=4k --size=64m --ioengine=psync --iodepth=1 --fdatasync=1"
    "rand4k64|4 KiB O_DIRECT random write, depth 64 (libaio)|--rw=randwrite --bs=4k --size=1g --direct=1 --ioengine=libaio --iodepth=64"
    "seq1m8|1 MiB O_DIRECT sequential write, depth 8 (libaio)|--rw=write --bs=1m --size=2g --direct=1 --ioengine=libaio --iodepth=8"
)

ensure_fio() {
    command -v fio >/dev/null && return 0
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        log "installing fio (apt-get install -y fio)"
        (apt-get install -y fio >/dev/null 2>&1 || { apt-get update >/dev/null 2>&1 && apt-get install -y fio >/dev/null 2>&1; }) || true
    fi
    command -v fio >/dev/null
}

run_fio() {
    [[ "$RUN_FIO" == 1 ]] || return 0
    if ! ensure_fio; then
        echo "fio is not installed (apt-get install -y fio)" >"$RESULTS/fio.skipped"
        return 0
    fi
    mkdir -p "$WORK/fio"
    local entry id label args
    for entry in "${FIO_JOBS[@]}"; do
        IFS='|' read -r id label args <<<"$entry"
        rm -f "$WORK/fio/"*
        log "fio $args"
        # shellcheck disable=SC2086
        fio --name="$id" --directory="$WORK/fio" $args --runtime="$RUNTIME_S" --time_based \
            --output-format=terse --terse-version=3 >"$RESULTS/fio-$id.terse" 2>"$RESULTS/fio-$id.err" || true
    done
    rm -rf "$WORK/fio"
}

# fio_field ID N prints field N of a terse v3 line (48 write KiB/s, 49 write
# IOPS, 65 write clat p50 us, 71 write clat p99 us).
fio_field() {
    local f="$RESULTS/fio-$1.terse"
    [[ -s "$f" ]] || return 0
    cut -d';' -f"$2" "$f" | head -n 1 | sed 's/.*=//'
}

# ---------------------------------------------------------------------------
# etcd: a 3-member cluster on loopback, driven by chunkbench's etcd target

RUN_ETCD="${BENCH_ETCD:-1}"
ETCD_NOTE=""
ETCD_VERSION=""
ETCD_BASE=$((BASE_PORT + 100)) # client ports ETCD_BASE+0..2, peer ports ETCD_BASE+10..12
ETCD_EPS="127.0.0.1:$ETCD_BASE,127.0.0.1:$((ETCD_BASE + 1)),127.0.0.1:$((ETCD_BASE + 2))"
# One key per 4 KiB block: 16 "copysets" x 4 MiB = 16,384 keys (64 MiB of
# values, all in memory on every member), chunkbench/0000000000.. .
ETCD_COMMON="--etcd-endpoints $ETCD_EPS --copysets 1-16 --span 4m --runtime $RUNTIME -o json"
# Each entry: id | label | chunkbench arguments (after ETCD_COMMON).
ETCD_RUNS=(
    "etcd_put|4 KiB put (randwrite)|--rw randwrite --bs 4k --iodepth 64"
    "etcd_get|4 KiB linearizable get (randread)|--rw randread --bs 4k --iodepth 64 --prefill"
)
ETCD_FLAGS="--initial-cluster-token chunkbench --initial-cluster-state new"

ensure_etcd() {
    command -v etcd >/dev/null && return 0
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        log "installing etcd (apt-get install -y etcd-server)"
        (DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server >"$RESULTS/etcd-apt.log" 2>&1 ||
            { apt-get update >>"$RESULTS/etcd-apt.log" 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server >>"$RESULTS/etcd-apt.log" 2>&1; }) || true
        command -v etcd >/dev/null && return 0
        ETCD_NOTE="Skipped: \`etcd\` is not installed and \`apt-get install -y etcd-server\` failed: $(tail -n 1 "$RESULTS/etcd-apt.log" 2>/dev/null)"
        return 1
    fi
    ETCD_NOTE="Skipped: \`etcd\` is not installed, and this run could not install it (needs root and apt-get: \`apt-get install -y etcd-server\`)."
    return 1
}

etcd_ticks() {
    local t=0 pid
    for pid in "${ETCD_PIDS[@]}"; do
        if [[ -r "/proc/$pid/stat" ]]; then
            t=$((t + $(sed 's/^.*) //' "/proc/$pid/stat" | awk '{ print $12 + $13 }')))
        fi
    done
    echo "$t"
}

# stop_etcd stops the members: SIGTERM, then SIGKILL after 30s (a leader
# whose peers are gone tries to hand its leadership over before it exits).
stop_etcd() {
    local pid n alive
    for pid in "${ETCD_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for n in $(seq 1 60); do
        alive=0
        for pid in "${ETCD_PIDS[@]}"; do
            if kill -0 "$pid" 2>/dev/null; then alive=1; fi
        done
        ((alive)) || break
        sleep 0.5
    done
    for pid in "${ETCD_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    wait "${ETCD_PIDS[@]}" 2>/dev/null || true
    ETCD_PIDS=()
}

run_etcd() {
    if [[ "$RUN_ETCD" != 1 ]]; then
        ETCD_NOTE="Skipped (BENCH_ETCD=0)."
        return 0
    fi
    ensure_etcd || return 0
    local i peers=""
    for i in 0 1 2; do
        peers="${peers:+$peers,}e$i=http://127.0.0.1:$((ETCD_BASE + 10 + i))"
    done
    rm -rf "$WORK/etcd"
    mkdir -p "$WORK/etcd"
    log "etcd: 3 members on 127.0.0.1:$ETCD_BASE.. (data in $WORK/etcd)"
    for i in 0 1 2; do
        # shellcheck disable=SC2086
        etcd --name "e$i" --data-dir "$WORK/etcd/e$i" \
            --listen-client-urls "http://127.0.0.1:$((ETCD_BASE + i))" --advertise-client-urls "http://127.0.0.1:$((ETCD_BASE + i))" \
            --listen-peer-urls "http://127.0.0.1:$((ETCD_BASE + 10 + i))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_BASE + 10 + i))" \
            --initial-cluster "$peers" $ETCD_FLAGS >"$RESULTS/etcd-e$i.log" 2>&1 &
        ETCD_PIDS+=($!)
    done
    # Up when a Put through chunkbench's etcd target succeeds (up to 60s).
    local n up=0
    for n in $(seq 1 120); do
        if "$BENCH" --etcd-endpoints "$ETCD_EPS" --rw randwrite --copysets 1 --span 4k --ops 1 --timeout 2s -o json \
            >"$RESULTS/etcd-probe.json" 2>"$RESULTS/etcd-probe.err"; then
            up=1
            break
        fi
        sleep 0.5
    done
    if ((up == 0)); then
        ETCD_NOTE="Skipped: the 3-member etcd did not accept a Put within 60s. Last attempt: $(tail -n 1 "$RESULTS/etcd-probe.err" 2>/dev/null); member e0's log ends with: $(tail -n 1 "$RESULTS/etcd-e0.log" 2>/dev/null)"
        stop_etcd
        rm -rf "$WORK/etcd"
        return 0
    fi
    ETCD_VERSION="$(etcd --version 2>/dev/null | awk 'NR == 1 { print $NF }')"  # awk reads it all: no SIGPIPE under pipefail
    local entry id label args
    for entry in "${ETCD_RUNS[@]}"; do
        IFS='|' read -r id label args <<<"$entry"
        log "chunkbench $ETCD_COMMON $args"
        # shellcheck disable=SC2086 # the argument strings are meant to split
        measured_run "$id" etcd_ticks $ETCD_COMMON $args
    done
    stop_etcd
    rm -rf "$WORK/etcd"
}

# iops_of FILE prints the IOPS of a chunkbench -o json report, nothing if there is none.
iops_of() { if [[ -s "$1" ]]; then json_field "$1" iops; fi; }

# ratio A B prints A/B with one decimal and an x ("6.2x"), "no ratio" when
# either is missing or B is 0.
ratio() { LC_ALL=C awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "no ratio"; else printf "%.1fx", a / b }'; }

# write_etcd_section writes the etcd part of the document to stdout.
write_etcd_section() {
    echo "## etcd"
    echo
    if [[ -n "$ETCD_NOTE" ]]; then
        echo "$ETCD_NOTE"
        echo
        return 0
    fi
    echo "A 3-member etcd $ETCD_VERSION (Debian's etcd-server, default settings) on 127.0.0.1, its data on the"
    echo "filesystem above, measured once the chunkraft cluster was stopped, by chunkbench's etcd target: one key per"
    echo "4 KiB block (16,384 keys, \`chunkbench/0000000000\`..), a write is a Put of the block, a read a"
    echo "linearizable Range of one key (serializable=false); 64 requests in flight, round robin over 2"
    echo "gRPC connections to each member (followers forward to the leader). Same histogram, same columns"
    echo "as the chunkbench table; \"CPU\" is the three etcd members / chunkbench / everything else."
    echo
    echo "| workload | iodepth | IOPS | MB/s | mean | p50 | p99 | p99.9 | max | ops | errors | exit | CPU etcd/bench/other |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    local entry id label args f depth
    for entry in "${ETCD_RUNS[@]}"; do
        IFS='|' read -r id label args <<<"$entry"
        f="$RESULTS/$id.json"
        depth="$(sed -n 's/.*--iodepth \([0-9]*\).*/\1/p' <<<"$args")"
        if [[ -s "$f" ]]; then
            echo "| $label | $depth | $(fmt_num "$(json_field "$f" iops)") | $(fmt_1 "$(json_field "$f" mb_per_s)") | $(fmt_ms "$(json_field "$f" mean)") | $(fmt_ms "$(json_field "$f" p50)") | $(fmt_ms "$(json_field "$f" p99)") | $(fmt_ms "$(json_field "$f" p999)") | $(fmt_ms "$(json_field "$f" max)") | $(fmt_num "$(json_field "$f" ops)") | $(fmt_num "$(json_field "$f" errors)") | $(cat "$RESULTS/$id.rc") | $(tr ' ' '/' <"$RESULTS/$id.cpu") |"
        else
            echo "| $label | $depth | - | - | - | - | - | - | - | - | - | $(cat "$RESULTS/$id.rc" 2>/dev/null || echo -) | - |"
        fi
    done
    echo
    local cr et r met
    cr="$(iops_of "$RESULTS/rw4k64.json")" et="$(iops_of "$RESULTS/etcd_put.json")"
    r="$(ratio "$cr" "$et")"
    met="$(LC_ALL=C awk -v r="$r" 'BEGIN { if (r == "no ratio") print "no result"; else print (r + 0 >= 2.5 ? "met" : "not met") }')"
    echo "**chunkraft vs etcd, writes:** chunkraft's 4 KiB randwrite at iodepth 64 did $(fmt_num "$cr") IOPS, etcd's 4 KiB puts $(fmt_num "$et") per second: **$r** (target >= 2.5x: $met)."
    echo
    cr="$(iops_of "$RESULTS/rr4k64.json")" et="$(iops_of "$RESULTS/etcd_get.json")"
    echo "**chunkraft vs etcd, reads:** chunkraft's 4 KiB randread at iodepth 64 did $(fmt_num "$cr") IOPS, etcd's linearizable 4 KiB gets $(fmt_num "$et") per second: **$(ratio "$cr" "$et")**."
    echo
    local any=0
    for entry in "${ETCD_RUNS[@]}"; do
        IFS='|' read -r id label args <<<"$entry"
        if [[ -s "$RESULTS/$id.err" ]] && grep -qv '^prefill' "$RESULTS/$id.err"; then
            if ((any == 0)); then
                echo "Errors by kind (chunkbench's stderr):"
                echo
                any=1
            fi
            echo "- $label:"
            echo '  ```'
            grep -v '^prefill' "$RESULTS/$id.err" | sed 's/^/  /'
            echo '  ```'
        fi
    done
    if ((any)); then
        echo
    fi
    if grep -q '^prefill: wrote' "$RESULTS/etcd_get.err" 2>/dev/null; then
        echo "Before the get run every key was put once (\`--prefill\`): $(grep '^prefill: wrote' "$RESULTS/etcd_get.err" | sed 's/^prefill: //')."
        echo
    fi
    echo "Commands:"
    echo
    echo '```sh'
    local i peers=""
    for i in 0 1 2; do
        peers="${peers:+$peers,}e$i=http://127.0.0.1:$((ETCD_BASE + 10 + i))"
    done
    for i in 0 1 2; do
        echo "etcd --name e$i --data-dir <dir>/e$i --listen-client-urls http://127.0.0.1:$((ETCD_BASE + i)) --advertise-client-urls http://127.0.0.1:$((ETCD_BASE + i)) --listen-peer-urls http://127.0.0.1:$((ETCD_BASE + 10 + i)) --initial-advertise-peer-urls http://127.0.0.1:$((ETCD_BASE + 10 + i)) --initial-cluster $peers $ETCD_FLAGS &"
    done
    echo "bin/chunkbench --etcd-endpoints $ETCD_EPS --rw randwrite --copysets 1 --span 4k --ops 1 --timeout 2s -o json   # repeated until it succeeds"
    for entry in "${ETCD_RUNS[@]}"; do
        IFS='|' read -r id label args <<<"$entry"
        echo "bin/chunkbench $ETCD_COMMON $args"
    done
    echo '```'
    echo
}

# ---------------------------------------------------------------------------
# cost per op: the counters measured_run kept (see cost_prepare), per op

# cost_row ID LABEL DEPTH ARGS COMMIT prints the table row of run ID (ARGS:
# its chunkbench arguments, for the workload and its read share).
cost_row() {
    local id="$1" label="$2" depth="$3" args="$4" commit="$5" f="$RESULTS/$1.json" ops bs sys="" wshare busy ctxt sectors secs
    if [[ ! -s "$f" || ! -s "$RESULTS/$id.cost" ]]; then
        echo "| $label | $depth | - | - | - | - | - | - | $commit |"
        return 0
    fi
    ops="$(json_field "$f" ops)" bs="$(json_field "$f" bs)"
    [[ ! -s "$RESULTS/$id.syscalls" ]] || sys="$(<"$RESULTS/$id.syscalls")"
    case "$(sed -n 's/.*--rw \([a-z]*\).*/\1/p' <<<"$args")" in
    randwrite | write) wshare=100 ;;
    randrw) wshare=$((100 - $(sed -n 's/.*--rwmixread \([0-9]*\).*/\1/p' <<<"$args" | grep . || echo 70))) ;;
    *) wshare=0 ;;
    esac
    read -r busy ctxt sectors secs <"$RESULTS/$id.cost"
    LC_ALL=C awk -v label="$label" -v depth="$depth" -v ops="$ops" -v bs="$bs" -v sys="$sys" -v ws="$wshare" \
        -v busy="$busy" -v ctxt="$ctxt" -v sectors="$sectors" -v secs="$secs" -v hz="$CLK_TCK" -v commit="$commit" -v dnote="$DISK_NOTE" '
        function num(x) { s = sprintf("%.0f", x); o = ""; while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) } return s o }
        BEGIN {
            if (ops + 0 <= 0) { printf "| %s | %s | %s | %.1f | - | - | - | - | %s |\n", label, depth, num(ops), secs, commit; exit }
            cpu = busy / hz * 1e6 / ops
            cpu = sprintf(cpu >= 100 ? "%.0f" : "%.1f", cpu)
            sc = sys == "" ? "n/a" : sprintf("%.1f", sys / ops)
            cs = ctxt / ops
            cs = sprintf(cs >= 10 ? "%.1f" : "%.2f", cs)
            if (ws == 0) d = "-"
            else if (sectors == "-" || dnote != "") d = "n/a"
            else d = sprintf("%.2f%s", sectors * 512 / (ops * ws / 100 * bs), ws < 100 ? " (" ws "% of ops)" : "")
            printf "| %s | %s | %s | %.1f | %s | %s | %s | %s | %s |\n", label, depth, num(ops), secs, cpu, sc, cs, d, commit
        }'
}

# target_cpu ID prints the machine's CPU per op of run ID in µs ("" when
# it has no cost counters).
target_cpu() {
    local f="$RESULTS/$1.json" busy ctxt sectors secs
    [[ -s "$f" && -s "$RESULTS/$1.cost" ]] || return 0
    read -r busy ctxt sectors secs <"$RESULTS/$1.cost"
    LC_ALL=C awk -v b="$busy" -v hz="$CLK_TCK" -v ops="$(json_field "$f" ops)" 'BEGIN { if (ops + 0 > 0) printf "%.0f", b / hz * 1e6 / ops }'
}

# target_row MEASURE VALUE TARGET OK prints a row of the targets table; OK is
# an awk condition on v (the value), or empty when VALUE is missing.
target_row() {
    local met
    if [[ -z "$2" ]]; then
        echo "| $1 | - | $3 | no result |"
        return 0
    fi
    met="$(LC_ALL=C awk -v v="$2" "BEGIN { if ($4) print \"yes\"; else print \"no\" }")"
    echo "| $1 | $2 | $3 | $met |"
}

# write_targets_section writes the targets of the CPU-per-write work
# (docs/performance.md, "The per-write budget"), each judged from this run.
write_targets_section() {
    echo "## Targets: what a write costs"
    echo
    echo "Each judged within this run, from the tables above and below (the ratios are chunkraft's figure"
    echo "over the reference's; CPU per op is the whole machine's busy time, \"Cost per op\")."
    echo
    echo "| measure | value | target | met |"
    echo "|---|---:|---|---|"
    local cr et r="" c1 c2 cr_p99 mbs fio_kib w disk=""
    cr="$(iops_of "$RESULTS/rw4k64.json")" et="$(iops_of "$RESULTS/etcd_put.json")"
    [[ -z "$cr" || -z "$et" ]] || r="$(LC_ALL=C awk -v a="$cr" -v b="$et" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b }')"
    target_row "4 KiB randwrite, iodepth 64, over etcd's 4 KiB puts" "${r:+${r}x}" ">= 2.5x" "v + 0 >= 2.5"
    cr_p99=""
    [[ ! -s "$RESULTS/rw4k64.json" ]] || cr_p99="$(LC_ALL=C awk -v p="$(json_field "$RESULTS/rw4k64.json" p99)" 'BEGIN { printf "%.1f", p / 1000 }')"
    target_row "4 KiB randwrite, iodepth 64: p99 (ms)" "$cr_p99" "<= 20 ms" "v + 0 <= 20"
    c1="$(target_cpu rw4k64)" c2="$(target_cpu etcd_put)" r=""
    [[ -z "$c1" || -z "$c2" ]] || r="$(LC_ALL=C awk -v a="$c1" -v b="$c2" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b }')"
    target_row "machine CPU per 4 KiB write over etcd's per put (${c1:-?} / ${c2:-?} µs)" "${r:+${r}x}" "<= 0.3x" "v + 0 <= 0.3"
    mbs="" fio_kib="$(fio_field seq1m8 48)" r=""
    [[ ! -s "$RESULTS/sw1m8.json" ]] || mbs="$(json_field "$RESULTS/sw1m8.json" mb_per_s)"
    [[ -z "$mbs" || -z "$fio_kib" ]] || r="$(LC_ALL=C awk -v a="$mbs" -v k="$fio_kib" 'BEGIN { if (k + 0 > 0) printf "%.1f", 100 * a / (k * 1024 / 1e6) }')"
    target_row "1 MiB sequential write, iodepth 8, over fio's 1 MiB O_DIRECT writes" "${r:+${r}%}" ">= 15%" "v + 0 >= 15"
    if [[ -z "$DISK_NOTE" && -s "$RESULTS/sw1m8.json" && -s "$RESULTS/sw1m8.cost" ]]; then
        read -r _ _ w _ <"$RESULTS/sw1m8.cost"
        disk="$(LC_ALL=C awk -v s="$w" -v ops="$(json_field "$RESULTS/sw1m8.json" ops)" -v bs="$(json_field "$RESULTS/sw1m8.json" bs)" 'BEGIN { if (s != "-" && ops * bs > 0) printf "%.2f", s * 512 / (ops * bs) }')"
    fi
    target_row "1 MiB sequential write: disk bytes per client byte" "$disk" "<= 6.5" "v + 0 <= 6.5"
    cr="$(iops_of "$RESULTS/rr4k64.json")" et="$(iops_of "$RESULTS/etcd_get.json")" r=""
    [[ -z "$cr" || -z "$et" ]] || r="$(LC_ALL=C awk -v a="$cr" -v b="$et" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b }')"
    target_row "4 KiB randread, iodepth 64, over etcd's linearizable gets" "${r:+${r}x}" ">= 3x" "v + 0 >= 3"
    r=""
    [[ ! -s "$RESULTS/idle256.cpu" ]] || r="$(cat "$RESULTS/idle256.cpu")"
    target_row "idle, 256 copysets per server (% of a core per server)" "${r:+${r}%}" "<= 5%" "v + 0 <= 5"
    echo
}

# write_cost_section COMMIT DIRTY writes the cost-per-op table to stdout.
write_cost_section() {
    local commit="\`$1\`${2:+ (uncommitted changes)}"
    echo "## Cost per op"
    echo
    echo "Counters of the whole machine over each run of the chunkbench table and of the etcd section, divided by"
    echo "the run's \`ops\` (chunkbench's count of the operations it completed). The window opens right before"
    echo "chunkbench starts and closes right after it exits: chunkbench's start (connecting to the servers) and end"
    echo "(the last ops draining, the report) are in it, a short ramp outside \`ops\`; for the etcd gets it"
    echo "opens when chunkbench logs the end of its prefill (polled every 20 ms: the puts of every key are not"
    echo "in it). Every count"
    echo "is machine-wide: the servers (or etcd members), chunkbench, the kernel's threads and anything else"
    echo "that ran meanwhile, not the servers alone."
    echo
    echo "- **CPU per op**: the busy time of all cores (\`/proc/stat\`: user + nice + system + irq + softirq, in"
    echo "  ticks of $CLK_TCK Hz), in µs."
    echo "- **syscalls per op**: \`raw_syscalls:sys_enter\` counted on every CPU by \`perf stat -e raw_syscalls:sys_enter -a -x,\`,"
    echo "  started before chunkbench with its counters disabled, which its \`--control\` FIFO enables when the"
    echo "  window opens and disables when it closes; SIGINT then stops it. It counts during every measured run"
    echo "  of this document (the tables above and below alike), adding a little to each syscall."
    echo "- **context switches per op**: the \`ctxt\` line of \`/proc/stat\`."
    if [[ -n "$DISK_NOTE" ]]; then
        echo "- **disk bytes per client byte**: $DISK_NOTE."
    else
        echo "- **disk bytes per client byte** (write workloads): bytes written to \`$DISK_DEV\`, the block device"
        echo "  holding the filesystem above (\`/proc/diskstats\`, sectors written x 512), over the bytes the client wrote"
        echo "  (write ops x block size). chunkbench's JSON report has no count of randrw's writes: each op of it is a"
        echo "  write with probability 100 - rwmixread %, so its writes are taken as that share of \`ops\`. What the"
        echo "  kernel still had to write back when the window closed is not counted (it may land in a later window)."
    fi
    echo
    echo "| workload | iodepth | ops | window (s) | CPU per op (µs) | syscalls per op | context switches per op | disk bytes per client byte | commit |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
    local entry id label target args depth
    for entry in "${MATRIX[@]}"; do
        IFS='|' read -r id label target args <<<"$entry"
        depth="$(sed -n 's/.*--iodepth \([0-9]*\).*/\1/p' <<<"$args")"
        cost_row "$id" "$label" "$depth" "$args" "$commit"
    done
    if [[ -z "$ETCD_NOTE" ]]; then
        for entry in "${ETCD_RUNS[@]}"; do
            IFS='|' read -r id label args <<<"$entry"
            depth="$(sed -n 's/.*--iodepth \([0-9]*\).*/\1/p' <<<"$args")"
            cost_row "$id" "etcd: $label" "$depth" "$args" "$commit"
        done
    fi
    echo
    if [[ -n "$ETCD_NOTE" ]]; then
        echo "No etcd rows: etcd was not measured (see its section)."
        echo
    fi
    local note=""
    for entry in "${MATRIX[@]}" "${ETCD_RUNS[@]}"; do
        id="${entry%%|*}"
        if [[ -s "$RESULTS/$id.json" && -s "$RESULTS/$id.perfnote" ]]; then
            note="$(head -n 1 "$RESULTS/$id.perfnote")"
            break
        fi
    done
    if [[ -n "$note" ]]; then
        echo "Syscalls n/a: $note."
        echo
    fi
}

# ---------------------------------------------------------------------------
# the sync service (scripts/sync_bench.sh, its own fresh cluster)

run_sync() {
    [[ "$RUN_SERVICES" == 1 ]] || return 0
    log "sync service: scripts/sync_bench.sh"
    CLUSTER_DIR="$CLUSTER_DIR-sync" BASE_PORT="$BASE_PORT" METRICS_BASE_PORT="$METRICS_BASE_PORT" \
        RUNTIME="$RUNTIME" OUT="$RESULTS/sync" "$ROOT/scripts/sync_bench.sh" >"$RESULTS/sync.txt" 2>"$RESULTS/sync.log" ||
        log "sync_bench.sh failed (see $RESULTS/sync.log)"
}

# write_sync_section writes the sync service's figures to stdout.
write_sync_section() {
    [[ -s "$RESULTS/sync.json" ]] || return 0
    echo "## Sync service, this run"
    echo
    echo "\`scripts/sync_bench.sh\` on a fresh three-server cluster like the one above: 1 GiB prefilled over"
    echo "pool 1's 16 copysets, a kFull export of it to \`file://\` (from \`sync create\` to the last sub-task's"
    echo "SUCCESS as its leader recorded it; three exports, the median), its restore into pool 2 of the same cluster (\`sync restore --to-pool 2\`), and 4 KiB"
    echo "randwrite at iodepth 64 without and with a continuous task on every copyset (caught up first),"
    echo "alternating A B A B A B (the cost is of the sums). The page cache is flushed before each timed phase. MB = 10^6 bytes."
    echo
    python3 - "$RESULTS/sync.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("| measure | value | target | met |")
print("|---|---:|---|---|")
print("| 1 MiB sequential write, iodepth 8 | %.1f MB/s | - | - |" % r["write_1m_mb_per_s"])
print("| kFull export of 1 GiB to file:// (median of 3: %s MB/s) | %.1f MB/s (%.1f s) | >= 200 MB/s | %s |" % (
    ", ".join("%.1f" % x for x in r["export_runs_mb_per_s"]), r["export_mb_per_s"], r["export_seconds"], "yes" if r["export_mb_per_s"] >= 200 else "no"))
print("| restore of that export | %.1f MB/s (%.1f s), %.0f%% of the write rate | >= 70%% of the write rate | %s |" % (r["restore_mb_per_s"], r["restore_seconds"], 100 * r["restore_share_of_write"], "yes" if r["restore_share_of_write"] >= 0.7 else "no"))
print("| 4 KiB randwrite IOPS at iodepth 64 without / with a continuous task | %s / %s: cost %.1f%% | <= 15%% | %s |" % (
    ", ".join("%.0f" % x for x in r["randwrite_without"]), ", ".join("%.0f" % x for x in r["randwrite_with"]),
    100 * r["randwrite_cost"], "yes" if r["randwrite_cost"] <= 0.15 else "no"))
PY
    echo
}

# ---------------------------------------------------------------------------
# the dm service (scripts/dm_bench.sh, its own fresh cluster)

run_dm() {
    [[ "$RUN_SERVICES" == 1 ]] || return 0
    log "dm service: scripts/dm_bench.sh"
    CLUSTER_DIR="$CLUSTER_DIR-dm" BASE_PORT="$BASE_PORT" METRICS_BASE_PORT="$METRICS_BASE_PORT" \
        RUNTIME="$RUNTIME" OUT="$RESULTS/dm" "$ROOT/scripts/dm_bench.sh" >"$RESULTS/dm.txt" 2>"$RESULTS/dm.log" ||
        log "dm_bench.sh failed (see $RESULTS/dm.log)"
}

# write_dm_section writes the dm service's figures to stdout.
write_dm_section() {
    [[ -s "$RESULTS/dm.json" ]] || return 0
    echo "## dm service, this run"
    echo
    echo "\`scripts/dm_bench.sh\` on a fresh three-server cluster like the one above: Load of a kFull export"
    echo "of pool 1 (16 copysets x 32 MiB) by \`sync restore\` and by a dm task (task-mode full), alternating,"
    echo "three pairs; 4 KiB randwrite at iodepth 64 paced at half the rate it reaches alone, without and"
    echo "with a dm task in Sync (a cluster source, relay send interval 500 ms), and the lag of the packets"
    echo "it applied (chunkraft_dm_packet_lag_seconds: first op appended on the source to applied on the"
    echo "target); five cutovers of a 4-copyset pool under that load."
    echo
    python3 - "$RESULTS/dm.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
si = r["send_interval"]
si_s = float(si[:-2]) / 1000 if si.endswith("ms") else float(si[:-1])
print("| measure | value | target | met |")
print("|---|---:|---|---|")
print("| Load: dm / restore of the same export | %s / %s MB/s: %.0f%% | >= 90%% | %s |" % (
    ", ".join("%.1f" % x for x in r["dm_load_mb_per_s"]), ", ".join("%.1f" % x for x in r["restore_mb_per_s"]),
    100 * r["load_share_of_restore"], "yes" if r["load_share_of_restore"] >= 0.9 else "no"))
print("| source randwrite at %d/s: without dm / with dm | %s / %.0f: %.0f%% | >= 80%% | %s |" % (
    r["rate"], ", ".join("%.0f" % x for x in r["randwrite_without"]), r["randwrite_with"], 100 * r["with_share_of_without"],
    "yes" if r["with_share_of_without"] >= 0.8 else "no"))
print("| packet lag in Sync (%d packets): p50 / p99 (bucket bounds), mean | <= %.2f s / <= %.2f s, %.2f s | p99 <= 2 s + %s | %s |" % (
    r["lag_packets"], r["lag_p50_le_s"], r["lag_p99_le_s"], r["lag_mean_s"], si, "yes" if r["lag_p99_le_s"] <= 2 + si_s else "no"))
print("| cutover write downtime (%s ms) | p50 %.0f ms, max %.0f ms | <= 2 s | %s |" % (
    ", ".join("%d" % x for x in r["cutover_downtime_ms"]), r["cutover_p50_ms"], r["cutover_max_ms"], "yes" if r["cutover_max_ms"] <= 2000 else "no"))
PY
    echo
}

# ---------------------------------------------------------------------------
# the document

# The hand-written part of the document: from the marker line to the end of
# the document being replaced, carried over as it is (the marker alone when
# there is none yet).
KEEP_MARK='<!-- bench.sh keeps what follows -->'
keep_handwritten() {
    echo
    if [[ -f "$OUT" ]] && grep -qxF "$KEEP_MARK" "$OUT"; then
        sed -n "\|^$KEEP_MARK\$|,\$p" "$OUT"
    else
        echo "$KEEP_MARK"
    fi
}

write_doc() {
    local commit dirty="" fs now kernel cpu
    if commit="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"; then
        if [[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
            dirty=" (with uncommitted changes)"
        fi
    else
        commit="${BENCH_COMMIT:-unknown}"
    fi
    [[ -z "${BENCH_COMMIT:-}" ]] || commit="${BENCH_COMMIT}"
    fs="$(df -PT "$WORK" 2>/dev/null | awk 'NR == 2 { print $2 " on " $1 " (mounted at " $7 ")" }')"
    now="$(date -u '+%Y-%m-%d %H:%M UTC')"
    kernel="$(uname -sr)"
    cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"

    {
        echo "# chunkraft benchmarks"
        echo
        echo "Everything above the heading \"Hand-written measurements\" is generated by \`scripts/bench.sh\`:"
        echo "do not edit it by hand; rerun the script. That heading and what follows it (the sync and disagg"
        echo "services, run by run, with their commands) are written by hand, and \`scripts/bench.sh\` carries them"
        echo "over unchanged (from the line \`$KEEP_MARK\` on)."
        echo
        echo "| | |"
        echo "|---|---|"
        echo "| date | $now |"
        echo "| commit | \`$commit\`$dirty |"
        echo "| cores (\`nproc\`) | $(nproc) |"
        echo "| CPU | ${cpu:-unknown} |"
        echo "| memory | $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo 2>/dev/null) |"
        echo "| kernel | $kernel |"
        echo "| filesystem measured | $fs |"
        echo "| load average before the cluster started / at the end | $LOAD_START / $(cut -d' ' -f1-3 /proc/loadavg) |"
        echo "| runtime of each run | $RUNTIME |"
        echo
        echo "## chunkbench"
        echo
        echo "Three chunkservers on 127.0.0.1 (one process each, all on the filesystem above), pool 1 with"
        echo "copysets 1-16, three replicas each; 64 MiB of chunk space per copyset. \`ops\` are"
        echo "successful operations; latencies in milliseconds from chunkbench's HDR histogram; MB = 10^6 bytes."
        echo "\`target\` is the project's goal for the workload (\`docs/performance.md\` explains those missed). \"CPU\" is the cores used on average during the run"
        echo "by the three chunkservers / chunkbench / everything else on the machine (which includes"
        echo "the kernel's writeback and journal threads working for the servers)."
        echo
        echo "| workload | iodepth | IOPS | MB/s | mean | p50 | p99 | p99.9 | max | ops | errors | exit | CPU srv/bench/other | target | met |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
        local entry id label target args f depth
        for entry in "${MATRIX[@]}"; do
            IFS='|' read -r id label target args <<<"$entry"
            f="$RESULTS/$id.json"
            depth="$(sed -n 's/.*--iodepth \([0-9]*\).*/\1/p' <<<"$args")"
            if [[ -s "$f" ]]; then
                echo "| $label | $depth | $(fmt_num "$(json_field "$f" iops)") | $(fmt_1 "$(json_field "$f" mb_per_s)") | $(fmt_ms "$(json_field "$f" mean)") | $(fmt_ms "$(json_field "$f" p50)") | $(fmt_ms "$(json_field "$f" p99)") | $(fmt_ms "$(json_field "$f" p999)") | $(fmt_ms "$(json_field "$f" max)") | $(fmt_num "$(json_field "$f" ops)") | $(fmt_num "$(json_field "$f" errors)") | $(cat "$RESULTS/$id.rc") | $(tr ' ' '/' <"$RESULTS/$id.cpu") | ${target:--} | $(met "$id") |"
            else
                echo "| $label | $depth | - | - | - | - | - | - | - | - | - | $(cat "$RESULTS/$id.rc" 2>/dev/null || echo -) | - | ${target:--} | no result |"
            fi
        done
        echo
        local any=0
        for entry in "${MATRIX[@]}"; do
            IFS='|' read -r id label target args <<<"$entry"
            if [[ -s "$RESULTS/$id.err" ]] && grep -qv '^prefill' "$RESULTS/$id.err"; then
                if ((any == 0)); then
                    echo "Errors and failed RPC attempts, by kind (chunkbench's stderr):"
                    echo
                    any=1
                fi
                echo "- $label, iodepth $(sed -n 's/.*--iodepth \([0-9]*\).*/\1/p' <<<"$args"):"
                echo '  ```'
                grep -v '^prefill' "$RESULTS/$id.err" | sed 's/^/  /'
                echo '  ```'
            fi
        done
        local busy
        busy="$(cat "$RESULTS"/*.cpu 2>/dev/null | LC_ALL=C awk '$3 > 0.5 { b = 1 } END { print b + 0 }')"
        if [[ "$busy" == 1 ]]; then
            echo "**Note:** the machine was not idle: everything else used more than half a core during some"
            echo "runs (last figure of the CPU column), competing with the cluster for the cores and the disk;"
            echo "those numbers are lower than an idle machine would give."
            echo
        fi
        if [[ -s "$RESULTS/idle.cpu" ]]; then
            echo "Idle (16 copysets per server, nothing running): $(cat "$RESULTS/idle.cpu")% of one core per chunkserver on average."
            echo
        fi
        if [[ -s "$RESULTS/idle256.cpu" ]]; then
            echo "Idle with 256 copysets per server (\`COPYSETS=1-256 scripts/cluster.sh up\`, pools formatted, measured over ${IDLE256_SECS}s): $(cat "$RESULTS/idle256.cpu")% of one core per chunkserver on average; target <= 5%: $(awk -v x="$(cat "$RESULTS/idle256.cpu")" 'BEGIN { print (x <= 5 ? "met" : "not met") }')."
            echo
        elif [[ -s "$RESULTS/idle256.err" ]]; then
            echo "Idle with 256 copysets per server: not measured ($(cat "$RESULTS/idle256.err"))."
            echo
        fi
        if grep -q '^prefill: wrote' "$RESULTS/layout.err" 2>/dev/null; then
            echo "Before the runs the whole span was laid out once (\`chunkbench $LAYOUT_ARGS\`): $(grep '^prefill: wrote' "$RESULTS/layout.err" | sed 's/^prefill: //'); then the chunk file pools were left to refill."
            echo
        fi

        echo "## Disk ceiling (fio, same filesystem)"
        echo
        if [[ -s "$RESULTS/fio.skipped" ]]; then
            echo "Skipped: $(cat "$RESULTS/fio.skipped")."
        elif [[ "$RUN_FIO" != 1 ]]; then
            echo "Skipped (BENCH_FIO=0)."
        else
            echo "| job | IOPS | MB/s | p50 (ms) | p99 (ms) |"
            echo "|---|---:|---:|---:|---:|"
            local fid flabel fargs kib p50 p99
            for entry in "${FIO_JOBS[@]}"; do
                IFS='|' read -r fid flabel fargs <<<"$entry"
                kib="$(fio_field "$fid" 48)"
                p50="$(fmt_ms "$(fio_field "$fid" 65)")" p99="$(fmt_ms "$(fio_field "$fid" 71)")"
                if [[ "$fargs" == *fdatasync* ]]; then
                    p50="-" p99="-" # fio's terse latencies are of the write alone, not of the sync
                fi
                echo "| $flabel | $(fmt_num "$(fio_field "$fid" 49)") | $(LC_ALL=C awk -v k="$kib" 'BEGIN { if (k == "") print "-"; else printf "%.1f", k * 1024 / 1e6 }') | $p50 | $p99 |"
            done
            echo
            echo "For the fdatasync jobs IOPS counts write+fdatasync pairs done one after the other, so 1/IOPS is the time of one pair."
        fi
        echo

        write_etcd_section

        write_cost_section "$commit" "$dirty"

        write_targets_section

        write_bolt_section

        write_sync_section

        write_dm_section

        if [[ -s "$RESULTS/profile.txt" ]]; then
            echo "## Where the time goes: CPU profile of cs0 during 4 KiB randwrite, iodepth 64"
            echo
            echo "An extra run, not in the table above. Top 15 by cumulative time:"
            echo
            echo '```'
            cat "$RESULTS/profile.head" 2>/dev/null || true
            cat "$RESULTS/profile.txt"
            echo '```'
            echo
            if [[ -s "$RESULTS/profile.split" ]]; then
                echo "The same profile by part of the server (\`scripts/profile_split.sh bin/chunkserver cs0.cpu.pprof\`:"
                echo "each sample goes to the first part that has a function on its stack, in the order the script lists):"
                echo
                cat "$RESULTS/profile.split"
                echo
            fi
        fi

        echo "## Commands"
        echo
        echo '```sh'
        echo "CLUSTER_DIR=\$(mktemp -d) BASE_PORT=$BASE_PORT METRICS_BASE_PORT=$METRICS_BASE_PORT scripts/cluster.sh up"
        echo "bin/chunkbench $COMMON $LAYOUT_ARGS"
        for entry in "${MATRIX[@]}"; do
            IFS='|' read -r id label target args <<<"$entry"
            echo "bin/chunkbench $COMMON $args"
        done
        if [[ "$PROFILE" == 1 ]]; then
            echo "# profile: during another randwrite --iodepth 64 run"
            echo "curl -o cs0.cpu.pprof 'http://127.0.0.1:$METRICS_BASE_PORT/debug/pprof/profile?seconds=$((RUNTIME_S > 4 ? RUNTIME_S - 3 : 1))'"
            echo "go tool pprof -top -cum -nodecount=15 bin/chunkserver cs0.cpu.pprof"
        fi
        echo "scripts/cluster.sh down --clean"
        if [[ "$RUN_BOLT" == 1 ]]; then
            echo "# boltdb: a fresh cluster with raft.log_store: boltdb, the same layout, then the write runs"
            # shellcheck disable=SC2028 # the backslashes are printf's, in the printed command
            echo "printf 'raft:\\n  log_store: boltdb\\n' > boltdb.yaml"
            echo "CHUNKSERVER_CONFIG=boltdb.yaml CLUSTER_DIR=\$(mktemp -d) BASE_PORT=$BASE_PORT METRICS_BASE_PORT=$METRICS_BASE_PORT scripts/cluster.sh up"
            echo "bin/chunkbench $COMMON $LAYOUT_ARGS"
            while IFS='|' read -r id label target args; do
                echo "bin/chunkbench $COMMON $args"
            done < <(bolt_entries)
            echo "scripts/cluster.sh down --clean"
        fi
        if [[ "$RUN_FIO" == 1 && ! -s "$RESULTS/fio.skipped" ]]; then
            for entry in "${FIO_JOBS[@]}"; do
                IFS='|' read -r fid flabel fargs <<<"$entry"
                echo "fio --name=$fid --directory=<dir on the same filesystem> $fargs --runtime=$RUNTIME_S --time_based"
            done
        fi
        if [[ "$RUN_SERVICES" == 1 ]]; then
            echo "CLUSTER_DIR=\$(mktemp -d) BASE_PORT=$BASE_PORT METRICS_BASE_PORT=$METRICS_BASE_PORT RUNTIME=$RUNTIME scripts/sync_bench.sh   # the sync service"
            echo "CLUSTER_DIR=\$(mktemp -d) BASE_PORT=$BASE_PORT METRICS_BASE_PORT=$METRICS_BASE_PORT RUNTIME=$RUNTIME scripts/dm_bench.sh   # the dm service"
        fi
        echo '```'
        keep_handwritten
    } >"$OUT.tmp"
    mv "$OUT.tmp" "$OUT"
}

# ---------------------------------------------------------------------------

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$(dirname "$OUT")"
rm -f "$WORK/nap.fifo"
mkfifo "$WORK/nap.fifo"
DISK_DEV="$(disk_device "$WORK")"
if [[ -z "$DISK_DEV" ]]; then
    DISK_NOTE="n/a: no block device in /proc/diskstats holds the filesystem of $WORK ($(df -PT "$WORK" 2>/dev/null | awk 'NR == 2 { print $2 " on " $1 }'))"
fi
log "cluster in $CLUSTER_DIR (ports $BASE_PORT.., $METRICS_BASE_PORT..)"
"$ROOT/scripts/cluster.sh" up >"$RESULTS/cluster-up.log" 2>&1 || {
    cat "$RESULTS/cluster-up.log" >&2
    die "cluster did not come up"
}
[[ -x "$BENCH" ]] || die "$BENCH is missing (make build)"
wait_pool
log "measuring idle CPU for ${RUNTIME_S}s"
measure_idle idle "$RUNTIME_S"
layout
# The layout created more chunks than the pools hold; the pools refill in
# the background (16 MiB of zeros and an fsync per file) and would compete
# with the first measured runs.
wait_pool
run_matrix
run_profile
"$ROOT/scripts/cluster.sh" down --clean >/dev/null 2>&1 || true
idle_256
run_boltdb
run_fio
run_etcd
run_sync
run_dm
write_doc
log "wrote $OUT"

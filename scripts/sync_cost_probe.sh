#!/usr/bin/env bash
# Probes what a continuous sync task costs the chunk path, per write: on a
# fresh local 3-server cluster (scripts/cluster.sh, pool 1, copysets 1-16,
# 1 GiB prefilled), PAIRS pairs of 10 s 4 KiB randwrite runs at iodepth 64,
# without (A) and then with (B) a continuous task on every copyset (created
# just before its B run, deleted after it). Before each run the servers'
# chunk file pools are refilled and the page cache flushed. Per run it
# prints the IOPS, the servers' minor page faults and CPU per write
# (/proc/<pid>/stat, summed over the three), and their collections, heap in
# use and heap released at the end (/metrics). docs/benchmarks.md (Sync
# service, "The restore is CPU-bound; its client builds no chunk images;
# where a continuous task's cost goes") reads these figures. With GCTRACE=1 the servers run
# with GODEBUG=gctrace=1 and their logs are kept as $OUT-cs<i>.log.
#
# Environment: CLUSTER_DIR (default /tmp/chunkraft-costprobe), BASE_PORT
# (8450), METRICS_BASE_PORT (9450), PAIRS (2), OUT (/tmp/chunkraft-costprobe),
# CHUNKSERVER_CONFIG (default: chunk_file_pool: 80). The cluster and the
# exports are deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export CLUSTER_DIR=${CLUSTER_DIR:-/tmp/chunkraft-costprobe}
export BASE_PORT=${BASE_PORT:-8450}
export METRICS_BASE_PORT=${METRICS_BASE_PORT:-9450}
PAIRS=${PAIRS:-2}
OUT=${OUT:-/tmp/chunkraft-costprobe}
if [ -z "${CHUNKSERVER_CONFIG:-}" ]; then
    export CHUNKSERVER_CONFIG=$OUT-config.yaml
    echo "chunk_file_pool: 80" >"$CHUNKSERVER_CONFIG"
fi
[ "${GCTRACE:-0}" = 1 ] && export GODEBUG=gctrace=1
S=127.0.0.1:$BASE_PORT,127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2))
CTL=(bin/chunkctl --servers "$S" --timeout 60s)
BENCH=(bin/chunkbench --servers "$S" --pool 1 --copysets 1-16 --span 64m)
METRICS=("$METRICS_BASE_PORT" $((METRICS_BASE_PORT + 1)) $((METRICS_BASE_PORT + 2)))
EXPORT=$CLUSTER_DIR-export

[ -x bin/chunkctl ] || make build >/dev/null
scripts/cluster.sh down --clean >/dev/null 2>&1 || true
cleanup() {
    local f
    if [ "${GCTRACE:-0}" = 1 ]; then
        for f in "$CLUSTER_DIR"/cs*.log; do [ -e "$f" ] && cp "$f" "$OUT-$(basename "$f")"; done
    fi
    scripts/cluster.sh down --clean >/dev/null 2>&1 || true
    rm -rf "$EXPORT"
}
trap cleanup EXIT
scripts/cluster.sh up >/dev/null
"${BENCH[@]}" --rw read --bs 1m --iodepth 8 --ops 1 --prefill >/dev/null

# proc: minor faults and CPU ticks of the three servers, summed.
proc() {
    local f
    for f in "$CLUSTER_DIR"/cs*.pid; do awk '{print $10, $14 + $15}' "/proc/$(cat "$f")/stat"; done |
        awk '{ f += $1; c += $2 } END { print f, c }'
}
# metrics: collections, heap in use and heap released (MB), summed.
metrics() {
    local m
    for m in "${METRICS[@]}"; do curl -s "127.0.0.1:$m/metrics"; done | awk '
        /^go_gc_duration_seconds_count / { g += $2 }
        /^go_memstats_heap_inuse_bytes / { u += $2 }
        /^go_memstats_heap_released_bytes / { r += $2 }
        END { printf "%d %d %d\n", g, u / 1e6, r / 1e6 }'
}
. scripts/lib/settle.sh
run() {
    local f0 c0 f1 c1 g0 g1 inuse released iops
    settle
    read -r f0 c0 <<<"$(proc)"
    read -r g0 _ _ <<<"$(metrics)"
    iops=$("${BENCH[@]}" --rw randwrite --bs 4k --iodepth 64 --runtime 10s -o json |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["iops"])')
    read -r f1 c1 <<<"$(proc)"
    read -r g1 inuse released <<<"$(metrics)"
    python3 -c "
i = $iops * 10
print('%s  IOPS %7.0f  faults/write %5.2f  CPU ms/write %.3f  collections %d  heap in use %d MB  released %d MB' % (
    '$1', $iops, ($f1 - $f0) / i, ($c1 - $c0) * 10 / i, $g1 - $g0, $inuse, $released))"
}
for p in $(seq 1 "$PAIRS"); do
    run A
    "${CTL[@]}" sync create --pool 1 --name "probe$p" --mode continuous --dest "file://$EXPORT-$p" --wait 10m >/dev/null
    run B
    "${CTL[@]}" sync delete --pool 1 --name "probe$p" >/dev/null
    rm -rf "$EXPORT-$p"
done

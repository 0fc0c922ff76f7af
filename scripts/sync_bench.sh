#!/usr/bin/env bash
# Measures the sync service on a fresh local 3-server cluster (scripts/cluster.sh,
# pool 1, copysets 1-16), the figures docs/benchmarks.md records for it:
#
#   1. the cluster's 1 MiB write rate (chunkbench --rw write --bs 1m --iodepth 8);
#   2. a kFull export of 1 GiB (64 MiB per copyset, prefilled) to file://: the
#      time from sync create to the last sub-task's SUCCESS (the lastUpdateTime
#      its leader recorded with the finishing packet, same clock), MB/s of the
#      export's bytes; three exports, the median reported (the disk's rate
#      varies from run to run), all three in the JSON;
#   3. its restore (chunkctl sync restore --to-pool 2, into copysets 1-16 of pool 2
#      of the same cluster): the restore's own MB/s, as a share of (1), which is
#      measured twice, first and again right after the restore, and reported as
#      the mean of the two (the disk's rate drifts over a run);
#   4. the cost of a continuous task on every copyset to 4 KiB randwrite at
#      iodepth 64: alternating runs without and with the task (caught up before
#      its run), A B A B A B (two pairs of 10 s runs differ by up to 20%
#      between the two A runs alone: docs/benchmarks.md, "The Go collector's
#      target, 400 → 100"), the cost of the sums.
#
# The script waits for an export with `sync create --wait` (one process
# polling in itself): a poll per 0.2 s of `sync status` piped to python3
# takes about a quarter of a 2-core machine's CPU during the export
# (docs/benchmarks.md, "The harness's own cost, a pool sized for the
# restore, a lighter restore client").
#
# Before each timed phase the servers' chunk file pools are refilled (they
# format only once no chunk has been created for 10 s) and the page cache
# is flushed (sync), so that a phase pays for its own writes and not for the
# refill or writeback of the one before.
#
#   scripts/sync_bench.sh            one run; prints a table and writes JSON to $OUT.json
#
# The servers' chunk file pool is sized for the restore, as docs/operations.md
# (Disk) tells operators to before a burst of chunk creations: the restore
# creates 64 chunks per server, so POOL_FILES (default 80) files are kept
# formatted instead of the default 16 (16 MiB each; the rest of a restore's
# chunks would start sparse, and on a virtual disk a first write of a block
# is slower than an overwrite: docs/benchmarks.md, "What bounds the
# restore"). The 1 MiB write rate, an overwrite, creates no
# chunk, so the pool's size does not change it. POOL_FILES=16 measures the
# default. A CHUNKSERVER_CONFIG given is used as is.
#
# Environment: CLUSTER_DIR (default /tmp/chunkraft-syncbench), BASE_PORT (8400),
# METRICS_BASE_PORT (9400), EXPORT_DIR (default $CLUSTER_DIR-export), RUNTIME (10s),
# OUT (default /tmp/chunkraft-syncbench), POOL_FILES (80), CHUNKSERVER_CONFIG. The cluster and the export are deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export CLUSTER_DIR=${CLUSTER_DIR:-/tmp/chunkraft-syncbench}
export BASE_PORT=${BASE_PORT:-8400}
export METRICS_BASE_PORT=${METRICS_BASE_PORT:-9400}
EXPORT_DIR=${EXPORT_DIR:-$CLUSTER_DIR-export}
RUNTIME=${RUNTIME:-10s}
OUT=${OUT:-/tmp/chunkraft-syncbench}
POOL_FILES=${POOL_FILES:-80}
if [ -z "${CHUNKSERVER_CONFIG:-}" ]; then
    export CHUNKSERVER_CONFIG=$OUT-config.yaml
    echo "chunk_file_pool: $POOL_FILES" >"$CHUNKSERVER_CONFIG"
fi
S=127.0.0.1:$BASE_PORT,127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2))
CTL=(bin/chunkctl --servers "$S" --timeout 60s)
BENCH=(bin/chunkbench --servers "$S" --pool 1 --copysets 1-16 --span 64m)

[ -x bin/chunkctl ] || make build >/dev/null
scripts/cluster.sh down --clean >/dev/null 2>&1 || true
rm -rf "$EXPORT_DIR"
# On a failure the servers' logs are kept as $OUT-cs<i>.log before the
# cluster is deleted.
cleanup() {
    local rc=$? f
    if [ "$rc" != 0 ]; then
        for f in "$CLUSTER_DIR"/cs*.log; do [ -e "$f" ] && cp "$f" "$OUT-$(basename "$f")"; done
        echo "sync_bench: failed (exit $rc); the servers' logs are in $OUT-cs*.log" >&2
    fi
    scripts/cluster.sh down --clean >/dev/null 2>&1 || true
    rm -rf "$EXPORT_DIR"
}
trap cleanup EXIT
scripts/cluster.sh up >/dev/null

now() { date +%s.%N; }

# zeroed: the files the three servers' chunk file pools have written full
# of zeros so far (chunkraft_chunkfilepool_zeroed_files_total, summed).
zeroed() {
    local m
    for m in $(seq "$METRICS_BASE_PORT" $((METRICS_BASE_PORT + 2))); do
        curl -s "127.0.0.1:$m/metrics"
    done | awk '/^chunkraft_chunkfilepool_zeroed_files_total / { n += $2 } END { print n + 0 }'
}

. scripts/lib/settle.sh
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "prefill: 1 GiB over 16 copysets" >&2
"${BENCH[@]}" --rw read --bs 1m --iodepth 8 --ops 1 --prefill >/dev/null
settle
write_mb=$("${BENCH[@]}" --rw write --bs 1m --iodepth 8 --runtime "$RUNTIME" -o json | json 'd["mb_per_s"]')

# export_once N: one kFull export to $EXPORT_DIR (emptied first) as task N;
# prints its MB/s and seconds.
export_once() {
    rm -rf "$EXPORT_DIR"
    settle
    local t0 t1 bytes
    t0=$(now)
    "${CTL[@]}" sync create --pool 1 --name "$1" --mode full --dest "file://$EXPORT_DIR" --wait 10m >/dev/null
    t1=$("${CTL[@]}" -o json sync status | python3 -c "
import json, re, sys
print(max(int(re.search(r'lastUpdateTime=(\d+)', s['info']).group(1)) for s in json.load(sys.stdin)) / 1000)")
    bytes=$(du -sb "$EXPORT_DIR" | cut -f1)
    "${CTL[@]}" sync delete --pool 1 --name "$1" >/dev/null
    python3 -c "print($bytes / 1e6 / ($t1 - $t0), $t1 - $t0, $bytes)"
}
echo "export: kFull to file://$EXPORT_DIR, three times" >&2
read -r e1 s1 export_bytes <<<"$(export_once bench1)"
read -r e2 s2 _ <<<"$(export_once bench2)"
read -r e3 s3 _ <<<"$(export_once bench3)"
echo "restore: into pool 2" >&2
"${CTL[@]}" copyset create --pool 2 --copyset 1-16 --peers "$S" >/dev/null
for cs in $(seq 1 16); do "${CTL[@]}" leader get --pool 2 --copyset "$cs" >/dev/null; done
settle
z0=$(zeroed)
restore_json=$("${CTL[@]}" -o json sync restore --from "file://$EXPORT_DIR" --pool 1 --to-pool 2 --progress never)
z1=$(zeroed)
restore_mb=$(echo "$restore_json" | json 'd["mbPerSecond"]')
restore_s=$(echo "$restore_json" | json 'd["elapsedSeconds"]')
# The reference again, right after the restore: the disk's rate drifts over
# a run, and the restore is judged against the mean of the two.
settle
write_mb_after=$("${BENCH[@]}" --rw write --bs 1m --iodepth 8 --runtime "$RUNTIME" -o json | json 'd["mb_per_s"]')

echo "continuous task: randwrite 4k iodepth 64, without (A) and with (B)" >&2
randwrite() { settle; "${BENCH[@]}" --rw randwrite --bs 4k --iodepth 64 --runtime "$RUNTIME" -o json | json 'd["iops"]'; }
without=() with=()
for i in 1 2 3; do
    without+=("$(randwrite)")
    "${CTL[@]}" sync create --pool 1 --name "tail$i" --mode continuous --dest "file://$EXPORT_DIR-tail$i" --wait 10m >/dev/null
    with+=("$(randwrite)")
    "${CTL[@]}" sync delete --pool 1 --name "tail$i" >/dev/null
    rm -rf "$EXPORT_DIR-tail$i"
done
wo=$(IFS=,; echo "${without[*]}") wi=$(IFS=,; echo "${with[*]}")

python3 - "$OUT.json" <<PY
import json, sys
runs = sorted([($e1, $s1), ($e2, $s2), ($e3, $s3)])
ref = ($write_mb + $write_mb_after) / 2
r = dict(config=open("$CHUNKSERVER_CONFIG").read(), write_1m_mb_per_s=ref, write_1m_runs_mb_per_s=[$write_mb, $write_mb_after], export_bytes=$export_bytes, export_runs_mb_per_s=[$e1, $e2, $e3],
         export_seconds=runs[1][1], export_mb_per_s=runs[1][0], restore_seconds=$restore_s, restore_mb_per_s=$restore_mb,
         restore_share_of_write=$restore_mb / ref, restore_pool_files_zeroed=$z1 - $z0,
         randwrite_without=[$wo], randwrite_with=[$wi],
         randwrite_cost=1 - sum([$wi]) / sum([$wo]))
json.dump(r, open(sys.argv[1], "w"), indent=1)
print("servers' config:                 %s" % " ".join(r["config"].split()))
print("1 MiB write, iodepth 8:          %8.1f MB/s  (mean of %s: first and right after the restore)" % (r["write_1m_mb_per_s"], ", ".join("%.1f" % x for x in r["write_1m_runs_mb_per_s"])))
print("kFull export of 1 GiB (file://): %8.1f MB/s  (median of %s; %d bytes in %.1f s)" % (r["export_mb_per_s"], ", ".join("%.1f" % x for x in r["export_runs_mb_per_s"]), r["export_bytes"], r["export_seconds"]))
print("restore of it (pool 2):          %8.1f MB/s  (%.0f%% of the write rate, %.1f s; %d pool files zeroed meanwhile)" % (r["restore_mb_per_s"], 100 * r["restore_share_of_write"], r["restore_seconds"], r["restore_pool_files_zeroed"]))
print("4k randwrite iodepth 64, IOPS:   without %s, with a continuous task %s: cost %.1f%%" % (r["randwrite_without"], r["randwrite_with"], 100 * r["randwrite_cost"]))
PY

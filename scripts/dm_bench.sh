#!/usr/bin/env bash
# Measures the dm service on a fresh local 3-server cluster (scripts/cluster.sh,
# pool 1, copysets 1-16), the figures docs/benchmarks.md records for it:
#
#   1. Load against restore: a kFull export of pool 1 (SPAN per copyset,
#      prefilled) to file://, then, alternating, `chunkctl sync restore` of it
#      into a new pool and a dm task (task-mode full, the export as source)
#      into another, PAIRS times; each rate is the pool's bytes over the time
#      from the command to the end (the restore's own elapsed time; for dm,
#      from start-task until it is Finished: `chunkctl dm start-task --wait`,
#      which asks for the task's status every 0.2 s).
#   2. Sync under load: the 4 KiB randwrite rate pool 1 reaches alone at
#      iodepth 64 (R); then chunkbench --rate R/2 on pool 1 without dm (A), with
#      a dm task migrating pool 1 into pool 2 of the same cluster (a cluster
#      source: the pool exports itself to a relay) caught up in Sync (B), and
#      without again once the task is stopped (A); the lag of the packets
#      applied during B, from the servers' chunkraft_dm_packet_lag_seconds
#      (each packet's oldest op, source append to target apply): the bucket
#      bounds of p50 and p99, and the mean.
#   3. Cutover: CUTOVERS times, a new source pool (copysets 1-4, 16 MiB each,
#      prefilled) migrated into a new target pool, in Sync, with chunkbench
#      --rate R/2 writing to it; `chunkctl dm cutover` then reports the write
#      downtime: p50 and max.
#
#   scripts/dm_bench.sh            one run; prints a table and writes JSON to $OUT.json
#
# Environment: PHASES (default load,sync,cutover: which of 1-3 to run), CLUSTER_DIR (default /tmp/chunkraft-dmbench), BASE_PORT (8400),
# METRICS_BASE_PORT (9400), RUNTIME (10s), SEND_INTERVAL (500ms: the relay tasks'
# source.send-interval), SPAN (32m: pool 1 holds 16 x SPAN),
# PAIRS (3), CUTOVERS (5), OUT (default /tmp/chunkraft-dmbench), POOL_FILES (80:
# the chunk file pool, sized for the restores, as scripts/sync_bench.sh). The
# cluster and the exports are deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export CLUSTER_DIR=${CLUSTER_DIR:-/tmp/chunkraft-dmbench}
export BASE_PORT=${BASE_PORT:-8400}
export METRICS_BASE_PORT=${METRICS_BASE_PORT:-9400}
RUNTIME=${RUNTIME:-10s}
SPAN=${SPAN:-32m}
PAIRS=${PAIRS:-3}
CUTOVERS=${CUTOVERS:-5}
OUT=${OUT:-/tmp/chunkraft-dmbench}
PHASES=${PHASES:-load,sync,cutover}
SEND_INTERVAL=${SEND_INTERVAL:-500ms}
phase() { [[ ",$PHASES," == *",$1,"* ]]; }
POOL_FILES=${POOL_FILES:-80}
WORK=$CLUSTER_DIR-work
export CHUNKSERVER_CONFIG=$OUT-config.yaml
echo "chunk_file_pool: $POOL_FILES" >"$CHUNKSERVER_CONFIG"
S=127.0.0.1:$BASE_PORT,127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2))
SEEDS="'127.0.0.1:$BASE_PORT', '127.0.0.1:$((BASE_PORT + 1))', '127.0.0.1:$((BASE_PORT + 2))'"
CTL=(bin/chunkctl --servers "$S" --timeout 60s)
BENCH=(bin/chunkbench --servers "$S")

[ -x bin/chunkctl ] || make build >/dev/null
scripts/cluster.sh down --clean >/dev/null 2>&1 || true
rm -rf "$WORK"
mkdir -p "$WORK"
BG=
cleanup() {
    local rc=$? f
    [ -n "$BG" ] && kill "$BG" 2>/dev/null || true
    if [ "$rc" != 0 ]; then
        for f in "$CLUSTER_DIR"/cs*.log; do [ -e "$f" ] && cp "$f" "$OUT-$(basename "$f")"; done
        echo "dm_bench: failed (exit $rc); the servers' logs are in $OUT-cs*.log" >&2
    fi
    scripts/cluster.sh down --clean >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
scripts/cluster.sh up >/dev/null
. scripts/lib/settle.sh
now() { date +%s.%N; }
# retry: a control call refused while a copyset elects a leader (the heavy
# phases cost a few elections on a 2-core machine) is made again.
retry() {
    local i
    for i in 1 2 3 4 5; do
        "$@" >/dev/null && return 0
        sleep 2
    done
    "$@"
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
bytes_of() { python3 -c "import re; m=re.fullmatch(r'(\d+)([kmg]?)', '$1'.lower()); print(int(m.group(1)) * {'':1,'k':1<<10,'m':1<<20,'g':1<<30}[m.group(2)] * $2)"; }
POOL_BYTES=$(bytes_of "$SPAN" 16)

# pool_create P COPYSETS: the copysets of pool P on the three servers, with leaders.
pool_create() {
    "${CTL[@]}" copyset create --pool "$1" --copyset "$2" --peers "$S" >/dev/null
    local cs
    for cs in $(seq 1 "${2#1-}"); do "${CTL[@]}" leader get --pool "$1" --copyset "$cs" >/dev/null; done
}

# dm_start FILE: starts the task of task file FILE and waits until it is
# Finished (task-mode full) or caught up in Sync (all), `chunkctl dm
# start-task --wait` asking for its status every 0.2 s; a start refused (a
# copyset electing a leader) is made again, a wait that fails is not.
dm_start() {
    local i out
    for i in 1 2 3 4 5; do
        out=$("${CTL[@]}" dm start-task --wait=10m "$1" 2>&1) && return 0
        case $out in *"task started, but"*) break ;; esac
        sleep 2
    done
    echo "dm_bench: start-task $1: $out" >&2
    return 1
}

echo "prefill: pool 1, 16 x $SPAN" >&2
"${BENCH[@]}" --pool 1 --copysets 1-16 --span "$SPAN" --rw read --bs 1m --iodepth 8 --ops 1 --prefill >/dev/null
EXPORT=$WORK/export
settle
"${CTL[@]}" sync create --pool 1 --name full --mode full --dest "file://$EXPORT" --wait 10m >/dev/null
"${CTL[@]}" sync delete --pool 1 --name full >/dev/null

echo "Load: restore and dm alternating, $PAIRS pairs" >&2
restores=() loads=()
pool=10
phase load || PAIRS=0
for i in $(seq 1 "$PAIRS"); do
    pool=$((pool + 1))
    pool_create "$pool" 1-16
    settle
    s=$("${CTL[@]}" -o json sync restore --from "file://$EXPORT" --pool 1 --to-pool "$pool" --progress never | json 'd["elapsedSeconds"]')
    restores+=("$(python3 -c "print($POOL_BYTES / 1e6 / $s)")")
    pool=$((pool + 1))
    pool_create "$pool" 1-16
    printf 'name: load%d\ntask-mode: full\nsource:\n  pool: 1\n  export: file://%s\ntarget-pool: %d\n' "$i" "$EXPORT" "$pool" >"$WORK/load$i.yaml"
    settle
    t0=$(now)
    dm_start "$WORK/load$i.yaml"
    t1=$(now)
    loads+=("$(python3 -c "print($POOL_BYTES / 1e6 / ($t1 - $t0))")")
    retry "${CTL[@]}" dm stop-task "load$i"
    echo "  pair $i: restore ${restores[-1]} MB/s, dm Load ${loads[-1]} MB/s" >&2
done

R=0 HALF=0 a1=0 a2=0 b=0
: >"$WORK/lag0"
: >"$WORK/lag1"
if phase sync || phase cutover; then
    randwrite() { "${BENCH[@]}" --pool 1 --copysets 1-16 --span "$SPAN" --rw randwrite --bs 4k --iodepth 64 --runtime "$RUNTIME" -o json "$@"; }
    settle
    R=$(randwrite | json 'd["iops"]')
    HALF=$(python3 -c "print(round($R / 2))")
fi
if phase sync; then
    echo "Sync under load" >&2
    settle
    a1=$(randwrite --rate "$HALF" | json 'd["iops"]')
    pool_create 2 1-16
    printf 'name: mig\ntask-mode: all\nsource:\n  cluster: [%s]\n  pool: 1\n  relay: file://%s\n  send-interval: %s\ntarget-pool: 2\n' "$SEEDS" "$WORK/relay" "$SEND_INTERVAL" >"$WORK/mig.yaml"
    dm_start "$WORK/mig.yaml"
    settle
    # lag_hist: the servers' chunkraft_dm_packet_lag_seconds of task mig, the
    # buckets summed over the three: "le count" lines, then "sum S".
    lag_hist() {
        for p in $(seq "$METRICS_BASE_PORT" $((METRICS_BASE_PORT + 2))); do curl -s "127.0.0.1:$p/metrics"; done |
            awk 'index($0, "chunkraft_dm_packet_lag_seconds_bucket{task=\"mig\"") == 1 { match($0, /le="[^"]*"/); le = substr($0, RSTART + 4, RLENGTH - 5); n[le] += $2 }
                 index($0, "chunkraft_dm_packet_lag_seconds_sum{task=\"mig\"}") == 1 { sum += $2 }
                 END { for (le in n) print le, n[le]; print "sum", sum + 0 }'
    }
    lag_hist >"$WORK/lag0"
    b=$(randwrite --rate "$HALF" | json 'd["iops"]')
    lag_hist >"$WORK/lag1"
    retry "${CTL[@]}" dm stop-task mig
    settle
    a2=$(randwrite --rate "$HALF" | json 'd["iops"]')
fi

echo "Cutover under load, $CUTOVERS times" >&2
downs=()
phase cutover || CUTOVERS=0
for i in $(seq 1 "$CUTOVERS"); do
    src=$((30 + i)) dst=$((40 + i))
    pool_create "$src" 1-4
    pool_create "$dst" 1-4
    "${BENCH[@]}" --pool "$src" --copysets 1-4 --span 16m --rw read --bs 1m --iodepth 8 --ops 1 --prefill >/dev/null
    printf 'name: cut%d\ntask-mode: all\nsource:\n  cluster: [%s]\n  pool: %d\n  relay: file://%s\n  send-interval: %s\ntarget-pool: %d\n' "$i" "$SEEDS" "$src" "$WORK/relay$i" "$SEND_INTERVAL" "$dst" >"$WORK/cut$i.yaml"
    dm_start "$WORK/cut$i.yaml"
    "${BENCH[@]}" --pool "$src" --copysets 1-4 --span 16m --rw randwrite --bs 4k --iodepth 64 --runtime 120s --rate "$HALF" >/dev/null 2>&1 &
    BG=$!
    sleep 3
    d=$("${CTL[@]}" -o json dm cutover "cut$i" | json 'd["downtime_ms"]')
    kill "$BG" 2>/dev/null || true
    wait "$BG" 2>/dev/null || true
    BG=
    retry "${CTL[@]}" dm stop-task "cut$i"
    downs+=("$d")
    echo "  cutover $i: write downtime $d ms" >&2
done

python3 - "$OUT.json" "$WORK/lag0" "$WORK/lag1" "$SEND_INTERVAL" <<PY
import json, statistics, sys
def hist(path):
    h = {}
    for line in open(path):
        k, v = line.split()
        h[k] = float(v)
    return h
h0, h1 = hist(sys.argv[2]), hist(sys.argv[3])
bounds = sorted((float(k), h1[k] - h0.get(k, 0)) for k in h1 if k != "sum")
packets = bounds[-1][1] if bounds else 0
def pct(p):
    for le, n in bounds:
        if n >= p * packets:
            return le
    return float("inf")
restores, loads = [$(IFS=,; echo "${restores[*]}")], [$(IFS=,; echo "${loads[*]}")]
downs = sorted([$(IFS=,; echo "${downs[*]}")])
r = dict(config=open("$CHUNKSERVER_CONFIG").read(), send_interval=sys.argv[4], pool_bytes=$POOL_BYTES, restore_mb_per_s=restores, dm_load_mb_per_s=loads,
         load_share_of_restore=sum(loads) / sum(restores) if restores else 0,
         randwrite_alone_iops=$R, rate=$HALF, randwrite_without=[$a1, $a2], randwrite_with=$b,
         with_share_of_without=$b / (($a1 + $a2) / 2) if $a1 + $a2 else 0, lag_packets=packets,
         lag_p50_le_s=pct(0.5), lag_p99_le_s=pct(0.99), lag_mean_s=(h1.get("sum", 0) - h0.get("sum", 0)) / packets if packets else 0.0,
         cutover_downtime_ms=downs, cutover_p50_ms=statistics.median(downs) if downs else 0, cutover_max_ms=max(downs, default=0))
json.dump(r, open(sys.argv[1], "w"), indent=1)
print("servers' config:                 %s" % " ".join(r["config"].split()))
print("Load of %d MiB, MB/s:           restore %s; dm %s: dm at %.0f%% of restore" % (r["pool_bytes"] >> 20,
      ", ".join("%.1f" % x for x in restores), ", ".join("%.1f" % x for x in loads), 100 * r["load_share_of_restore"]))
print("4k randwrite iodepth 64 alone:   %.0f IOPS; at --rate %d: without dm %.0f, %.0f; with dm in Sync %.0f (%.0f%%)" % (
      r["randwrite_alone_iops"], r["rate"], $a1, $a2, $b, 100 * r["with_share_of_without"]))
print("dm packet lag in Sync (%d packets, send interval %s): p50 <= %.2f s, p99 <= %.2f s, mean %.2f s" % (packets, r["send_interval"], r["lag_p50_le_s"], r["lag_p99_le_s"], r["lag_mean_s"]))
print("cutover write downtime, ms:      %s: p50 %.0f, max %.0f" % (", ".join("%d" % x for x in downs), r["cutover_p50_ms"], r["cutover_max_ms"]))
PY

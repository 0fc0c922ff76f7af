#!/usr/bin/env bash
# Measures disagg read views on a fresh local 3-server cluster (scripts/cluster.sh,
# pool 1, copysets 1-16, 1 GiB prefilled: 64 MiB per copyset), the figures
# docs/benchmarks.md records for them:
#
#   1. 4 KiB randwrite at iodepth 64 over the prefilled span without a view (A) and
#      with a live view on every copyset (B: the views are established just before
#      the run, so the first overwrite of each block saves its pre-image), A B A B;
#      the views of each B run are cancelled after it;
#   2. FetchDisaggPages of a 1 GiB view: a view on every copyset, then
#      `chunkctl disagg view fetch --verify` of the 16 segments at once; MB/s of the
#      pages' bytes over the wall time of the fetches.
#
#   scripts/disagg_bench.sh          one run; prints a table and writes JSON to $OUT.json
#
# Environment: CLUSTER_DIR (default /tmp/chunkraft-disaggbench), BASE_PORT (8400),
# METRICS_BASE_PORT (9400), RUNTIME (10s), OUT (default /tmp/chunkraft-disaggbench).
# The cluster is deleted at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
export CLUSTER_DIR=${CLUSTER_DIR:-/tmp/chunkraft-disaggbench}
export BASE_PORT=${BASE_PORT:-8400}
export METRICS_BASE_PORT=${METRICS_BASE_PORT:-9400}
RUNTIME=${RUNTIME:-10s}
OUT=${OUT:-/tmp/chunkraft-disaggbench}
S=127.0.0.1:$BASE_PORT,127.0.0.1:$((BASE_PORT + 1)),127.0.0.1:$((BASE_PORT + 2))
CTL=(bin/chunkctl --servers "$S" --timeout 60s)
BENCH=(bin/chunkbench --servers "$S" --pool 1 --copysets 1-16 --span 64m)

[ -x bin/chunkctl ] || make build >/dev/null
scripts/cluster.sh down --clean >/dev/null 2>&1 || true
trap 'scripts/cluster.sh down --clean >/dev/null 2>&1 || true' EXIT
scripts/cluster.sh up >/dev/null

now() { date +%s.%N; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

echo "prefill: 1 GiB over 16 copysets" >&2
"${BENCH[@]}" --rw read --bs 1m --iodepth 8 --ops 1 --prefill >/dev/null

# views TASK: a view of every chunk of each copyset, as task TASK.
views() {
    for cs in $(seq 1 16); do
        "${CTL[@]}" disagg view establish --pool 1 --copyset "$cs" --task "$1" --timeout 10m >/dev/null
    done
}
randwrite() { sync; "${BENCH[@]}" --rw randwrite --bs 4k --iodepth 64 --runtime "$RUNTIME" -o json | json 'd["iops"]'; }

echo "randwrite 4k iodepth 64: without (A) and with (B) a live view" >&2
a1=$(randwrite)
views 1
b1=$(randwrite)
saved1=$("${CTL[@]}" -o json disagg view list | json 'sum(v["saved_bytes"] for v in d)')
"${CTL[@]}" disagg view cancel --task 1 >/dev/null
a2=$(randwrite)
views 2
b2=$(randwrite)
"${CTL[@]}" disagg view cancel --task 2 >/dev/null

echo "fetch: a 1 GiB view, 16 segments at once" >&2
views 3
sync
dir=$(mktemp -d)
t0=$(now)
for cs in $(seq 1 16); do
    "${CTL[@]}" -o json disagg view fetch --pool 1 --copyset "$cs" --task 3 --verify >"$dir/$cs.json" &
done
wait
t1=$(now)
fetch_bytes=$(cat "$dir"/*.json | python3 -c "
import json, sys
d = json.JSONDecoder(); s = sys.stdin.read(); i = 0; total = 0
while i < len(s):
    while i < len(s) and s[i].isspace(): i += 1
    if i == len(s): break
    o, i = d.raw_decode(s, i)
    assert o['crc_ok'], o
    total += o['bytes']
print(total)")
rm -rf "$dir"

python3 - "$OUT.json" <<PY
import json, sys
r = dict(randwrite_without=[$a1, $a2], randwrite_with_view=[$b1, $b2],
         share_with_view=($b1 + $b2) / ($a1 + $a2), preimage_bytes_first_run=$saved1,
         fetch_bytes=$fetch_bytes, fetch_seconds=$t1 - $t0, fetch_mb_per_s=$fetch_bytes / 1e6 / ($t1 - $t0))
json.dump(r, open(sys.argv[1], "w"), indent=1)
print("4k randwrite iodepth 64, IOPS:   without %s, with a live view %s: %.0f%% (pre-images after the first: %d bytes)" % (
    r["randwrite_without"], r["randwrite_with_view"], 100 * r["share_with_view"], r["preimage_bytes_first_run"]))
print("FetchDisaggPages of the view:    %8.1f MB/s  (%d bytes in %.1f s, 16 segments at once)" % (r["fetch_mb_per_s"], r["fetch_bytes"], r["fetch_seconds"]))
PY

#!/usr/bin/env bash
# Soak: verified random I/O against a local 3-server cluster while servers crash.
#
#   scripts/soak.sh [minutes]     (default 10)
#
# Brings up its own cluster with scripts/cluster.sh (CLUSTER_DIR, default a
# fresh temp dir; BASE_PORT 8800, METRICS_BASE_PORT 9800), then runs rounds of
# `chunkbench --verify --rw randrw --iodepth 16 --prefill` until the time is
# up. During the first part of every round a fault loop kill -9's a random
# server every FAULT_INTERVAL seconds and restarts it (`cluster.sh up` restarts
# dead servers); the last QUIET_SECONDS of the round run without faults, so
# the round's reads check blocks written under faults against the last
# acknowledged write once the cluster is whole again. chunkbench --verify only
# checks a run's own writes, which is why the read-back is the quiet tail of
# the same run rather than a separate one.
#
# Then, if the chunkstore package has a linearizability test (go test -list
# Linearizab), it is run with CHUNKRAFT_LIN_DURATION set to half the soak.
#
# Then the membership-churn test (go test ./test/ -run TestMembershipChurn:
# five servers of its own, replicas moved, re-added, leaders transferred and
# killed during adds, new replicas killed during snapshot installs, servers
# paused, under verified load) runs for CHURN_SECONDS (default: the soak's
# duration) with CHURN_SEED when set; on a failure its servers' logs are kept
# in $CLUSTER_DIR/churn-logs.
#
# Prints rounds, faults injected, operations checked, acknowledged writes
# lost (verify mismatches; must be 0) and the churn test's counts. Exit
# status: 0 clean; 1 a loss, a failed round, a failed linearizability test
# or a failed churn test. The cluster is torn down on
# exit; its data is deleted only when the soak passed.
#
# Environment: ROUND_SECONDS (60), QUIET_SECONDS (15), FAULT_INTERVAL (10),
# SPAN (chunk space per copyset, 2m), CHURN_SECONDS, CHURN_SEED, CLUSTER_DIR,
# BASE_PORT, METRICS_BASE_PORT.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MINUTES="${1:-10}"
if ! [[ "$MINUTES" =~ ^[0-9]+$ ]] || ((MINUTES < 1)); then
    echo "soak.sh: minutes must be a positive whole number, got '$MINUTES'" >&2
    exit 1
fi
ROUND_SECONDS="${ROUND_SECONDS:-60}"
QUIET_SECONDS="${QUIET_SECONDS:-15}"
FAULT_INTERVAL="${FAULT_INTERVAL:-10}"
SPAN="${SPAN:-2m}"
CHURN_SECONDS="${CHURN_SECONDS:-}"
if [[ -n "$CHURN_SECONDS" ]] && ! [[ "$CHURN_SECONDS" =~ ^[0-9]+$ && "$CHURN_SECONDS" -ge 1 ]]; then
    echo "soak.sh: CHURN_SECONDS must be a positive whole number, got '$CHURN_SECONDS'" >&2
    exit 1
fi
if [[ -n "${CHURN_SEED:-}" ]] && ! [[ "$CHURN_SEED" =~ ^-?[0-9]+$ ]]; then
    echo "soak.sh: CHURN_SEED must be an integer, got '$CHURN_SEED'" >&2
    exit 1
fi
NSERVERS=3
export BASE_PORT="${BASE_PORT:-8800}"
export METRICS_BASE_PORT="${METRICS_BASE_PORT:-9800}"
if [[ -z "${CLUSTER_DIR:-}" ]]; then
    CLUSTER_DIR="$(mktemp -d "${TMPDIR:-/tmp}/chunkraft-soak.XXXXXX")"
fi
mkdir -p "$CLUSTER_DIR"
export CLUSTER_DIR
CLUSTER="$ROOT/scripts/cluster.sh"
BENCH="$ROOT/bin/chunkbench"
FAULTS_ON="$CLUSTER_DIR/soak.faults-on" # the fault loop injects only while this exists
FAULT_LOG="$CLUSTER_DIR/soak.faults"    # one line per fault injected
STOP="$CLUSTER_DIR/soak.stop"

log() { echo "==> $(date '+%H:%M:%S') $*"; }

servers=""
for ((i = 0; i < NSERVERS; i++)); do
    servers="${servers:+$servers,}127.0.0.1:$((BASE_PORT + i))"
done

fault_pid=""
passed=0
cleanup() {
    touch "$STOP" 2>/dev/null || true
    rm -f "$FAULTS_ON"
    if [[ -n "$fault_pid" ]]; then
        kill "$fault_pid" 2>/dev/null || true
        wait "$fault_pid" 2>/dev/null || true
    fi
    if ((passed)); then
        "$CLUSTER" down --clean >/dev/null 2>&1 || true
        rm -rf "$CLUSTER_DIR"
    else
        "$CLUSTER" down >/dev/null 2>&1 || true
        echo "soak.sh: cluster data and logs kept in $CLUSTER_DIR" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# our_pid i prints server i's pid if it is our chunkserver on our data dir.
our_pid() {
    local f="$CLUSTER_DIR/cs$1.pid" pid
    [[ -s "$f" ]] || return 1
    pid="$(<"$f")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/cmdline" ]]; then
        [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline")" == *"--data-dir $CLUSTER_DIR/cs$1 "* ]] || return 1
    fi
    echo "$pid"
}

# fault_loop: every FAULT_INTERVAL seconds while $FAULTS_ON exists, kill -9 a
# random server and restart it with cluster.sh up.
fault_loop() {
    local i pid
    while [[ ! -e "$STOP" ]]; do
        sleep "$FAULT_INTERVAL"
        [[ -e "$FAULTS_ON" && ! -e "$STOP" ]] || continue
        i=$((RANDOM % NSERVERS))
        if pid="$(our_pid "$i")"; then
            kill -9 "$pid" 2>/dev/null || true
            echo "$(date '+%H:%M:%S') kill -9 cs$i (pid $pid)" >>"$FAULT_LOG"
            sleep 1
        fi
        "$CLUSTER" up "$NSERVERS" >>"$CLUSTER_DIR/soak.restarts.log" 2>&1 ||
            echo "$(date '+%H:%M:%S') cluster.sh up failed (see soak.restarts.log)" >>"$FAULT_LOG"
    done
}

# whole: restart whatever is down and wait for every leader.
whole() {
    "$CLUSTER" up "$NSERVERS" >>"$CLUSTER_DIR/soak.restarts.log" 2>&1
}

log "cluster in $CLUSTER_DIR (grpc $servers)"
"$CLUSTER" up "$NSERVERS" >"$CLUSTER_DIR/soak.up.log" 2>&1 || {
    cat "$CLUSTER_DIR/soak.up.log" >&2
    exit 1
}
: >"$FAULT_LOG"
fault_loop &
fault_pid=$!

total=$((MINUTES * 60))
end=$(($(date +%s) + total))
rounds=0 checked=0 ops=0 lost=0 errors=0 failed_rounds=0 unwritten=0
while (($(date +%s) < end)); do
    left=$((end - $(date +%s)))
    runtime=$((left < ROUND_SECONDS ? left : ROUND_SECONDS))
    ((runtime >= 10)) || break
    quiet=$((QUIET_SECONDS < runtime / 2 ? QUIET_SECONDS : runtime / 2))
    rounds=$((rounds + 1))
    out="$CLUSTER_DIR/soak.round$rounds.txt"
    log "round $rounds: ${runtime}s of verified randrw, faults for the first $((runtime - quiet))s"
    set +e
    "$BENCH" --servers "$servers" --copysets 1-16 --span "$SPAN" --verify --prefill \
        --rw randrw --iodepth 16 --runtime "${runtime}s" --seed "$((RANDOM * 32768 + RANDOM + 1))" >"$out" 2>&1 &
    bench=$!
    # Faults start with the measured phase (a failed prefill would abort the
    # run) and stop QUIET_SECONDS before its end.
    for ((w = 0; w < 600; w++)); do
        grep -q 'prefill: wrote' "$out" 2>/dev/null && break
        kill -0 "$bench" 2>/dev/null || break
        sleep 0.2
    done
    touch "$FAULTS_ON"
    sleep "$((runtime - quiet))"
    rm -f "$FAULTS_ON"
    wait "$bench"
    rc=$?
    set -e
    line="$(grep -E '^ *verify +[0-9]+ reads checked' "$out" || true)"
    if [[ -z "$line" ]] || ((rc != 0 && rc != 1 && rc != 2)); then
        echo "soak.sh: round $rounds: chunkbench failed (exit $rc):" >&2
        tail -n 20 "$out" >&2
        failed_rounds=$((failed_rounds + 1))
    else
        read -r c u m < <(sed -E 's/^ *verify +([0-9]+) reads checked[^,]*, ([0-9]+) reads of blocks[^,]*, ([0-9]+) mismatches.*/\1 \2 \3/' <<<"$line")
        o="$(grep -E '^ *(read|write) +[0-9]+ ok' "$out" | awk '{s += $2} END {print s + 0}')"
        e="$(grep -E '^ *(read|write) +[0-9]+ ok' "$out" | sed -E 's/.* ok, ([0-9]+) errors.*/\1/' | awk '{s += $1} END {print s + 0}')"
        checked=$((checked + c)) unwritten=$((unwritten + u)) lost=$((lost + m)) ops=$((ops + o)) errors=$((errors + e))
        echo "    $o ops ($e failed, indeterminate), $c reads checked, $m mismatches (exit $rc)"
        if ((m > 0 || rc == 2)); then
            echo "soak.sh: round $rounds: ACKNOWLEDGED WRITES LOST:" >&2
            grep -A12 MISMATCHES "$out" >&2 || true
            ((m > 0)) || lost=$((lost + 1))
        fi
    fi
    # Make the cluster whole before the next round.
    whole || echo "soak.sh: cluster.sh up failed between rounds (see $CLUSTER_DIR/soak.restarts.log)" >&2
done
touch "$STOP"
kill "$fault_pid" 2>/dev/null || true
wait "$fault_pid" 2>/dev/null || true
fault_pid=""
faults="$(grep -c 'kill -9' "$FAULT_LOG" || true)"

lin="skipped (no such test)"
lin_rc=0
lin_secs=$((total / 2))
set +e
list="$(cd "$ROOT" && go test -list 'Linearizab' ./chunkstore/ 2>&1)"
list_rc=$?
set -e
if ((list_rc != 0)); then
    echo "soak.sh: go test -list ./chunkstore/ failed (exit $list_rc):" >&2
    tail -n 10 <<<"$list" >&2
    lin="FAILED (the chunkstore tests do not build)"
    lin_rc=$list_rc
elif grep -q '^Test' <<<"$list"; then
    log "linearizability: go test ./chunkstore/ -run Linearizab with CHUNKRAFT_LIN_DURATION=${lin_secs}s"
    set +e
    (cd "$ROOT" && CHUNKRAFT_LIN_DURATION="${lin_secs}s" go test ./chunkstore/ -run Linearizab -count=1 \
        -timeout "$((lin_secs * 3 + 600))s" -v) >"$CLUSTER_DIR/soak.lin.txt" 2>&1
    lin_rc=$?
    set -e
    tail -n 15 "$CLUSTER_DIR/soak.lin.txt"
    if ((lin_rc == 0)); then lin="passed"; else lin="FAILED (exit $lin_rc; log $CLUSTER_DIR/soak.lin.txt)"; fi
else
    log "no linearizability test in ./chunkstore/ (go test -list Linearizab found none): skipped"
fi

churn_secs="${CHURN_SECONDS:-$total}"
log "membership churn: go test ./test/ -run TestMembershipChurn with CHUNKRAFT_CHURN_DURATION=${churn_secs}s${CHURN_SEED:+ CHUNKRAFT_CHURN_SEED=$CHURN_SEED}"
set +e
(cd "$ROOT" && CHUNKRAFT_CHURN_DURATION="${churn_secs}s" CHUNKRAFT_CHURN_SEED="${CHURN_SEED:-}" \
    CHUNKRAFT_CHURN_LOGS="$CLUSTER_DIR/churn-logs" \
    go test ./test/ -run '^TestMembershipChurn$' -count=1 -timeout "$((churn_secs * 2 + 900))s" -v) >"$CLUSTER_DIR/soak.churn.txt" 2>&1
churn_rc=$?
set -e
churn_line="$(grep -o 'churn summary: .*' "$CLUSTER_DIR/soak.churn.txt" | tail -n 1 || true)"
# count NAME prints the number after NAME in the churn summary line ("?" if absent).
count() { grep -oE "$1 -?[0-9]+" <<<"$churn_line" | head -n 1 | grep -oE -- '-?[0-9]+$' || echo "?"; }
if ((churn_rc == 0)); then churn="passed"; else churn="FAILED (exit $churn_rc; log $CLUSTER_DIR/soak.churn.txt)"; fi
if [[ -z "$churn_line" ]]; then
    tail -n 20 "$CLUSTER_DIR/soak.churn.txt" >&2
    churn_rc=$((churn_rc == 0 ? 1 : churn_rc))
    churn="FAILED (no summary line; log $CLUSTER_DIR/soak.churn.txt)"
fi

echo
echo "soak summary ($MINUTES min, $(date -u '+%Y-%m-%d %H:%M UTC'))"
echo "  rounds                     $rounds (failed to run: $failed_rounds)"
echo "  faults injected            $faults (kill -9 + restart, every ${FAULT_INTERVAL}s while faults were on)"
echo "  operations                 $ops ok, $errors failed (indeterminate)"
echo "  operations checked         $checked reads verified, $unwritten reads of blocks not written yet"
echo "  acknowledged writes lost   $lost"
echo "  linearizability            $lin"
echo "  membership churn           $churn (seed $(count 'seed'), ${churn_secs}s)"
echo "    moves                    $(count 'moves') (re-adds $(count 're-adds')), leader transfers $(count 'transfers')"
echo "    kills                    $(count 'kills') (leader during an add $(count 'leader during add'), new replica during its install $(count 'new replica during install'), during a SIGSTOP $(count 'during a SIGSTOP'))"
echo "    snapshot installs        $(count 'snapshot installs'), stale replicas swept $(count 'stale replicas swept')"
echo "    writes                   $(count 'writes acknowledged') acknowledged, $(count 'reads checked') reads checked, $(count 'mismatches') mismatches"
echo "    members without replica  $(count 'members without replica') (replicas outside the configuration $(count 'replicas outside the configuration'), copysets without leader $(count 'copysets without leader'))"
if ((lost > 0 || failed_rounds > 0 || lin_rc != 0 || churn_rc != 0)); then
    exit 1
fi
passed=1

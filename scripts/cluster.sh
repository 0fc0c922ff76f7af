#!/usr/bin/env bash
# A local chunkraft cluster on 127.0.0.1: N chunkservers, pool 1, copysets 1-16.
#
#   scripts/cluster.sh up [--tls] [--monitor] [N]
#                                     a new cluster dir: start N servers (default 3), create the
#                                     copysets on the first three, wait for leaders; an existing one:
#                                     restart every server it has (added ones too), wait for leaders
#                                     (copysets are never created again); --tls: mutual TLS with a
#                                     throwaway CA in $CLUSTER_DIR/tls (only when the dir is new);
#                                     --monitor: also a Prometheus scraping them with deploy/'s rules
#   scripts/cluster.sh down [--clean] stop the servers (and Prometheus) started here; --clean also
#                                     deletes their data
#   scripts/cluster.sh status         per-server process state, the Prometheus URL, the leader table
#   scripts/cluster.sh add-server     start one more server (the next index), hosting nothing yet
#
# Server i (0-based) listens on 127.0.0.1:$((BASE_PORT+i)) (gRPC) and
# 127.0.0.1:$((METRICS_BASE_PORT+i)) (/metrics, /healthz), keeps its data in
# $CLUSTER_DIR/cs$i, logs to $CLUSTER_DIR/cs$i.log and its pid in $CLUSTER_DIR/cs$i.pid.
# Only processes named by those pid files are ever signalled.
#
# Environment, read when up creates the cluster dir: CLUSTER_DIR (default
# <repo>/.cluster), BASE_PORT (8200), METRICS_BASE_PORT (9200), COPYSETS (the
# pool 1 copysets up creates and status shows, default 1-16), CHUNKSERVER_CONFIG
# (a YAML config file passed to every server with --config; flags above still win).
# Read when up --monitor first monitors the dir: PROMETHEUS (the Prometheus
# binary, default /usr/bin/prometheus), PROMETHEUS_PORT (default
# METRICS_BASE_PORT+90, 9290).
#
# The cluster dir remembers its settings: up writes $CLUSTER_DIR/cluster.state
# (ports, copysets, config, TLS, the servers started, whether the copysets were
# created, monitoring with its Prometheus and port) and add-server adds its
# server to it. Every later command reads it, so only CLUSTER_DIR needs
# repeating; BASE_PORT, METRICS_BASE_PORT, COPYSETS, CHUNKSERVER_CONFIG (or,
# once monitored, PROMETHEUS and PROMETHEUS_PORT) set to anything else than what
# the dir recorded is an error (down --clean deletes the state with the data).
#
# With --tls (remembered) openssl makes
# $CLUSTER_DIR/tls/: ca.crt, cs<i>.crt/.key per server (OU=admin, SAN 127.0.0.1),
# admin.crt/.key (OU=admin) and user.crt/.key (no admin role); server i then runs
# with --config $CLUSTER_DIR/cs<i>.yaml (CHUNKSERVER_CONFIG's content plus a tls:
# section). The script's own chunkctl calls use the admin certificate.
#
# With --monitor (remembered: a later up restarts Prometheus too) Debian's
# Prometheus ($PROMETHEUS) runs deploy/prometheus/'s config and rules from
# $CLUSTER_DIR/prometheus (data, log, pid file there too) on
# 127.0.0.1:$PROMETHEUS_PORT, scraping every server of the cluster dir.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER_DIR="${CLUSTER_DIR:-$ROOT/.cluster}"
[[ "$CLUSTER_DIR" == /* ]] || CLUSTER_DIR="$PWD/$CLUSTER_DIR" # pid checks match it in command lines
STATE="$CLUSTER_DIR/cluster.state"
BIN="$ROOT/bin"
POOL=1
HEALTH_TIMEOUT=30 # seconds for each server to answer /healthz
LEADER_TIMEOUT=45 # seconds for every copyset to have a leader

# The settings of the cluster dir: from cluster.state when it exists
# (load_state), else from the environment (new_settings). ENV_* keep what the
# caller set, to hold it against the state.
ENV_BASE_PORT="${BASE_PORT:-}"
ENV_METRICS_BASE_PORT="${METRICS_BASE_PORT:-}"
ENV_COPYSETS="${COPYSETS:-}"
ENV_CHUNKSERVER_CONFIG="${CHUNKSERVER_CONFIG:-}"
ENV_PROMETHEUS="${PROMETHEUS:-}"
ENV_PROMETHEUS_PORT="${PROMETHEUS_PORT:-}"
BASE_PORT=""
METRICS_BASE_PORT=""
COPYSETS=""
CHUNKSERVER_CONFIG=""
PROMETHEUS=""
PROMETHEUS_PORT=""
TLS=0
MONITOR=0   # 1 once up --monitor ran: Prometheus is part of the cluster
SERVERS=()  # indices of the servers up and add-server started, ascending
CREATED=0   # 1 once the copysets were created
HAVE_STATE=0

die() {
    echo "cluster.sh: $*" >&2
    exit 1
}

log() { echo "==> $*"; }

# usage prints the header comment up to its second empty line: the commands.
usage() {
    awk 'NR > 1 && /^#$/ && ++blank == 2 {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
}

# abs_path p prints p made absolute (relative to $PWD).
abs_path() {
    if [[ "$1" == /* ]]; then
        echo "$1"
    else
        echo "$PWD/$1"
    fi
}

# is_port name value dies unless value is a TCP port number.
is_port() {
    [[ "$2" =~ ^[0-9]{1,5}$ ]] && ((10#$2 >= 1 && 10#$2 <= 65535)) || die "$1 must be a port number, got '$2'"
}

# new_settings takes the settings of a new cluster dir from the environment.
new_settings() {
    BASE_PORT="${ENV_BASE_PORT:-8200}"
    METRICS_BASE_PORT="${ENV_METRICS_BASE_PORT:-9200}"
    COPYSETS="${ENV_COPYSETS:-1-16}"
    CHUNKSERVER_CONFIG=""
    if [[ -n "$ENV_CHUNKSERVER_CONFIG" ]]; then
        CHUNKSERVER_CONFIG="$(abs_path "$ENV_CHUNKSERVER_CONFIG")"
    fi
}

# monitor_settings takes Prometheus's settings from the environment where
# the cluster dir has recorded none (it was not monitored yet) and checks
# the port; call it once METRICS_BASE_PORT is known.
monitor_settings() {
    [[ -n "$PROMETHEUS" ]] || PROMETHEUS="$(abs_path "${ENV_PROMETHEUS:-/usr/bin/prometheus}")"
    PROMETHEUS_PORT="${PROMETHEUS_PORT:-${ENV_PROMETHEUS_PORT:-$((10#$METRICS_BASE_PORT + 90))}}"
    is_port PROMETHEUS_PORT "$PROMETHEUS_PORT"
    PROMETHEUS_PORT=$((10#$PROMETHEUS_PORT))
}

# check_new_settings dies on a setting a new cluster cannot use.
check_new_settings() {
    is_port BASE_PORT "$BASE_PORT"
    is_port METRICS_BASE_PORT "$METRICS_BASE_PORT"
    BASE_PORT=$((10#$BASE_PORT)) METRICS_BASE_PORT=$((10#$METRICS_BASE_PORT))
    [[ "$COPYSETS" =~ ^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$ ]] ||
        die "COPYSETS must be copyset ids and ranges like 1-16 or 1,3,8-10, got '$COPYSETS'"
    if [[ -n "$CHUNKSERVER_CONFIG" && ! (-f "$CHUNKSERVER_CONFIG" && -r "$CHUNKSERVER_CONFIG") ]]; then
        die "CHUNKSERVER_CONFIG: cannot read the file '$CHUNKSERVER_CONFIG'"
    fi
    monitor_settings
}

# agree name env recorded dies when the caller set name to something else
# than the cluster dir recorded.
agree() {
    [[ -z "$2" || "$2" == "$3" ]] ||
        die "$1=$2, but $CLUSTER_DIR was created with $1=${3:-(unset)}: unset $1 (the cluster dir remembers its settings) or use another CLUSTER_DIR"
}

# load_state reads the settings recorded in $STATE and holds the
# environment against them.
load_state() {
    local line key val n=0 i
    local -A seen=()
    while IFS= read -r line || [[ -n "$line" ]]; do
        n=$((n + 1))
        [[ -z "$line" || "$line" == \#* ]] && continue
        [[ "$line" == *=* ]] || die "$STATE:$n: not a key=value line: '$line'"
        key="${line%%=*}"
        val="${line#*=}"
        case "$key" in
        base_port) BASE_PORT="$val" ;;
        metrics_base_port) METRICS_BASE_PORT="$val" ;;
        copysets) COPYSETS="$val" ;;
        chunkserver_config) CHUNKSERVER_CONFIG="$val" ;;
        tls) TLS="$val" ;;
        monitor) MONITOR="$val" ;;
        prometheus) PROMETHEUS="$val" ;;
        prometheus_port) PROMETHEUS_PORT="$val" ;;
        servers) read -r -a SERVERS <<<"$val" ;;
        copysets_created) CREATED="$val" ;;
        *) die "$STATE:$n: unknown key '$key' (not a cluster dir of this cluster.sh?)" ;;
        esac
        seen[$key]=1
    done <"$STATE"
    for key in base_port metrics_base_port copysets chunkserver_config tls servers copysets_created; do
        [[ -n "${seen[$key]:-}" ]] || die "$STATE: no $key line (not a cluster dir of this cluster.sh?)"
    done
    is_port "$STATE: base_port" "$BASE_PORT"
    is_port "$STATE: metrics_base_port" "$METRICS_BASE_PORT"
    [[ "$TLS" == [01] && "$CREATED" == [01] && "$MONITOR" == [01] ]] ||
        die "$STATE: tls, copysets_created and monitor must be 0 or 1"
    if ((MONITOR)) && [[ -z "$PROMETHEUS" || -z "$PROMETHEUS_PORT" ]]; then
        die "$STATE: monitor=1 needs prometheus and prometheus_port lines"
    fi
    # monitor, prometheus and prometheus_port may be missing (a dir never
    # monitored, or made before up --monitor existed): the environment's then.
    monitor_settings
    ((${#SERVERS[@]} > 0)) || die "$STATE: servers is empty"
    for i in "${SERVERS[@]}"; do
        [[ "$i" =~ ^[0-9]+$ ]] || die "$STATE: servers must be server indices, got '$i'"
    done
    if ((TLS)) && [[ ! -s "$(tls_dir)/ca.crt" ]]; then
        die "$STATE says TLS, but $(tls_dir)/ca.crt is missing"
    fi
    HAVE_STATE=1

    agree BASE_PORT "$ENV_BASE_PORT" "$BASE_PORT"
    agree METRICS_BASE_PORT "$ENV_METRICS_BASE_PORT" "$METRICS_BASE_PORT"
    agree COPYSETS "$ENV_COPYSETS" "$COPYSETS"
    agree CHUNKSERVER_CONFIG "${ENV_CHUNKSERVER_CONFIG:+$(abs_path "$ENV_CHUNKSERVER_CONFIG")}" "$CHUNKSERVER_CONFIG"
    agree PROMETHEUS "${ENV_PROMETHEUS:+$(abs_path "$ENV_PROMETHEUS")}" "$PROMETHEUS"
    agree PROMETHEUS_PORT "$ENV_PROMETHEUS_PORT" "$PROMETHEUS_PORT"
}

# write_state records the settings in $STATE (replaced atomically).
write_state() {
    {
        echo "# scripts/cluster.sh: the settings of this cluster dir; written by up and add-server, read by every command"
        echo "base_port=$BASE_PORT"
        echo "metrics_base_port=$METRICS_BASE_PORT"
        echo "copysets=$COPYSETS"
        echo "chunkserver_config=$CHUNKSERVER_CONFIG"
        echo "tls=$TLS"
        echo "servers=${SERVERS[*]}"
        echo "copysets_created=$CREATED"
        echo "monitor=$MONITOR"
        if ((MONITOR)); then
            echo "prometheus=$PROMETHEUS"
            echo "prometheus_port=$PROMETHEUS_PORT"
        fi
    } >"$STATE.tmp"
    mv "$STATE.tmp" "$STATE"
}

# settings loads the cluster dir's settings, or the environment's for a new dir.
settings() {
    if [[ -f "$STATE" ]]; then
        load_state
    else
        new_settings
    fi
}

grpc_addr() { echo "127.0.0.1:$((BASE_PORT + $1))"; }
metrics_addr() { echo "127.0.0.1:$((METRICS_BASE_PORT + $1))"; }
pid_file() { echo "$CLUSTER_DIR/cs$1.pid"; }
log_file() { echo "$CLUSTER_DIR/cs$1.log"; }
data_dir() { echo "$CLUSTER_DIR/cs$1"; }

tls_dir() { echo "$CLUSTER_DIR/tls"; }
tls_on() { ((TLS)); }

# ctl runs chunkctl, with the admin certificate when the cluster uses TLS.
ctl() {
    if tls_on; then
        local d
        d="$(tls_dir)"
        "$BIN/chunkctl" --tls-ca "$d/ca.crt" --tls-cert "$d/admin.crt" --tls-key "$d/admin.key" "$@"
    else
        "$BIN/chunkctl" "$@"
    fi
}

# tls_issue name subject [server] signs $(tls_dir)/name.crt/.key with the CA;
# server certificates also get the 127.0.0.1/localhost SANs and serverAuth.
tls_issue() {
    local d name="$1" subj="$2" ext
    d="$(tls_dir)"
    [[ -s "$d/$name.crt" ]] && return 0
    ext="$d/$name.ext"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature"
        if [[ "${3:-}" == server ]]; then
            echo "extendedKeyUsage=serverAuth,clientAuth"
            echo "subjectAltName=IP:127.0.0.1,DNS:localhost"
        else
            echo "extendedKeyUsage=clientAuth"
        fi
    } >"$ext"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout "$d/$name.key" -out "$d/$name.csr" -subj "$subj" 2>/dev/null ||
        die "openssl: cannot make the key of $name"
    openssl x509 -req -in "$d/$name.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
        -days 30 -extfile "$ext" -out "$d/$name.crt" 2>/dev/null ||
        die "openssl: cannot sign the certificate of $name"
    rm -f "$d/$name.csr" "$ext"
    chmod 600 "$d/$name.key"
}

# tls_init makes the throwaway CA and the client certificates, once.
tls_init() {
    command -v openssl >/dev/null || die "--tls needs openssl"
    local d
    d="$(tls_dir)"
    mkdir -p "$d"
    if [[ ! -s "$d/ca.crt" ]]; then
        log "making a throwaway CA and certificates in $d"
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
            -keyout "$d/ca.key" -out "$d/ca.crt.tmp" -subj "/CN=chunkraft local cluster CA" 2>/dev/null ||
            die "openssl: cannot make the CA"
        chmod 600 "$d/ca.key"
        mv "$d/ca.crt.tmp" "$d/ca.crt"
    fi
    tls_issue admin "/OU=admin/CN=chunkctl admin"
    tls_issue user "/OU=users/CN=chunkctl user"
}

# server_config i prints the --config file of server i: with TLS its own
# file (CHUNKSERVER_CONFIG's content plus the tls section), made once; else
# CHUNKSERVER_CONFIG (maybe empty).
server_config() {
    local i="$1"
    if ! tls_on; then
        echo "${CHUNKSERVER_CONFIG:-}"
        return 0
    fi
    local d f
    d="$(tls_dir)"
    f="$CLUSTER_DIR/cs$i.yaml"
    if [[ ! -s "$f" ]]; then
        tls_issue "cs$i" "/OU=admin/CN=chunkserver $i" server
        {
            if [[ -n "${CHUNKSERVER_CONFIG:-}" ]]; then
                cat "$CHUNKSERVER_CONFIG"
                echo
            fi
            echo "tls:"
            echo "  ca_file: $d/ca.crt"
            echo "  cert_file: $d/cs$i.crt"
            echo "  key_file: $d/cs$i.key"
        } >"$f"
    fi
    echo "$f"
}

# now prints the time in whole seconds.
now() { date +%s; }

# server_pid i prints the pid recorded for server i, if any.
server_pid() {
    local f
    f="$(pid_file "$1")"
    [[ -s "$f" ]] || return 1
    local pid
    pid="$(<"$f")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    echo "$pid"
}

# alive i: server i's recorded pid is running and (where /proc tells) is our
# chunkserver on our data dir, not some process that reused the pid.
alive() {
    local pid
    pid="$(server_pid "$1")" || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/cmdline" ]]; then
        local cmd
        cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline")"
        [[ "$cmd" == *chunkserver* && "$cmd" == *"--data-dir $(data_dir "$1") "* ]] || return 1
    fi
    return 0
}

# known_servers prints the indices of the servers the cluster dir recorded
# or that have a pid file, ascending.
known_servers() {
    local f base
    shopt -s nullglob
    {
        for f in "$CLUSTER_DIR"/cs*.pid; do
            base="${f##*/cs}"
            base="${base%.pid}"
            [[ "$base" =~ ^[0-9]+$ ]] && echo "$base"
        done
        for base in "${SERVERS[@]}"; do
            echo "$base"
        done
    } | sort -n -u
    shopt -u nullglob
}

# indices a b prints a..b, one per line (nothing if b < a).
indices() {
    local i
    for ((i = $1; i <= $2; i++)); do
        echo "$i"
    done
}

# join_addrs i... prints the gRPC addresses of servers i..., comma-separated.
join_addrs() {
    local out="" i
    for i in "$@"; do
        out="${out:+$out,}$(grpc_addr "$i")"
    done
    echo "$out"
}

# build (re)builds the binaries; go build is incremental, so this is cheap.
build() {
    if command -v go >/dev/null; then
        log "building binaries into bin/"
        if command -v make >/dev/null && [[ -f "$ROOT/Makefile" ]]; then
            make -s -C "$ROOT" build
        else
            (cd "$ROOT" && go build -o bin/ ./cmd/...)
        fi
    fi
    [[ -x "$BIN/chunkserver" ]] || die "$BIN/chunkserver is missing (and go is not installed to build it)"
    [[ -x "$BIN/chunkctl" ]] || die "$BIN/chunkctl is missing (and go is not installed to build it)"
}

# start i launches server i in the background, detached from this shell.
start_server() {
    local i="$1" pidf logf cfg
    pidf="$(pid_file "$i")"
    logf="$(log_file "$i")"
    mkdir -p "$(data_dir "$i")"
    cfg="$(server_config "$i")"
    rm -f "$pidf"
    echo "=== $(date '+%Y-%m-%d %H:%M:%S') cluster.sh starting cs$i" >>"$logf"
    local detach=()
    if command -v setsid >/dev/null; then
        detach=(setsid)
    fi
    # The inner shell records its own pid, then execs (nohup, then) the server,
    # so the pid file names the chunkserver process even if setsid forks.
    # shellcheck disable=SC2016 # $$, $1 and $@ are the inner shell's
    "${detach[@]}" bash -c 'echo $$ >"$1"; shift; exec nohup "$@"' _ "$pidf" \
        "$BIN/chunkserver" \
        --listen "$(grpc_addr "$i")" \
        --metrics-listen "$(metrics_addr "$i")" \
        --data-dir "$(data_dir "$i")" \
        ${cfg:+--config "$cfg"} \
        </dev/null >>"$logf" 2>&1 &
    log "started cs$i: grpc $(grpc_addr "$i"), metrics $(metrics_addr "$i"), log $logf"
}

# wait_healthy i waits until server i answers /healthz, or dies with its log.
wait_healthy() {
    local i="$1" deadline logf
    deadline=$(($(now) + HEALTH_TIMEOUT))
    logf="$(log_file "$i")"
    while :; do
        if curl -fsS -m 2 "http://$(metrics_addr "$i")/healthz" >/dev/null 2>&1; then
            return 0
        fi
        # The pid file appears a moment after the start; only judge it once there.
        if [[ -s "$(pid_file "$i")" ]] && ! alive "$i"; then
            echo "cluster.sh: cs$i exited during startup; last lines of $logf:" >&2
            tail -n 20 "$logf" >&2 || true
            echo "cluster.sh: 'scripts/cluster.sh down' stops the servers that did start" >&2
            exit 1
        fi
        if (($(now) >= deadline)); then
            echo "cluster.sh: cs$i not healthy after ${HEALTH_TIMEOUT}s (http://$(metrics_addr "$i")/healthz); last lines of $logf:" >&2
            tail -n 20 "$logf" >&2 || true
            echo "cluster.sh: 'scripts/cluster.sh down' stops the servers that did start" >&2
            exit 1
        fi
        sleep 0.2
    done
}

# leader_table prints the leader of every copyset, asking servers i....
leader_table() {
    ctl --servers "$(join_addrs "$@")" --timeout 5s leader get --pool "$POOL" --copyset "$COPYSETS"
}

# wait_leaders waits until every copyset has a leader, asking servers i....
wait_leaders() {
    local deadline out
    deadline=$(($(now) + LEADER_TIMEOUT))
    log "waiting for leaders of pool $POOL copysets $COPYSETS"
    while :; do
        if out="$(ctl --servers "$(join_addrs "$@")" --timeout 3s \
            leader get --pool "$POOL" --copyset "$COPYSETS" 2>&1)"; then
            return 0
        fi
        if (($(now) >= deadline)); then
            echo "$out" >&2
            die "not every copyset has a leader after ${LEADER_TIMEOUT}s (logs: $CLUSTER_DIR/cs*.log)"
        fi
        sleep 0.5
    done
}

usage_hint() {
    local ctl="$BIN/chunkctl" servers
    servers="$(join_addrs "${SERVERS[@]}")"
    if [[ "$PWD" == "$ROOT" ]]; then
        ctl="bin/chunkctl"
    fi
    cat <<EOF

How to use it:
  export CHUNKCTL_SERVERS=$servers
  head -c 4096 /dev/urandom >/tmp/block     # offsets and sizes must be 4 KiB aligned
  $ctl chunk write --pool $POOL --copyset 1 --chunk 1 --in /tmp/block
  $ctl chunk read --pool $POOL --copyset 1 --chunk 1 --size 4k | cmp - /tmp/block && echo same
  $ctl copyset status --pool $POOL --copyset 1
  $ctl leader transfer --pool $POOL --copyset 1 --to $(grpc_addr "${SERVERS[$((${#SERVERS[@]} > 1 ? 1 : 0))]}")
EOF
    if [[ -x "$BIN/chunkbench" ]]; then
        echo "  ${ctl%chunkctl}chunkbench --help    # chunk I/O benchmark"
    fi
    if tls_on; then
        local d
        d="$(tls_dir)"
        cat <<EOF
TLS is on: chunkctl needs a certificate. As admin (peer, snapshot, config set, ...):
  export CHUNKCTL_TLS_CA=$d/ca.crt CHUNKCTL_TLS_CERT=$d/admin.crt CHUNKCTL_TLS_KEY=$d/admin.key
As a data-only user (chunk read/write, status; admin commands get PermissionDenied):
  export CHUNKCTL_TLS_CA=$d/ca.crt CHUNKCTL_TLS_CERT=$d/user.crt CHUNKCTL_TLS_KEY=$d/user.key
EOF
    fi
    cat <<EOF
Logs: $CLUSTER_DIR/cs<i>.log   Stop: scripts/cluster.sh down [--clean]   State: scripts/cluster.sh status
EOF
}

# Prometheus for up --monitor (see the header).
prom_dir() { echo "$CLUSTER_DIR/prometheus"; }
prom_url() { echo "http://127.0.0.1:$PROMETHEUS_PORT"; }

# monitor_check fails (saying how to install it) unless Prometheus is there.
monitor_check() {
    [[ -x "$PROMETHEUS" ]] ||
        die "--monitor needs Prometheus ($PROMETHEUS): install it with 'sudo apt-get install -y prometheus'"
}

# monitor_pid prints the pid of the Prometheus started here, if it runs.
monitor_pid() {
    local f pid
    f="$(prom_dir)/prometheus.pid"
    [[ -s "$f" ]] || return 1
    pid="$(<"$f")"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/cmdline" ]]; then
        [[ "$(tr '\0' ' ' <"/proc/$pid/cmdline")" == *"--config.file=$(prom_dir)/prometheus.yml "* ]] || return 1
    fi
    echo "$pid"
}

# monitor_targets writes the cluster dir's servers as Prometheus's targets
# (file_sd: it notices the change without a restart).
monitor_targets() {
    local f i
    f="$(prom_dir)/targets/chunkraft.yml"
    mkdir -p "${f%/*}"
    {
        echo "- targets:"
        for i in $(known_servers); do
            echo "    - $(metrics_addr "$i")"
        done
    } >"$f.tmp"
    mv "$f.tmp" "$f"
}

# monitor_start runs Prometheus on deploy/prometheus's config and rules
# (scraping every 2s), unless it already runs, and prints its URL.
monitor_start() {
    local d deadline
    d="$(prom_dir)"
    mkdir -p "$d/data"
    sed 's/^\(  scrape_interval:\|  evaluation_interval:\) 15s/\1 2s/' "$ROOT/deploy/prometheus/prometheus.yml" >"$d/prometheus.yml"
    rm -rf "$d/rules"
    cp -R "$ROOT/deploy/prometheus/rules" "$d/rules"
    monitor_targets
    if monitor_pid >/dev/null; then
        log "Prometheus already running (pid $(monitor_pid)); config and rules reloaded"
        kill -HUP "$(monitor_pid)"
    else
        log "starting Prometheus on $(prom_url), log $d/prometheus.log"
        local detach=()
        if command -v setsid >/dev/null; then
            detach=(setsid)
        fi
        # shellcheck disable=SC2016 # $$, $1 and $@ are the inner shell's
        "${detach[@]}" bash -c 'echo $$ >"$1"; shift; exec nohup "$@"' _ "$d/prometheus.pid" \
            "$PROMETHEUS" --config.file="$d/prometheus.yml" --storage.tsdb.path="$d/data" \
            --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" --storage.tsdb.retention.time=7d \
            </dev/null >>"$d/prometheus.log" 2>&1 &
        deadline=$(($(now) + HEALTH_TIMEOUT))
        until curl -fsS -m 2 "$(prom_url)/-/ready" >/dev/null 2>&1; do
            # Liveness by pid only: while the starter execs nohup and then
            # Prometheus, its /proc cmdline (which monitor_pid checks) can
            # read empty for an instant.
            if (($(now) >= deadline)) || { [[ -s "$d/prometheus.pid" ]] && ! kill -0 "$(<"$d/prometheus.pid")" 2>/dev/null; }; then
                tail -n 20 "$d/prometheus.log" >&2 || true
                die "Prometheus did not become ready on $(prom_url) (log: $d/prometheus.log)"
            fi
            sleep 0.2
        done
    fi
    echo "Prometheus: $(prom_url)  (alerts: $(prom_url)/alerts, targets: $(prom_url)/targets; Grafana dashboard: deploy/grafana/chunkraft.json)"
}

# monitor_stop stops the Prometheus started here, if it runs.
monitor_stop() {
    local pid i
    if ! pid="$(monitor_pid)"; then
        if ((MONITOR)); then
            echo "prometheus: not running"
        fi
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    rm -f "$(prom_dir)/prometheus.pid"
    echo "prometheus: stopped (pid $pid)"
}

# cmd_up [--tls] [--monitor] [N]: a new cluster dir gets N servers and the copysets; an
# existing one gets every recorded server that is not running restarted
# (and Prometheus, once --monitor was given).
cmd_up() {
    local tls=0 monitor=0 n=""
    while (($# > 0)); do
        case "$1" in
        --tls) tls=1 ;;
        --monitor) monitor=1 ;;
        -h | --help)
            usage
            return 0
            ;;
        -*) die "up: unknown option '$1' (want --tls or --monitor)" ;;
        *)
            [[ -z "$n" ]] || die "up: one server count expected, got '$n' and '$1'"
            n="$1"
            ;;
        esac
        shift
    done
    if [[ -n "$n" ]] && { ! [[ "$n" =~ ^[0-9]+$ ]] || ((10#$n < 1)); }; then
        die "up: N must be a positive number, got '$n'"
    fi
    command -v curl >/dev/null || die "curl is needed for health checks"

    if ((HAVE_STATE)); then
        if ((tls && !TLS)); then
            die "up --tls: $CLUSTER_DIR was created without TLS and stays so (down --clean, then up --tls)"
        fi
        if [[ -n "$n" ]] && ((10#$n != ${#SERVERS[@]})); then
            local list="${SERVERS[*]}"
            die "up $n: $CLUSTER_DIR has ${#SERVERS[@]} servers (cs${list// /, cs}); 'up' restarts them all, add-server adds one"
        fi
        if ((TLS && !tls)); then
            log "$CLUSTER_DIR was set up with --tls: TLS stays on"
        fi
        if ((MONITOR || monitor)); then
            monitor_check
        fi
        if ((MONITOR && !monitor)); then
            log "$CLUSTER_DIR was set up with --monitor: Prometheus is started too"
        elif ((monitor && !MONITOR)); then
            MONITOR=1
            write_state
            log "monitoring $CLUSTER_DIR from now on (recorded in $STATE)"
        fi
    else
        if compgen -G "$CLUSTER_DIR/cs[0-9]*" >/dev/null; then
            die "$CLUSTER_DIR holds servers but no cluster.state (made by an older cluster.sh?): 'scripts/cluster.sh down --clean' removes them"
        fi
        check_new_settings
        if ((tls)); then
            command -v openssl >/dev/null || die "--tls needs openssl"
        fi
        if ((monitor)); then
            monitor_check
        fi
        n=$((10#${n:-3}))
        TLS=$tls
        MONITOR=$monitor
        mapfile -t SERVERS < <(indices 0 $((n - 1)))
        mkdir -p "$CLUSTER_DIR"
        write_state
        log "new cluster dir $CLUSTER_DIR (settings in $STATE)"
    fi
    if ((TLS)); then
        tls_init
    fi
    build

    local i started=()
    for i in "${SERVERS[@]}"; do
        if alive "$i"; then
            echo "cs$i already running (pid $(server_pid "$i"))"
        else
            start_server "$i"
            started+=("$i")
        fi
    done
    if ((${#started[@]} == 0 && CREATED)); then
        echo "cluster already running (${#SERVERS[@]} servers, $CLUSTER_DIR)"
        wait_leaders "${SERVERS[@]}"
        if ((MONITOR)); then
            monitor_start
        fi
        cmd_status
        return 0
    fi
    for i in "${started[@]}"; do
        wait_healthy "$i"
        echo "cs$i healthy (pid $(server_pid "$i"))"
    done

    if ((!CREATED)); then
        # The copysets live on the first three servers (fewer if N < 3).
        local peers
        peers="$(join_addrs "${SERVERS[@]:0:3}")"
        log "creating pool $POOL copysets $COPYSETS on $peers"
        ctl --servers "$peers" copyset create --pool "$POOL" --copyset "$COPYSETS" --peers "$peers" >/dev/null ||
            die "copyset create failed (logs: $CLUSTER_DIR/cs*.log)"
        CREATED=1
        write_state
    fi

    wait_leaders "${SERVERS[@]}"
    leader_table "${SERVERS[@]}"
    usage_hint
    if ((MONITOR)); then
        monitor_start
    fi
}

cmd_down() {
    (($# <= 1)) || die "down: one argument at most (--clean), got '$*'"
    local clean=0
    case "${1:-}" in
    "") ;;
    --clean) clean=1 ;;
    *) die "down: unknown argument '$1' (want --clean)" ;;
    esac

    local i pid pids=() idx=()
    for i in $(known_servers); do
        if alive "$i"; then
            pid="$(server_pid "$i")"
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            idx+=("$i")
            echo "cs$i: SIGTERM sent (pid $pid)"
        else
            echo "cs$i: not running"
        fi
    done

    local deadline k left
    deadline=$(($(now) + 10))
    while :; do
        left=0
        for k in "${!pids[@]}"; do
            kill -0 "${pids[$k]}" 2>/dev/null && left=$((left + 1))
        done
        ((left == 0)) && break
        if (($(now) >= deadline)); then
            for k in "${!pids[@]}"; do
                if kill -0 "${pids[$k]}" 2>/dev/null; then
                    echo "cs${idx[$k]}: still running after 10s, SIGKILL (pid ${pids[$k]})"
                    kill -KILL "${pids[$k]}" 2>/dev/null || true
                fi
            done
            break
        fi
        sleep 0.2
    done
    for i in $(known_servers); do
        rm -f "$(pid_file "$i")"
    done
    monitor_stop

    if ((clean)); then
        # Only what this script creates; never the whole directory blindly.
        shopt -s nullglob
        rm -rf "$CLUSTER_DIR"/cs[0-9]* "$CLUSTER_DIR"/cs[0-9]*.log "$CLUSTER_DIR"/tls "$(prom_dir)" "$STATE" "$STATE.tmp"
        shopt -u nullglob
        rmdir "$CLUSTER_DIR" 2>/dev/null || true
        echo "cluster stopped; data removed"
    else
        echo "cluster stopped; data kept in $CLUSTER_DIR (down --clean removes it)"
    fi
}

cmd_status() {
    [[ $# -eq 0 ]] || die "status: no arguments expected, got '$*'"
    local servers
    mapfile -t servers < <(known_servers)
    if ((!HAVE_STATE)) || ((${#servers[@]} == 0)); then
        echo "no cluster in $CLUSTER_DIR (no cluster.state; 'scripts/cluster.sh up' makes one)"
        return 1
    fi
    local i up=() health
    printf '%-6s %-8s %-6s %-17s %-17s %s\n' SERVER PID STATE GRPC METRICS HEALTH
    for i in "${servers[@]}"; do
        if alive "$i"; then
            up+=("$i")
            health="$(curl -fsS -m 2 "http://$(metrics_addr "$i")/healthz" 2>/dev/null || echo "not ready")"
            printf '%-6s %-8s %-6s %-17s %-17s %s\n' "cs$i" "$(server_pid "$i")" alive \
                "$(grpc_addr "$i")" "$(metrics_addr "$i")" "$health"
        else
            printf '%-6s %-8s %-6s %-17s %-17s %s\n' "cs$i" "$(server_pid "$i" || echo -)" dead \
                "$(grpc_addr "$i")" "$(metrics_addr "$i")" -
        fi
    done
    if ((${#up[@]} == 0)); then
        echo "no server is running"
        return 1
    fi
    [[ -x "$BIN/chunkctl" ]] || die "$BIN/chunkctl is missing; run make build"
    if monitor_pid >/dev/null; then
        echo "prometheus: $(prom_url) (pid $(monitor_pid))"
    elif ((MONITOR)); then
        echo "prometheus: not running ('scripts/cluster.sh up' starts it)"
    fi
    echo
    leader_table "${up[@]}"
}

# used_indices prints every server index that has a pid file, a data
# directory or a log, ascending: a new server must not reuse another's data.
used_indices() {
    local f base
    shopt -s nullglob
    for f in "$CLUSTER_DIR"/cs*; do
        base="${f##*/cs}"
        base="${base%.pid}"
        base="${base%.log}"
        [[ "$base" =~ ^[0-9]+$ ]] && echo "$base"
    done | sort -n -u
    shopt -u nullglob
}

cmd_add_server() {
    [[ $# -eq 0 ]] || die "add-server: no arguments expected, got '$*'"
    ((HAVE_STATE)) || die "add-server: no cluster in $CLUSTER_DIR (no cluster.state; start one with 'scripts/cluster.sh up')"
    command -v curl >/dev/null || die "curl is needed for health checks"
    local i up=() used
    for i in $(known_servers); do
        if alive "$i"; then
            up+=("$i")
        fi
    done
    ((${#up[@]} > 0)) || die "add-server: no running cluster in $CLUSTER_DIR (start one with 'scripts/cluster.sh up')"
    mapfile -t used < <(used_indices | sort -n -u - <(known_servers))
    local next=$((used[-1] + 1))
    build
    start_server "$next"
    wait_healthy "$next"
    SERVERS+=("$next")
    write_state
    echo "cs$next healthy (pid $(server_pid "$next")); it hosts no copyset yet; recorded in $STATE"
    if ((MONITOR)); then
        monitor_targets # Prometheus scrapes it too
    fi

    local ctl="$BIN/chunkctl" servers new old
    if [[ "$PWD" == "$ROOT" ]]; then
        ctl="bin/chunkctl"
    fi
    servers="$(join_addrs "${up[@]}" "$next")"
    new="$(grpc_addr "$next")"
    old="$(grpc_addr "${up[0]}")"
    cat <<EOF

To move a copyset onto it (here copyset 1 of pool $POOL, replacing $old):
  export CHUNKCTL_SERVERS=$servers
  $ctl peer add    --pool $POOL --copyset 1 --peer $new
  $ctl cluster status --copyset 1        # until it is ok: the new replica has caught up
  $ctl peer remove --pool $POOL --copyset 1 --peer $old
  $ctl cluster check-consistency --copyset 1
Which copysets each server holds: $ctl copyset list; spread the leaders: $ctl leader balance
Recipes: README.md, "Operating a cluster".
EOF
}

main() {
    local cmd="${1:-}"
    shift || true
    case "$cmd" in
    up | down | status | add-server) ;;
    -h | --help | help)
        usage
        return 0
        ;;
    "")
        usage >&2
        exit 2
        ;;
    *) die "unknown command '$cmd' (want up, down, status or add-server; --help shows the usage)" ;;
    esac
    settings
    case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    status) cmd_status "$@" ;;
    add-server) cmd_add_server "$@" ;;
    esac
}

main "$@"

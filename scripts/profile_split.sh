#!/usr/bin/env bash
# Splits a chunkserver CPU profile by part of the server: each sample goes to
# the first part, in the order below, that has a function anywhere on its
# stack (so a sample in the shared log reached from raft's loop is the shared
# log's, a gRPC write inside a raft pipeline is the transport's); samples with
# none of them are gRPC's own (its HTTP/2 readers and writers, serving every
# stream) or, last, the Go runtime's and the rest.
#
#   scripts/profile_split.sh BINARY PROFILE [PROFILE...]
#
# Prints a Markdown table: part, share of the samples, seconds.
#   shared log        copyset/sharedlog
#   chunk apply       chunkstore.(*chunkMachine) apply, chunkstore/datastore
#   raft transport    copyset's transport (pipelines, heartbeats, the inbound
#                     service, the wire codec) and raftpb
#   proposals         copyset's proposer (batching, waiting for raft's answer)
#   client service    the ChunkService handlers (chunkstore.(*chunkService))
#   raft loops        github.com/hashicorp/raft
#   gRPC              google.golang.org/grpc and golang.org/x/net/http2
#   runtime and other everything else (GC, scheduler, syscalls of idle loops)
set -euo pipefail
[[ $# -ge 2 ]] || {
    echo "usage: $0 BINARY PROFILE [PROFILE...]" >&2
    exit 2
}
bin="$1"
shift
go tool pprof -traces "$bin" "$@" 2>/dev/null | awk '
function unit(v) {  # a sample value (10ms, 1.50s, 250us) in seconds
    if (v ~ /ms$/) return substr(v, 1, length(v) - 2) / 1000
    if (v ~ /us$/) return substr(v, 1, length(v) - 2) / 1000000
    if (v ~ /ns$/) return substr(v, 1, length(v) - 2) / 1000000000
    if (v ~ /s$/) return substr(v, 1, length(v) - 1) + 0
    return v + 0
}
function flush(   i, p) {
    if (val == 0) return
    p = "runtime and other"
    for (i = 1; i <= n; i++) if (index(stack, "\x01" pat[i])) { p = part[i]; break }
    if (p == "runtime and other") {
        if (stack ~ /google\.golang\.org\/grpc|golang\.org\/x\/net\/http2/) p = "gRPC"
    }
    secs[p] += val
    total += val
    val = 0
    stack = ""
}
BEGIN {
    n = 0
    part[++n] = "shared log";     pat[n] = "github.com/chunkraft/chunkraft/copyset/sharedlog."
    part[++n] = "chunk apply";    pat[n] = "github.com/chunkraft/chunkraft/chunkstore.(*chunkMachine)"
    part[++n] = "chunk apply";    pat[n] = "github.com/chunkraft/chunkraft/chunkstore/datastore."
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.(*appendPipeline)"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.(*transportServer)"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.(*GroupTransport)"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.(*heartbeat"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.(*wireCodec)"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.(*wireWriter)"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.(*appendFuture)"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.marshalAppendEntries"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.unmarshal"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/copyset.appendEntries"
    part[++n] = "raft transport"; pat[n] = "github.com/chunkraft/chunkraft/proto/chunkraft/raftpb."
    part[++n] = "proposals";      pat[n] = "github.com/chunkraft/chunkraft/copyset.(*proposer)"
    part[++n] = "client service"; pat[n] = "github.com/chunkraft/chunkraft/chunkstore.(*chunkService)"
    part[++n] = "raft loops";     pat[n] = "github.com/hashicorp/raft."
    order[1] = "raft transport"; order[2] = "raft loops"; order[3] = "client service"; order[4] = "proposals"
    order[5] = "chunk apply"; order[6] = "shared log"; order[7] = "gRPC"; order[8] = "runtime and other"
}
/^-+\+-+$/ { flush(); next }
/^ *[0-9.]+(ns|us|ms|s)? +[^ ]/ && stack == "" { val = unit($1); stack = "\x01" $2; next }
/^ +[^ ]/ && val > 0 { stack = stack "\x01" $1; next }
END {
    flush()
    if (total == 0) { print "no samples" > "/dev/stderr"; exit 1 }
    print "| part | share | seconds |"
    print "|---|---:|---:|"
    for (i = 1; i <= 8; i++) printf "| %s | %.0f%% | %.2f |\n", order[i], 100 * secs[order[i]] / total, secs[order[i]]
    printf "| total | 100%% | %.2f |\n", total
}'

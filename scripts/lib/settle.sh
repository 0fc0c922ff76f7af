# settle: until every server's chunk file pool is full (at most 2 minutes),
# then sync. Sourced by the benchmark scripts; reads METRICS_BASE_PORT (the
# three servers' metrics ports are it and the next two).
settle() {
    local i m full
    for i in $(seq 1 600); do
        full=1
        for m in $(seq "$METRICS_BASE_PORT" $((METRICS_BASE_PORT + 2))); do
            curl -s "127.0.0.1:$m/metrics" | awk '
                /^chunkraft_chunkfilepool_ready /  { r = $2 }
                /^chunkraft_chunkfilepool_target / { t = $2; seen = 1 }
                END { exit !(seen && r >= t) }' || full=0
        done
        [ "$full" = 1 ] && break
        sleep 0.2
    done
    sync
}

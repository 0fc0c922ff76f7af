// Package bench is the engine of chunkbench, the chunk I/O benchmark of
// chunkraft. It drives a running cluster through an [IO] (normally a
// *cli.Client, which finds leaders and follows redirects) with one of five
// workloads and measures what comes back.
//
// # Layout
//
// Every copyset of the run gets Span bytes of chunk space, laid out as chunks
// 1, 2, ... of [ChunkSize] bytes (the last one shorter when Span is not a
// multiple of it). The space is cut into blocks of BS bytes that never cross
// a chunk boundary; a run's block set is every block of every copyset, in
// copyset-major order. Random workloads pick a uniformly random block for
// each operation; sequential ones (write, read) give each of the IODepth
// workers its own contiguous share of the block set and let it walk that
// share in order, wrapping around at its end.
//
// # Concurrency and measurement
//
// IODepth workers each keep exactly one request outstanding, so IODepth is
// the number of requests in flight. The latency of every successful operation
// goes into an HDR histogram in microseconds (per worker, merged for
// reports); failed operations are not in the histogram but are counted by
// kind ([Classify]): the status name of a final ChunkService status (for
// example CHUNK_OP_STATUS_CHUNK_NOTEXIST), or the name of the status that
// kept coming back until the client gave up (CHUNK_OP_STATUS_REDIRECTED,
// CHUNK_OP_STATUS_OVERLOAD), "timeout", "unavailable", "canceled" or "other".
// Retries the client made and then succeeded past (a redirect followed, a
// server that was down) are not failures of the operation; they are counted
// separately, per attempt, by [AttemptCounter] when it is installed on the
// client's connections.
//
// # Verification
//
// With Verify set every written block carries a self-describing pattern (see
// [EncodeBlock]): each 4 KiB sector holds a header naming the run, pool,
// copyset, chunk, its own offset and the write's sequence number, a
// pseudo-random body derived from them, and a CRC-32C of the whole sector.
// The engine remembers, per block, which writes may be its current content:
// the last acknowledged write, writes that overlapped it, writes still in
// flight, and writes whose outcome is unknown because they failed. Every
// read decodes the pattern and checks it against that set; anything else (a
// stale, torn, misplaced, corrupted or zeroed block) is a [Mismatch]. Blocks
// this run never wrote are only checked for consistency: zeros, foreign data,
// or a well-formed pattern naming this very block are accepted.
//
// # The etcd target
//
// [EtcdIO] runs the same workloads against an etcd cluster, to compare the
// two in one run: block g of the layout is the key [EtcdKey](g), a block
// write is a Put of its BS bytes and a block read a linearizable Range of
// the key, round robin over connections to every member. Prefill, Verify,
// the histogram and the reports work unchanged.
//
// Must not import: chunkserver/..., copyset/..., internal/kinds, cmd/..., test/...
package bench

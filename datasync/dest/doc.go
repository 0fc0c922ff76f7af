// Package dest is where a sync task's export goes: the task's dest URL,
// file:///absolute/path or s3://bucket/prefix ([Parse]), opened as a [Dest]
// ([Open]) on the object store of internal/objstore.
//
//   - file:///path is an objstore.Local rooted at path (created if
//     missing).
//   - s3://bucket/prefix is an objstore.S3 on the endpoint and credentials
//     of the server's object_store.s3 configuration, with the URL's bucket
//     and key prefix (the configured bucket and prefix are not used). The
//     bucket must exist: Open never creates it.
//
// # Invariants
//
//   - Parse checks everything it can without I/O and creates nothing;
//     errors are one line naming the dest and the problem.
//   - Open checks the destination is usable before it returns: the file
//     directory exists or was created, or the S3 endpoint answered and the
//     bucket exists (bounded by OpenTimeout). A sync task is created only
//     after Open succeeded, so an unreachable bucket changes nothing.
//   - Put is atomic and durable: readers see the old object or the whole
//     new one, and a Put that returned survives a crash (Local: temporary
//     file under root/.objstore-tmp, fsync, rename, fsync of the directory;
//     S3: one PutObject, for objects up to objstore.MaxSinglePutSize, which
//     is exportfmt.MaxPacketSize). A packet resent under the same name
//     replaces itself, so no crash leaves a duplicate.
//   - List is sorted by name and never shows a temporary file.
//
// Must not import: github.com/chunkraft/chunkraft/..., !internal/objstore
package dest

// Package objstore is chunkraft's object store: the place clone chunks read
// their source data from (chunk locations of the form "<object>@s3") and the
// place the sync service exports to.
//
// Everything goes through one interface, [Store], with two implementations:
//
//   - [Local] keeps every object as a regular file under a root directory.
//     It is the embedded default (root "<data_dir>/objects") and needs no
//     external service.
//   - [S3] talks to any S3-compatible service (AWS S3, MinIO, Ceph RGW, ...)
//     through minio-go.
//
// [Open] builds either from a [Config], which the chunkserver configuration
// embeds under the "object_store:" key.
//
// # Object names
//
// Names are '/'-separated, like S3 keys, and are checked by [ValidateName]
// the same way by every implementation so an object can move between them:
// a name is non-empty, at most [MaxNameLen] bytes of valid UTF-8, has no
// leading or trailing '/', no empty, "." or ".." element, no element longer
// than [MaxElemLen] bytes, no control characters, and does not start with the
// reserved element [ReservedPrefix]. Invalid names fail with an error wrapping
// [ErrInvalidName]. A name maps to the path root/name of a [Local] store and
// to the key prefix+name of an [S3] store.
//
// # Errors
//
// Every method takes a context and returns errors that name the operation and
// the object. Errors can be classified with errors.Is:
//
//   - [ErrNotExist]: the object does not exist (Delete never reports it);
//   - [ErrInvalidName]: the name or prefix is invalid;
//   - io.ErrUnexpectedEOF: ReadAt ran past the end of the object, or the
//     reader given to Put ended before size bytes;
//   - [ErrClosed]: the store was closed;
//   - context.Canceled / context.DeadlineExceeded: the context ended.
//
// This package deliberately imports nothing else from chunkraft so it can be
// used (and tested) on its own.
//
// Must not import: github.com/chunkraft/chunkraft/...
package objstore

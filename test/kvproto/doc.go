// Package kvproto runs pingcap/kvproto's own generated Go client (gogo
// protobuf, pkg/tikvpb) against built chunkserver processes. It cannot
// run in-process: kvproto's types register the same protobuf names as
// the server's generated code (proto/kvproto), and two registrations of
// one name in a binary panic at init. So this package imports neither
// the server nor the repo's generated kvproto code.
//
// Must not import: chunkserver/..., cli/..., proto/kvproto/..., disagg/...
package kvproto

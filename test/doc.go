// Package test holds multi-node tests of chunkraft: clusters of real
// chunkserver processes built from cmd/ (kill -9, restart on the same data
// dir) driven through the cli client library and raw gRPC stubs.
//
// Helpers here start and stop processes; tests see the server only over
// the wire and through the files an operator sees. The package itself
// imports nothing of chunkserver/ or copyset/ (the rule below, checked by
// internal/archtest on non-test imports); its tests use only what an
// operator's tool would: the config file's name and loader
// (chunkserver.ConfigFileName, LoadConfigFile, DefaultConfig) and the group
// id of a copyset (copyset.NewGroupID), never a server's or a replica's
// internals.
//
// Must not import: chunkserver/..., copyset/...
package test

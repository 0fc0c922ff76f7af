// The conversion between hashicorp/raft's RPC types and the raftpb messages
// of the raft transport (the ...ToProto and ...FromProto functions), used by
// the outbound calls (transport_group.go, transport_pipeline.go) and the
// inbound service (transport_server.go). How those messages are encoded on
// the wire is transport_wire.go's.

//lint:file-ignore SA1019 hashicorp/raft still fills and reads the deprecated Leader/Candidate fields (raft.go falls back to them), so the transport carries them unchanged.

package copyset

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/chunkraft/chunkraft/proto/chunkraft/raftpb"
)

// Conversions between hashicorp/raft's commands and the raftpb wire messages.
//
// Entry payloads (Log.Data, Log.Extensions) are never copied here, nor by the
// gRPC codec for AppendEntriesRequest (transport_wire.go). On the way out the
// proto message aliases raft's slices and the codec hands the large ones to
// gRPC by reference, which writes them to the connection after SendMsg has
// returned: safe because raft never mutates a log entry it handed to the
// transport. On the way in the codec sets the proto's payloads to alias the
// received message, and raft's Log aliases the proto's slices: safe to keep
// because that message buffer is never recycled (it is the codec's own
// allocation, or a gRPC buffer whose reference the codec never frees; the GC
// reclaims it once no entry points into it), and each payload's capacity
// ends at its length, so an append reallocates instead of overwriting the
// next field.

func headerToProto(h raft.RPCHeader) *raftpb.RPCHeader {
	out := &raftpb.RPCHeader{}
	headerInto(out, h)
	return out
}

// headerInto fills dst from h, aliasing its bytes.
func headerInto(dst *raftpb.RPCHeader, h raft.RPCHeader) {
	dst.ProtocolVersion, dst.Id, dst.Addr = int64(h.ProtocolVersion), h.ID, h.Addr
}

func headerFromProto(h *raftpb.RPCHeader) raft.RPCHeader {
	if h == nil {
		return raft.RPCHeader{}
	}
	return raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersion(h.ProtocolVersion),
		ID:              h.Id,
		Addr:            h.Addr,
	}
}

// timeToUnixNano maps the zero time to 0 (time.Time{}.UnixNano() is not 0).
func timeToUnixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func timeFromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// logToProto fills dst from l, aliasing Data and Extensions.
func logToProto(dst *raftpb.Log, l *raft.Log) {
	dst.Index = l.Index
	dst.Term = l.Term
	dst.Type = uint32(l.Type)
	dst.Data = l.Data
	dst.Extensions = l.Extensions
	dst.AppendedAt = timeToUnixNano(l.AppendedAt)
}

// logFromProto fills dst from l, aliasing Data and Extensions.
func logFromProto(dst *raft.Log, l *raftpb.Log) {
	dst.Index = l.Index
	dst.Term = l.Term
	dst.Type = raft.LogType(l.Type)
	dst.Data = l.Data
	dst.Extensions = l.Extensions
	dst.AppendedAt = timeFromUnixNano(l.AppendedAt)
}

// logsToProto converts entries with two allocations in total (one backing
// array for the messages, one for the pointer slice) instead of one per entry.
func logsToProto(entries []*raft.Log) []*raftpb.Log {
	if len(entries) == 0 {
		return nil
	}
	backing := make([]raftpb.Log, len(entries))
	out := make([]*raftpb.Log, len(entries))
	for i, l := range entries {
		logToProto(&backing[i], l)
		out[i] = &backing[i]
	}
	return out
}

func logsFromProto(entries []*raftpb.Log) []*raft.Log {
	if len(entries) == 0 {
		return nil
	}
	backing := make([]raft.Log, len(entries))
	out := make([]*raft.Log, len(entries))
	for i, l := range entries {
		logFromProto(&backing[i], l)
		out[i] = &backing[i]
	}
	return out
}

// aeRequestOut is an outbound AppendEntriesRequest with its header and,
// for a request of one entry (as most are), that entry and the array of
// the entries slice: one allocation for all of them.
type aeRequestOut struct {
	req  raftpb.AppendEntriesRequest
	hdr  raftpb.RPCHeader
	log  raftpb.Log
	logs [1]*raftpb.Log
}

func appendEntriesRequestToProto(group uint64, r *raft.AppendEntriesRequest) *raftpb.AppendEntriesRequest {
	b := &aeRequestOut{}
	headerInto(&b.hdr, r.RPCHeader)
	m := &b.req
	m.Group, m.Header, m.Term, m.Leader = group, &b.hdr, r.Term, r.Leader
	m.PrevLogEntry, m.PrevLogTerm, m.LeaderCommitIndex = r.PrevLogEntry, r.PrevLogTerm, r.LeaderCommitIndex
	if len(r.Entries) == 1 {
		logToProto(&b.log, r.Entries[0])
		b.logs[0] = &b.log
		m.Entries = b.logs[:]
	} else {
		m.Entries = logsToProto(r.Entries)
	}
	return m
}

// aeRequestIn is an inbound request converted for raft with, for a
// request of one entry, the array of its entries slice. The entries
// themselves are allocated apart: raft's log cache keeps them, and must
// not keep the request with them.
type aeRequestIn struct {
	req  raft.AppendEntriesRequest
	logs [1]*raft.Log
}

func appendEntriesRequestFromProto(r *raftpb.AppendEntriesRequest) *raft.AppendEntriesRequest {
	b := &aeRequestIn{req: raft.AppendEntriesRequest{
		RPCHeader:         headerFromProto(r.Header),
		Term:              r.Term,
		Leader:            r.Leader,
		PrevLogEntry:      r.PrevLogEntry,
		PrevLogTerm:       r.PrevLogTerm,
		LeaderCommitIndex: r.LeaderCommitIndex,
	}}
	if len(r.Entries) == 1 {
		l := new(raft.Log)
		logFromProto(l, r.Entries[0])
		b.logs[0] = l
		b.req.Entries = b.logs[:]
	} else {
		b.req.Entries = logsFromProto(r.Entries)
	}
	return &b.req
}

// aeResponseOut is an outbound AppendEntriesResponse with its header, in
// one allocation.
type aeResponseOut struct {
	resp raftpb.AppendEntriesResponse
	hdr  raftpb.RPCHeader
}

// appendEntriesResponseToProto converts raft's answer; a raft-level error
// travels in the Error field next to the response fields (as net_transport
// sends both).
func appendEntriesResponseToProto(resp raft.RPCResponse) *raftpb.AppendEntriesResponse {
	b := &aeResponseOut{}
	out := &b.resp
	if r, ok := resp.Response.(*raft.AppendEntriesResponse); ok && r != nil {
		headerInto(&b.hdr, r.RPCHeader)
		out.Header = &b.hdr
		out.Term = r.Term
		out.LastLog = r.LastLog
		out.Success = r.Success
		out.NoRetryBackoff = r.NoRetryBackoff
	}
	if resp.Error != nil {
		out.Error = resp.Error.Error()
	}
	return out
}

func appendEntriesResponseFromProto(r *raftpb.AppendEntriesResponse, dst *raft.AppendEntriesResponse) {
	dst.RPCHeader = headerFromProto(r.Header)
	dst.Term = r.Term
	dst.LastLog = r.LastLog
	dst.Success = r.Success
	dst.NoRetryBackoff = r.NoRetryBackoff
}

func requestVoteRequestToProto(group uint64, r *raft.RequestVoteRequest) *raftpb.RequestVoteRequest {
	return &raftpb.RequestVoteRequest{
		Group:              group,
		Header:             headerToProto(r.RPCHeader),
		Term:               r.Term,
		Candidate:          r.Candidate,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		LeadershipTransfer: r.LeadershipTransfer,
	}
}

func requestVoteRequestFromProto(r *raftpb.RequestVoteRequest) *raft.RequestVoteRequest {
	return &raft.RequestVoteRequest{
		RPCHeader:          headerFromProto(r.Header),
		Term:               r.Term,
		Candidate:          r.Candidate,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		LeadershipTransfer: r.LeadershipTransfer,
	}
}

func requestVoteResponseToProto(r *raft.RequestVoteResponse) *raftpb.RequestVoteResponse {
	if r == nil {
		return &raftpb.RequestVoteResponse{}
	}
	return &raftpb.RequestVoteResponse{
		Header:  headerToProto(r.RPCHeader),
		Term:    r.Term,
		Peers:   r.Peers,
		Granted: r.Granted,
	}
}

func requestVoteResponseFromProto(r *raftpb.RequestVoteResponse, dst *raft.RequestVoteResponse) {
	dst.RPCHeader = headerFromProto(r.Header)
	dst.Term = r.Term
	dst.Peers = r.Peers
	dst.Granted = r.Granted
}

func requestPreVoteRequestToProto(group uint64, r *raft.RequestPreVoteRequest) *raftpb.RequestPreVoteRequest {
	return &raftpb.RequestPreVoteRequest{
		Group:        group,
		Header:       headerToProto(r.RPCHeader),
		Term:         r.Term,
		LastLogIndex: r.LastLogIndex,
		LastLogTerm:  r.LastLogTerm,
	}
}

func requestPreVoteRequestFromProto(r *raftpb.RequestPreVoteRequest) *raft.RequestPreVoteRequest {
	return &raft.RequestPreVoteRequest{
		RPCHeader:    headerFromProto(r.Header),
		Term:         r.Term,
		LastLogIndex: r.LastLogIndex,
		LastLogTerm:  r.LastLogTerm,
	}
}

func requestPreVoteResponseToProto(r *raft.RequestPreVoteResponse) *raftpb.RequestPreVoteResponse {
	if r == nil {
		return &raftpb.RequestPreVoteResponse{}
	}
	return &raftpb.RequestPreVoteResponse{
		Header:  headerToProto(r.RPCHeader),
		Term:    r.Term,
		Granted: r.Granted,
	}
}

func requestPreVoteResponseFromProto(r *raftpb.RequestPreVoteResponse, dst *raft.RequestPreVoteResponse) {
	dst.RPCHeader = headerFromProto(r.Header)
	dst.Term = r.Term
	dst.Granted = r.Granted
}

func timeoutNowRequestToProto(group uint64, r *raft.TimeoutNowRequest) *raftpb.TimeoutNowRequest {
	return &raftpb.TimeoutNowRequest{Group: group, Header: headerToProto(r.RPCHeader)}
}

func timeoutNowRequestFromProto(r *raftpb.TimeoutNowRequest) *raft.TimeoutNowRequest {
	return &raft.TimeoutNowRequest{RPCHeader: headerFromProto(r.Header)}
}

func timeoutNowResponseToProto(r *raft.TimeoutNowResponse) *raftpb.TimeoutNowResponse {
	if r == nil {
		return &raftpb.TimeoutNowResponse{}
	}
	return &raftpb.TimeoutNowResponse{Header: headerToProto(r.RPCHeader)}
}

func timeoutNowResponseFromProto(r *raftpb.TimeoutNowResponse, dst *raft.TimeoutNowResponse) {
	dst.RPCHeader = headerFromProto(r.Header)
}

func installSnapshotRequestToProto(group uint64, r *raft.InstallSnapshotRequest) *raftpb.InstallSnapshotRequest {
	return &raftpb.InstallSnapshotRequest{
		Group:              group,
		Header:             headerToProto(r.RPCHeader),
		SnapshotVersion:    int64(r.SnapshotVersion),
		Term:               r.Term,
		Leader:             r.Leader,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		Peers:              r.Peers,
		Configuration:      r.Configuration,
		ConfigurationIndex: r.ConfigurationIndex,
		Size:               r.Size,
	}
}

func installSnapshotRequestFromProto(r *raftpb.InstallSnapshotRequest) *raft.InstallSnapshotRequest {
	return &raft.InstallSnapshotRequest{
		RPCHeader:          headerFromProto(r.Header),
		SnapshotVersion:    raft.SnapshotVersion(r.SnapshotVersion),
		Term:               r.Term,
		Leader:             r.Leader,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		Peers:              r.Peers,
		Configuration:      r.Configuration,
		ConfigurationIndex: r.ConfigurationIndex,
		Size:               r.Size,
	}
}

func installSnapshotResponseToProto(r *raft.InstallSnapshotResponse) *raftpb.InstallSnapshotResponse {
	if r == nil {
		return &raftpb.InstallSnapshotResponse{}
	}
	return &raftpb.InstallSnapshotResponse{
		Header:  headerToProto(r.RPCHeader),
		Term:    r.Term,
		Success: r.Success,
	}
}

func installSnapshotResponseFromProto(r *raftpb.InstallSnapshotResponse, dst *raft.InstallSnapshotResponse) {
	dst.RPCHeader = headerFromProto(r.Header)
	dst.Term = r.Term
	dst.Success = r.Success
}

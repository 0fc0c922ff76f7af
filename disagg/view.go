package disagg

import (
	"fmt"
	"hash/fnv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/chunkraft/chunkraft/copyset"
	"github.com/chunkraft/chunkraft/internal/kinds"
	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
)

// Read views: the types the chunkserver and this package share (see the
// package doc, "Read views").

// ViewConfig bounds the read views (the chunkserver's disagg.views
// section).
type ViewConfig struct {
	// MaxPerCopyset bounds the live views of one copyset; Establish past
	// it answers error_other. Default 4.
	MaxPerCopyset int `yaml:"max_per_copyset"`
	// MaxPreimageBytes bounds the pre-image bytes one view keeps in one
	// copyset; a view past it is dropped and its next Fetch answers an
	// error. Default 256 MiB.
	MaxPreimageBytes uint64 `yaml:"max_preimage_bytes"`
	// PacketBytes is where a FetchDisaggPages packet is cut (upstream's
	// dt_fetch_pages_packet_limit_size). Default 512 KiB.
	PacketBytes int `yaml:"packet_bytes"`
	// DefaultTimeout is the lease of an Establish whose timeout_s is not
	// positive. Default 1800 s (upstream's disagg_task_snapshot_timeout).
	DefaultTimeout time.Duration `yaml:"default_timeout"`
	// MaxTimeout bounds a lease. Default 24 h.
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// LeaseCheck is how often a leader looks for expired and over-budget
	// views. Default 1 s.
	LeaseCheck time.Duration `yaml:"lease_check"`
	// CancelTimeout bounds a CancelDisaggTask: how long the server it
	// reached keeps asking the leaders of the task's copysets to drop
	// their views (view_cancel.go). Default 5 s.
	CancelTimeout time.Duration `yaml:"cancel_timeout"`
}

// DefaultViewConfig is the default bounds.
func DefaultViewConfig() ViewConfig {
	return ViewConfig{MaxPerCopyset: 4, MaxPreimageBytes: 256 << 20, PacketBytes: 512 << 10,
		DefaultTimeout: 1800 * time.Second, MaxTimeout: 24 * time.Hour, LeaseCheck: time.Second, CancelTimeout: 5 * time.Second}
}

// Validate checks the bounds.
func (c ViewConfig) Validate() error {
	switch {
	case c.MaxPerCopyset < 1 || c.MaxPerCopyset > 64:
		return fmt.Errorf("disagg.views.max_per_copyset %d: must be 1..64", c.MaxPerCopyset)
	case c.MaxPreimageBytes < 1<<20:
		return fmt.Errorf("disagg.views.max_preimage_bytes %d: must be at least 1 MiB", c.MaxPreimageBytes)
	case c.PacketBytes < 4<<10 || c.PacketBytes > 64<<20:
		return fmt.Errorf("disagg.views.packet_bytes %d: must be 4 KiB..64 MiB", c.PacketBytes)
	case c.DefaultTimeout <= 0 || c.MaxTimeout < c.DefaultTimeout:
		return fmt.Errorf("disagg.views.default_timeout %v, max_timeout %v: need 0 < default <= max", c.DefaultTimeout, c.MaxTimeout)
	case c.LeaseCheck <= 0:
		return fmt.Errorf("disagg.views.lease_check %v: must be positive", c.LeaseCheck)
	case c.CancelTimeout <= 0 || c.CancelTimeout > 5*time.Minute:
		return fmt.Errorf("disagg.views.cancel_timeout %v: must be in (0, 5m]", c.CancelTimeout)
	}
	return nil
}

// RefreshLease is how far a Fetch extends its task's lease (upstream's
// DEFAULT_DISAGG_TASK_REFRESH_SEC); also the grace a new leader gives a
// view it finds (any extension its predecessor granted ends before it).
const RefreshLease = 300 * time.Second

// ViewApplied is the apply result of a view op: the register op's
// sequence number (the view's identity), or the refusal Err (invalid op;
// the same on every replica).
type ViewApplied struct {
	Seq uint64
	Err error
}

// EncodeViewOp is op as a replicated op of kind view.
func EncodeViewOp(op *vpb.Op) ([]byte, error) { return copyset.EncodeOp(kinds.View, op) }

// DecodeViewOp decodes a view op's payload.
func DecodeViewOp(payload []byte) (*vpb.Op, error) {
	op := &vpb.Op{}
	if err := proto.Unmarshal(payload, op); err != nil {
		return nil, fmt.Errorf("decode view op: %w", err)
	}
	return op, nil
}

// MarshalViewInfo is the deterministic encoding of a view's info, as its
// info file holds it.
func MarshalViewInfo(info *vpb.ViewInfo) ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(info)
}

// UnmarshalViewInfo decodes a view's info.
func UnmarshalViewInfo(b []byte) (*vpb.ViewInfo, error) {
	info := &vpb.ViewInfo{}
	if err := proto.Unmarshal(b, info); err != nil {
		return nil, fmt.Errorf("decode view info: %w", err)
	}
	return info, nil
}

// Page ids: chunk_id << pageBlockBits | block index.
const pageBlockBits = 20

// PageID is the page id of block of chunk.
func PageID(chunk uint64, block uint32) uint64 { return chunk<<pageBlockBits | uint64(block) }

// SplitPageID is the chunk and block of page id.
func SplitPageID(id uint64) (uint64, uint32) {
	return id >> pageBlockBits, uint32(id & (1<<pageBlockBits - 1))
}

// taskKey is the identity of a disagg task (upstream DisaggTaskId plus the
// executor id).
func taskKey(m *dpb.DisaggTaskMeta) string {
	return fmt.Sprintf("%d/%d/%d/%d/%d/%d/%d/%q/%q", m.GetStartTs(), m.GetTaskId(), m.GetServerId(), m.GetGatherId(),
		m.GetQueryTs(), m.GetLocalQueryId(), m.GetConnectionId(), m.GetConnectionAlias(), m.GetExecutorId())
}

// StoreIDOf is a server's store_id in EstablishDisaggTask answers: the
// FNV-1a 64 hash of its peer id (its advertised address), stable across
// restarts.
func StoreIDOf(peer string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(peer))
	return h.Sum64()
}

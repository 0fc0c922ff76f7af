package cli

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	vpb "github.com/chunkraft/chunkraft/proto/chunkraft/viewpb"
	coprocessor "github.com/chunkraft/chunkraft/proto/kvproto/coprocessor"
	dpb "github.com/chunkraft/chunkraft/proto/kvproto/disaggregated"
	"github.com/chunkraft/chunkraft/proto/kvproto/metapb"
	"github.com/chunkraft/chunkraft/proto/kvproto/tikvpb"
)

// The disagg read views (docs/disagg-views.md): a view is
// established and fetched on the copyset's leader; a task is named by
// its start ts and task id (the other DisaggTaskMeta fields 0).

// ViewTaskMeta is the DisaggTaskMeta chunkctl sends for task (startTs,
// taskID).
func ViewTaskMeta(startTs uint64, taskID int64) *dpb.DisaggTaskMeta {
	return &dpb.DisaggTaskMeta{StartTs: startTs, TaskId: taskID}
}

// ViewEstablished is an EstablishDisaggTask answer, its tables decoded.
type ViewEstablished struct {
	Server  string
	StoreID uint64
	Tables  []*vpb.Table
}

// ViewEstablish is EstablishDisaggTask for the chunks [lo, hi) (hi 0: no
// bound) of cs on its leader, with the copyset's epoch as conf_ver; an
// error_region (the leader moved) is retried, an error_other is the error.
func (c *Client) ViewEstablish(parent context.Context, cs CopysetID, meta *dpb.DisaggTaskMeta, lo, hi uint64, timeoutS int64) (*ViewEstablished, error) {
	ctx, cancel := c.withDeadline(parent)
	defer cancel()
	region := func(epoch uint64) *coprocessor.RegionInfo {
		r := &coprocessor.RegionInfo{RegionId: cs.GroupID(), RegionEpoch: &metapb.RegionEpoch{ConfVer: epoch}}
		kr := &coprocessor.KeyRange{Start: binary.BigEndian.AppendUint64(nil, lo)}
		if hi != 0 {
			kr.End = binary.BigEndian.AppendUint64(nil, hi)
		}
		r.Ranges = []*coprocessor.KeyRange{kr}
		return r
	}
	bo := newBackoff()
	var last error
	for ctx.Err() == nil {
		addr, err := c.viewLeader(ctx, cs)
		if err != nil {
			return nil, err
		}
		st := c.replicaStatus(ctx, cs, addr, false)
		if st.Err != nil {
			last = st.Err
			bo.wait(ctx)
			continue
		}
		var resp *dpb.EstablishDisaggTaskResponse
		err = c.callOnce(ctx, addr, func(ctx context.Context, cc grpc.ClientConnInterface) error {
			var err error
			resp, err = tikvpb.NewTikvClient(cc).EstablishDisaggTask(ctx, &dpb.EstablishDisaggTaskRequest{
				Meta: meta, TimeoutS: timeoutS, Regions: []*coprocessor.RegionInfo{region(st.Epoch)}})
			return err
		})
		switch {
		case err != nil:
			if !retryable(err) {
				return nil, fmt.Errorf("%s: %w", addr, err)
			}
			last = err
		case resp.GetError().GetErrorRegion() != nil:
			last = fmt.Errorf("%s: error_region: %s", addr, resp.GetError().GetErrorRegion().GetMsg())
		case resp.GetError().GetErrorOther() != nil:
			o := resp.GetError().GetErrorOther()
			return nil, fmt.Errorf("%s: error_other %d: %s", addr, o.GetCode(), o.GetMsg())
		default:
			out := &ViewEstablished{Server: addr, StoreID: resp.GetStoreId()}
			for _, b := range resp.GetTables() {
				tb := &vpb.Table{}
				if err := proto.Unmarshal(b, tb); err != nil {
					return nil, fmt.Errorf("%s: decode table: %w", addr, err)
				}
				out.Tables = append(out.Tables, tb)
			}
			return out, nil
		}
		if !bo.wait(ctx) {
			break
		}
	}
	return nil, fmt.Errorf("establish a read view on %s: %w", cs, errors.Join(last, ctx.Err()))
}

// viewLeader is the address of cs's leader.
func (c *Client) viewLeader(ctx context.Context, cs CopysetID) (string, error) {
	id, err := c.GetLeader(ctx, cs)
	if err != nil {
		return "", err
	}
	return PeerAddr(id)
}

// ViewFetch is FetchDisaggPages of segment cs of task meta on the
// copyset's leader: each page in turn to each (its Data aliases the
// packet it came in); an error packet is the error. A segment is fetched
// once: there is no retry.
func (c *Client) ViewFetch(parent context.Context, cs CopysetID, meta *dpb.DisaggTaskMeta, ids []uint64, each func(*vpb.Page) error) error {
	ctx, cancel := c.withDeadline(parent)
	defer cancel()
	addr, err := c.viewLeader(ctx, cs)
	if err != nil {
		return err
	}
	cc, err := c.conn(addr)
	if err != nil {
		return err
	}
	st, err := tikvpb.NewTikvClient(cc).FetchDisaggPages(ctx, &dpb.FetchDisaggPagesRequest{SnapshotId: meta,
		TableId: int64(cs.Pool), SegmentId: uint64(cs.Copyset), PageIds: ids})
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	for {
		pkt, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: fetch: %w", addr, err)
		}
		if e := pkt.GetError(); e != nil {
			return fmt.Errorf("%s: fetch: error %d: %s", addr, e.GetCode(), e.GetMsg())
		}
		for _, b := range pkt.GetPages() {
			p := &vpb.Page{}
			if err := decodePage(b, p); err != nil {
				return fmt.Errorf("%s: decode page: %w", addr, err)
			}
			if err := each(p); err != nil {
				return err
			}
		}
	}
}

// ViewCancel is CancelDisaggTask on one server, which drops the task's
// views on every copyset (asking their leaders); the next server when it
// fails. When none succeeded, the error has each server's.
func (c *Client) ViewCancel(ctx context.Context, meta *dpb.DisaggTaskMeta) error {
	var errs []error
	for _, addr := range c.Servers() {
		err := c.callWithin(ctx, addr, c.changeAttempt(), func(ctx context.Context, cc grpc.ClientConnInterface) error {
			_, err := tikvpb.NewTikvClient(cc).CancelDisaggTask(ctx, &dpb.CancelDisaggTaskRequest{Meta: meta})
			return err
		})
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("cancel: %w", errors.Join(errs...))
}

// ViewList is DisaggViews.List on every server: the views of the
// copysets each leads. A server that cannot be asked is an error.
func (c *Client) ViewList(ctx context.Context) ([]*vpb.ViewStatus, error) {
	var out []*vpb.ViewStatus
	for _, addr := range c.Servers() {
		err := c.callOnce(ctx, addr, func(ctx context.Context, cc grpc.ClientConnInterface) error {
			resp, err := vpb.NewDisaggViewsClient(cc).List(ctx, &vpb.ListRequest{})
			if err != nil {
				return err
			}
			out = append(out, resp.GetViews()...)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: list read views: %w", addr, err)
		}
	}
	return out, nil
}

// decodeTaskMeta decodes a view's DisaggTaskMeta.
func decodeTaskMeta(b []byte) (*dpb.DisaggTaskMeta, error) {
	m := &dpb.DisaggTaskMeta{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("decode task meta: %w", err)
	}
	return m, nil
}

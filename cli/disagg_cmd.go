package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// chunkctl disagg: the disagg service (TiFlash's disaggregated RPCs): its
// object store configuration and the lock service.

func newDisaggCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "disagg",
		Short: "The disagg service: the S3 lock service's locks and delete marks, the object store it serves, read views",
		Long: `The disagg service answers TiFlash's disaggregated RPCs (tikvpb.Tikv). Its lock
service keeps, per data file key (s{store}/data/{subpath}), the locks readers
hold and the delete marks of the garbage collector, replicated on the lock
copyset (disagg.lock_copyset, default 1/1); its leader is the owner. A lock is
refused on a missing or marked file, a mark on a locked file. The lock and
.del objects are written to the servers' object store under upstream's names.
An @s3 clone chunk locks its source object in the same table (holder
clone:{pool}/{copyset}/{chunk}) until it is recovered or deleted; disagg gc
marks and removes the objects under a prefix that no lock holds. Read views
(disagg view) keep chunks as of one point for remote readers.`,
	}
	lock := &cobra.Command{Use: "lock", Short: "Add, mark deleted, list and release data file locks"}
	lock.AddCommand(newDisaggLockAddCommand(a), newDisaggMarkDeleteCommand(a), newDisaggLockListCommand(a), newDisaggReleaseCommand(a))
	cmd.AddCommand(newDisaggConfigCommand(a), lock, newDisaggGcCommand(a), newDisaggViewCommand(a))
	return cmd
}

func newDisaggConfigCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "The servers' S3 object store as GetDisaggConfig answers: bucket, root (key prefix), endpoint",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				s, err := c.DisaggConfig(ctx)
				if err != nil {
					return err
				}
				return a.printer(cmd).print(map[string]string{"bucket": s.GetBucket(), "root": s.GetRoot(), "endpoint": s.GetEndpoint()},
					[]string{"BUCKET", "ROOT", "ENDPOINT"}, [][]string{{s.GetBucket(), s.GetRoot(), s.GetEndpoint()}})
			})
		},
	}
}

// printLockAnswer prints a tryAddLock / tryMarkDelete answer; a conflict
// is an error (exit 1) after the row.
func (a *app) printLockAnswer(cmd *cobra.Command, key string, ans LockAnswer) error {
	result := "success"
	if !ans.Success {
		result = "conflict"
	}
	if err := a.printer(cmd).print(map[string]string{"key": key, "result": result, "reason": ans.Conflict},
		[]string{"KEY", "RESULT", "REASON"}, [][]string{{key, result, ans.Conflict}}); err != nil {
		return err
	}
	if !ans.Success {
		return fmt.Errorf("conflict: %s", ans.Conflict)
	}
	return nil
}

func newDisaggLockAddCommand(a *app) *cobra.Command {
	var key string
	var store, seq uint64
	cmd := &cobra.Command{
		Use:   "add --key K --store S --seq N",
		Short: "tryAddLock: lock data file K for store S at its upload sequence N (conflict: missing or marked deleted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				ans, err := c.DisaggAddLock(ctx, key, store, seq)
				if err != nil {
					return err
				}
				return a.printLockAnswer(cmd, key, ans)
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "data file key s{store}/data/{subpath}")
	cmd.Flags().Uint64Var(&store, "store", 0, "the store that holds the lock (lock_store_id)")
	cmd.Flags().Uint64Var(&seq, "seq", 0, "the lock's sequence (lock_seq: the store's upload sequence)")
	for _, r := range []string{"key", "store", "seq"} {
		_ = cmd.MarkFlagRequired(r)
	}
	return cmd
}

func newDisaggMarkDeleteCommand(a *app) *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "mark-delete --key K",
		Short: "tryMarkDelete: mark data file K deleted (conflict: a lock holds it)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				ans, err := c.DisaggMarkDelete(ctx, key)
				if err != nil {
					return err
				}
				return a.printLockAnswer(cmd, key, ans)
			})
		},
	}
	cmd.Flags().StringVar(&key, "key", "", "data file key s{store}/data/{subpath}")
	_ = cmd.MarkFlagRequired("key")
	return cmd
}

// disaggFileJSON is one entry of disagg lock list -o json.
type disaggFileJSON struct {
	Key        string                `json:"key"`
	Deleted    bool                  `json:"deleted"`
	Locks      []disaggLockJSON      `json:"locks"`
	CloneLocks []disaggCloneLockJSON `json:"clone_locks"`
	Pending    []disaggPendingJSON   `json:"pending"`
}

// disaggPendingJSON is a lock or delete-mark decision in flight on the
// owner (until its object is written or its refusal answered).
type disaggPendingJSON struct {
	Kind  string `json:"kind"` // "lock" or "mark"
	Store uint64 `json:"store,omitempty"`
	Seq   uint64 `json:"seq,omitempty"`
	Index uint64 `json:"index"`
}

// disaggCloneLockJSON is a clone chunk's lock on its source object.
type disaggCloneLockJSON struct {
	Holder string `json:"holder"` // clone:{pool}/{copyset}/{chunk}
	Index  uint64 `json:"index"`
	Taken  string `json:"taken"` // RFC 3339, the owner's clock
}

type disaggLockJSON struct {
	Store uint64 `json:"store"`
	Seq   uint64 `json:"seq"`
	Index uint64 `json:"index"`
}

func newDisaggLockListCommand(a *app) *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "list [--prefix P]",
		Short: "Locks and delete marks on the owner: upstream's lock objects (s{store}_{seq}) and .del objects in S3, clone locks (clone:{pool}/{copyset}/{chunk}), gc marks, decisions in flight",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				resp, err := c.DisaggList(ctx, prefix)
				if err != nil {
					return err
				}
				js := []disaggFileJSON{}
				var rows [][]string
				for _, f := range withPending(resp.GetFiles(), resp.GetPending()) {
					j := disaggFileJSON{Key: f.GetKey(), Deleted: f.GetDeleted(), Locks: []disaggLockJSON{}, CloneLocks: []disaggCloneLockJSON{},
						Pending: []disaggPendingJSON{}}
					var locks, pending []string
					for _, p := range resp.GetPending() {
						if p.GetKey() != f.GetKey() {
							continue
						}
						if p.GetMark() {
							j.Pending = append(j.Pending, disaggPendingJSON{Kind: "mark", Index: p.GetIndex()})
							pending = append(pending, fmt.Sprintf("mark@%d", p.GetIndex()))
							continue
						}
						j.Pending = append(j.Pending, disaggPendingJSON{Kind: "lock", Store: p.GetStoreId(), Seq: p.GetSeq(), Index: p.GetIndex()})
						pending = append(pending, fmt.Sprintf("s%d_%d@%d", p.GetStoreId(), p.GetSeq(), p.GetIndex()))
					}
					for _, l := range f.GetLocks() {
						j.Locks = append(j.Locks, disaggLockJSON{Store: l.GetStoreId(), Seq: l.GetSeq(), Index: l.GetIndex()})
						locks = append(locks, fmt.Sprintf("s%d_%d", l.GetStoreId(), l.GetSeq()))
					}
					for _, l := range f.GetCloneLocks() {
						h := fmt.Sprintf("clone:%d/%d/%d", l.GetPool(), l.GetCopyset(), l.GetChunk())
						j.CloneLocks = append(j.CloneLocks, disaggCloneLockJSON{Holder: h, Index: l.GetIndex(),
							Taken: time.UnixMilli(l.GetTimeMs()).UTC().Format(time.RFC3339)})
						locks = append(locks, h)
					}
					js = append(js, j)
					rows = append(rows, []string{f.GetKey(), strconv.FormatBool(f.GetDeleted()), strings.Join(locks, " "), strings.Join(pending, " ")})
				}
				return a.printer(cmd).print(js, []string{"KEY", "MARKED DELETED", "LOCKS", "PENDING"}, rows)
			})
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "only keys (object names) starting with this")
	return cmd
}

func newDisaggReleaseCommand(a *app) *cobra.Command {
	var store, upTo uint64
	cmd := &cobra.Command{
		Use:   "release --store S --up-to-seq N",
		Short: "Delete store S's lock objects with seq <= N (a lock is its object in S3)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				released, err := c.DisaggRelease(ctx, store, upTo)
				if err != nil {
					return err
				}
				rows := make([][]string, len(released))
				for i, k := range released {
					rows[i] = []string{k}
				}
				if released == nil {
					released = []string{}
				}
				return a.printer(cmd).print(map[string]any{"store": store, "up_to_seq": upTo, "released": released},
					[]string{"RELEASED LOCK"}, rows)
			})
		},
	}
	cmd.Flags().Uint64Var(&store, "store", 0, "the store whose locks go (lock_store_id)")
	cmd.Flags().Uint64Var(&upTo, "up-to-seq", 0, "release its locks with seq <= this")
	_ = cmd.MarkFlagRequired("store")
	_ = cmd.MarkFlagRequired("up-to-seq")
	return cmd
}

// withPending returns files with an entry added for each key that only
// has decisions in flight, ascending by key.
func withPending(files []*disaggpb.DataFile, pending []*disaggpb.Pending) []*disaggpb.DataFile {
	seen := map[string]bool{}
	for _, f := range files {
		seen[f.GetKey()] = true
	}
	for _, p := range pending {
		if !seen[p.GetKey()] {
			seen[p.GetKey()] = true
			files = append(files, &disaggpb.DataFile{Key: p.GetKey()})
		}
	}
	slices.SortFunc(files, func(a, b *disaggpb.DataFile) int { return strings.Compare(a.GetKey(), b.GetKey()) })
	return files
}

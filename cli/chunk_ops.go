package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Commands for COW snapshots, clone chunks and replica hashes.

func newChunkSnapshotReadCommand(a *app) *cobra.Command {
	var f chunkFlags
	var offset, size, out string
	var sn uint64
	cmd := &cobra.Command{
		Use:   "snapshot-read --pool P --copyset C --chunk ID --sn S [--offset N] --size N [--out FILE]",
		Short: "Read bytes of a chunk's version sn (its COW snapshot) to a file or stdout",
		Long: `Reads version --sn of a chunk from the copyset's leader (ReadChunkSnapshot):
after a write with a newer sn, the chunk's previous version is kept as a COW
snapshot and can be read here. Output works as in chunk read: raw bytes on
stdout, base64 in a JSON object with -o json, or --out FILE and a summary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if sn == 0 {
				return errors.New("--sn: must be > 0")
			}
			off, err := parseSize32("offset", offset)
			if err != nil {
				return err
			}
			n, err := parseSize32("size", size)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				data, err := c.ReadChunkSnapshot(ctx, id, sn, off, n)
				if err != nil {
					return err
				}
				return printData(a.printer(cmd), chunkIOJSON{ChunkID: id, Offset: off, Sn: sn}, data, out)
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().Uint64Var(&sn, "sn", 0, "the version (sequence number) to read")
	cmd.Flags().StringVar(&offset, "offset", "0", "byte offset in the chunk (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&size, "size", "", "bytes to read (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&out, "out", "", "file to write the bytes to (default stdout)")
	_ = cmd.MarkFlagRequired("sn")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}

type deleteSnapshotJSON struct {
	ChunkID
	CorrectedSn uint64 `json:"correctedSn"`
	Result      string `json:"result"`
}

func newChunkDeleteSnapshotCommand(a *app) *cobra.Command {
	var f chunkFlags
	var corrected uint64
	cmd := &cobra.Command{
		Use:   "delete-snapshot --pool P --copyset C --chunk ID --corrected-sn N",
		Short: "Delete a chunk's COW snapshot, or set its corrected sn if it has none",
		Long: `Sends DeleteChunkSnapshotOrCorrectSn through the copyset's leader: the chunk's
COW snapshot is deleted; a chunk without one records --corrected-sn as its
corrected sequence number, so that a later write with that sn does not make a
snapshot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				if err := c.DeleteChunkSnapshotOrCorrectSn(ctx, id, corrected); err != nil {
					return err
				}
				j := deleteSnapshotJSON{ChunkID: id, CorrectedSn: corrected, Result: "done"}
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "CHUNK", "CORRECTED-SN", "RESULT"},
					[][]string{chunkRow(id, u64(corrected), j.Result)})
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().Uint64Var(&corrected, "corrected-sn", 0, "corrected sequence number (used when there is no snapshot)")
	_ = cmd.MarkFlagRequired("corrected-sn")
	return cmd
}

type cloneJSON struct {
	ChunkID
	Location    string `json:"location"`
	Sn          uint64 `json:"sn"`
	CorrectedSn uint64 `json:"correctedSn"`
	Size        uint32 `json:"size"`
}

func newChunkCloneCommand(a *app) *cobra.Command {
	var f chunkFlags
	var location string
	var sn, corrected uint64
	cmd := &cobra.Command{
		Use:   "clone --pool P --copyset C --chunk ID --location LOC [--sn 1] [--corrected-sn 0]",
		Short: "Create a clone chunk that reads unwritten blocks from a source (CreateCloneChunk)",
		Long: `Creates a 16 MiB clone chunk through the copyset's leader. Blocks not yet
written read from the source; chunk recover copies them in for good.

--location is one of
  <pool>/<copyset>/<chunkId>:<offset>@cs   a chunk of this cluster; block X of the
                                           clone reads source bytes offset+X
                                           (offset: a multiple of 4096, < 16 MiB)
  <object>@s3                              an object in the servers' object store

An @s3 source is first locked for the clone in the disagg lock table, so that
chunkctl disagg gc never collects it while the clone reads from it; a source
marked deleted is refused (FailedPrecondition) and nothing is created. The lock
goes once the clone is recovered or deleted (docs/disagg-gc.md).

Creating the same clone again succeeds; an existing chunk with another location
or sn is refused with CHUNK_OP_STATUS_CHUNK_EXIST.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if sn == 0 {
				return errors.New("--sn: must be > 0")
			}
			if _, err := ParseCloneLocation(location); err != nil {
				return fmt.Errorf("--location: %w", err)
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				if err := c.CreateCloneChunk(ctx, id, location, sn, corrected); err != nil {
					return err
				}
				j := cloneJSON{ChunkID: id, Location: location, Sn: sn, CorrectedSn: corrected, Size: CloneChunkSize}
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "CHUNK", "LOCATION", "SN", "CORRECTED-SN"},
					[][]string{chunkRow(id, location, u64(sn), u64(corrected))})
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().StringVar(&location, "location", "", "clone source: <pool>/<copyset>/<chunkId>:<offset>@cs or <object>@s3")
	cmd.Flags().Uint64Var(&sn, "sn", 1, "sequence number of the clone chunk")
	cmd.Flags().Uint64Var(&corrected, "corrected-sn", 0, "corrected sequence number of the clone chunk")
	_ = cmd.MarkFlagRequired("location")
	return cmd
}

type recoverJSON struct {
	ChunkID
	Offset uint32 `json:"offset"`
	Size   uint32 `json:"size"`
	Result string `json:"result"`
}

func newChunkRecoverCommand(a *app) *cobra.Command {
	var f chunkFlags
	var offset, size string
	cmd := &cobra.Command{
		Use:   "recover --pool P --copyset C --chunk ID [--offset N] --size N",
		Short: "Copy a clone chunk's unwritten blocks in a range from its source (RecoverChunk)",
		Long: `The copyset's leader reads the blocks of [offset, offset+size) that were never
written from the clone's source and replicates them into the chunk; blocks a
client wrote are left alone. On a normal chunk it changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			off, err := parseSize32("offset", offset)
			if err != nil {
				return err
			}
			n, err := parseSize32("size", size)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				if err := c.RecoverChunk(ctx, id, off, n); err != nil {
					return err
				}
				j := recoverJSON{ChunkID: id, Offset: off, Size: n, Result: "recovered"}
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "CHUNK", "OFFSET", "SIZE", "RESULT"},
					[][]string{chunkRow(id, u64(uint64(off)), u64(uint64(n)), j.Result)})
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().StringVar(&offset, "offset", "0", "byte offset in the chunk (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&size, "size", "", "bytes to recover (4096, 4k, 1MiB)")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}

type replicaHashJSON struct {
	Server   string `json:"server"`
	Status   string `json:"status,omitempty"`
	Hash     string `json:"hash,omitempty"`
	Applied  *int64 `json:"appliedIndex,omitempty"` // the applied index the hash covers, when reported
	Mismatch bool   `json:"mismatch,omitempty"`
	Error    string `json:"error,omitempty"`
}

type chunkHashJSON struct {
	ChunkID
	Offset     uint32            `json:"offset"`
	Length     uint32            `json:"length"`
	Replicas   []replicaHashJSON `json:"replicas"`
	Consistent bool              `json:"consistent"`
	// Unsettled: the hashes differ, but the replicas never reached a common
	// applied index, so they were not compared.
	Unsettled bool `json:"unsettled,omitempty"`
}

func newChunkHashCommand(a *app) *cobra.Command {
	var f chunkFlags
	var offset, length string
	cmd := &cobra.Command{
		Use:   "hash --pool P --copyset C --chunk ID [--offset 0] [--length 16m]",
		Short: "Compare a chunk's hash on every replica (asks all --servers); fails on a mismatch",
		Long: `Asks every server in --servers for the crc32c of [offset, offset+length) of
the chunk's data (GetChunkHash reads the replica's local data, leader or not)
and prints one row per replica with the applied index the hash covers;
servers that do not host the copyset are left out. A missing chunk hashes to 0.

Replicas are compared at the same applied index: a follower applies a write
a moment after the leader acknowledged it (the leader's GetChunkHash tells
the followers its commit index at once), so while hashes differ between
replicas at different indices it asks again, for up to 5s. Replicas at the
same index with different hashes are a divergence: the ones whose hash differs
from the most common one are marked MISMATCH (all of them when there is a
tie). If the replicas never reach a common index (writes keep coming) the
hashes are not compared, and the command says so.

Fails on a divergence, on replicas not compared, when a server could not be
asked (it may host a replica) or when no server hosts the copyset.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			off, err := parseSize32("offset", offset)
			if err != nil {
				return err
			}
			n, err := parseSize32("length", length)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				rows, hc, err := c.SettledChunkHashes(ctx, id, off, n, hashSettle)
				if err != nil {
					return err
				}
				return printHashes(a.printer(cmd), id, off, n, rows, hc)
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().StringVar(&offset, "offset", "0", "byte offset in the chunk's data (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&length, "length", "16m", "bytes to hash (4096, 4k, 1MiB)")
	return cmd
}

func printHashes(p *printer, id ChunkID, off, n uint32, rows []ReplicaHash, hc HashCheck) error {
	j := chunkHashJSON{ChunkID: id, Offset: off, Length: n, Replicas: []replicaHashJSON{}, Consistent: hc.Consistent, Unsettled: hc.Unsettled}
	var table [][]string
	var mismatched, indices []string
	for i, r := range rows {
		if !r.Hosted {
			continue
		}
		rj := replicaHashJSON{Server: r.Server, Hash: r.Hash, Mismatch: hc.Mismatch[i], Error: errText(r.Err)}
		if r.Replied {
			rj.Status = r.Status.String()
		}
		applied := ""
		if r.Err == nil && r.HasApplied {
			rj.Applied, applied = &r.Applied, i64(r.Applied)
		}
		j.Replicas = append(j.Replicas, rj)
		check := ""
		switch {
		case r.Err != nil:
			check = "ERROR"
		case hc.Mismatch[i]:
			check = "MISMATCH"
			mismatched = append(mismatched, r.Server)
		case hc.Unsettled:
			check = "not compared"
			indices = append(indices, r.Server+"="+cmp.Or(applied, "?"))
		default:
			check = "ok"
		}
		row := []string{r.Server, rj.Status, applied, r.Hash, check}
		if hc.Failed > 0 {
			row = append(row, cellError(r.Err))
		}
		table = append(table, row)
	}
	header := []string{"SERVER", "STATUS", "APPLIED", "HASH", "CHECK"}
	if hc.Failed > 0 {
		header = append(header, "ERROR")
	}
	if err := p.print(j, header, table); err != nil {
		return err
	}
	var problems []string
	if hc.Diverged {
		problems = append(problems, fmt.Sprintf("replicas disagree: %d distinct hashes on %d replicas, mismatch on %s",
			hc.Distinct, hc.Replicas, strings.Join(mismatched, ", ")))
	}
	if hc.Unsettled && hc.Failed == 0 {
		problems = append(problems, fmt.Sprintf("not compared: the replicas did not reach a common applied index within %s (%s); "+
			"writes are still arriving, run it again when they pause", hashSettle, strings.Join(indices, ", ")))
	}
	if hc.Failed > 0 {
		for i, r := range rows {
			if r.Err != nil {
				problems = append(problems, fmt.Sprintf("%d of %d servers could not be compared; first: %s: %v",
					hc.Failed, len(rows), rows[i].Server, r.Err))
				break
			}
		}
	}
	if hc.Replicas == 0 && hc.Failed == 0 {
		problems = append(problems, "no server in --servers hosts "+id.CopysetID.String())
	}
	if len(problems) > 0 {
		return fmt.Errorf("hash %s: %s", id, strings.Join(problems, "; "))
	}
	return nil
}

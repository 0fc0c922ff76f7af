package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	chunkserverpb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
)

// maxWriteInput bounds what `chunk write` reads into memory: one chunk.
const maxWriteInput = ChunkSize

func newChunkCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chunk",
		Short: "Read, write, inspect, snapshot, clone, hash and delete chunks",
	}
	cmd.AddCommand(newChunkWriteCommand(a), newChunkReadCommand(a), newChunkInfoCommand(a), newChunkDeleteCommand(a),
		newChunkSnapshotReadCommand(a), newChunkDeleteSnapshotCommand(a), newChunkCloneCommand(a),
		newChunkRecoverCommand(a), newChunkHashCommand(a))
	return cmd
}

// chunkFlags are --pool, --copyset and --chunk.
type chunkFlags struct {
	cs    copysetFlags
	chunk uint64
}

func addChunkFlags(cmd *cobra.Command, f *chunkFlags) {
	addCopysetFlags(cmd, &f.cs, false)
	cmd.Flags().Uint64Var(&f.chunk, "chunk", 0, "chunk id")
	_ = cmd.MarkFlagRequired("chunk")
}

func (f *chunkFlags) id() ChunkID { return ChunkID{CopysetID: f.cs.one(), Chunk: f.chunk} }

// fenceFlags are --file-id and --epoch of mutating commands.
type fenceFlags struct {
	fileID, epoch uint64
}

func addFenceFlags(cmd *cobra.Command, f *fenceFlags) {
	cmd.Flags().Uint64Var(&f.fileID, "file-id", 0, "file id the request is fenced by (with --epoch)")
	cmd.Flags().Uint64Var(&f.epoch, "epoch", 0, "file epoch the request is made under (with --file-id); servers that know a newer epoch refuse it")
}

// fence returns the Fence of --file-id and --epoch, nil when neither is given.
func (f *fenceFlags) fence(cmd *cobra.Command) (*Fence, error) {
	file, epoch := cmd.Flags().Changed("file-id"), cmd.Flags().Changed("epoch")
	switch {
	case file && epoch:
		return &Fence{FileID: f.fileID, Epoch: f.epoch}, nil
	case file:
		return nil, errors.New("--file-id needs --epoch: give both or neither")
	case epoch:
		return nil, errors.New("--epoch needs --file-id: give both or neither")
	}
	return nil, nil
}

// fenceError adds what EPOCH_TOO_OLD means to err.
func fenceError(err error, f *Fence) error {
	if f != nil && IsChunkStatus(err, chunkserverpb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_EPOCH_TOO_OLD) {
		return fmt.Errorf("%w (a server holds a newer epoch of file %d than %d)", err, f.FileID, f.Epoch)
	}
	return err
}

// fenceCells are the table header and cells of a fence, none without one.
func fenceCells(f *Fence) (header, cells []string) {
	if f == nil {
		return nil, nil
	}
	return []string{"FILE-ID", "EPOCH"}, []string{u64(f.FileID), u64(f.Epoch)}
}

type chunkIOJSON struct {
	ChunkID
	Offset uint32 `json:"offset"`
	Size   int    `json:"size"`
	Sn     uint64 `json:"sn,omitempty"`
	Fence  *Fence `json:"fence,omitempty"`
	File   string `json:"file,omitempty"`
	Data   []byte `json:"data,omitempty"` // base64 in JSON
}

func chunkRow(id ChunkID, cells ...string) []string {
	return append([]string{u64(uint64(id.Pool)), u64(uint64(id.Copyset)), u64(id.Chunk)}, cells...)
}

// readInput reads all of path ("" or "-" for in), refusing empty input and
// input larger than a chunk. size, when not 0, is how many bytes the input
// must hold.
func readInput(path string, in io.Reader, size uint32) ([]byte, error) {
	name := "stdin"
	if path != "" && path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--in: %w", err)
		}
		defer f.Close()
		in, name = f, path
	}
	data, err := io.ReadAll(io.LimitReader(in, maxWriteInput+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	switch {
	case size != 0 && len(data) != int(size):
		more := ""
		if len(data) > maxWriteInput {
			more = "more than "
		}
		return nil, fmt.Errorf("--size %d, but %s holds %s%d bytes", size, name, more, min(len(data), maxWriteInput))
	case len(data) > maxWriteInput:
		return nil, fmt.Errorf("%s: more than %d bytes, the %s of a chunk; write it in pieces", name, maxWriteInput, sizeText(ChunkSize))
	case len(data) == 0:
		return nil, fmt.Errorf("%s: nothing to write (empty input)", name)
	}
	return data, nil
}

func newChunkWriteCommand(a *app) *cobra.Command {
	var f chunkFlags
	var ff fenceFlags
	var offset, size, in string
	var sn uint64
	cmd := &cobra.Command{
		Use:   "write --pool P --copyset C --chunk ID [--offset N] [--size N] [--sn S] [--file-id F --epoch E] [--in FILE]",
		Short: "Write bytes from a file or stdin into a chunk (size = bytes read)",
		Long: `Writes through the copyset's leader. A write with a newer --sn than the
chunk's keeps the old version as a COW snapshot (chunk snapshot-read); an older
one is refused with CHUNK_OP_STATUS_BACKWARD. With --file-id and --epoch the
write is fenced: a server that has been told a newer epoch of the file
(epoch update) refuses it with CHUNK_OP_STATUS_EPOCH_TOO_OLD.

The offset and the size (the bytes read, or --size, which they must then
match) are multiples of 4096 inside the 16 MiB chunk, and --sn is at least 1;
a write that breaks a rule is refused before anything is sent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			off, err := parseSize32("offset", offset)
			if err != nil {
				return err
			}
			var n uint32
			if cmd.Flags().Changed("size") {
				if n, err = parseSize32("size", size); err != nil {
					return err
				}
				if n == 0 {
					return errors.New("--size 0: nothing to write")
				}
			}
			fence, err := ff.fence(cmd)
			if err != nil {
				return err
			}
			data, err := readInput(in, cmd.InOrStdin(), n)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				var err error
				if fence != nil {
					err = c.WriteChunkFenced(ctx, id, off, data, sn, *fence)
				} else {
					err = c.WriteChunk(ctx, id, off, data, sn)
				}
				if err != nil {
					return fenceError(err, fence)
				}
				j := chunkIOJSON{ChunkID: id, Offset: off, Size: len(data), Sn: sn, Fence: fence}
				fh, fc := fenceCells(fence)
				row := append(chunkRow(id, u64(uint64(off)), u64(uint64(len(data))), u64(sn)), fc...)
				header := append([]string{"POOL", "COPYSET", "CHUNK", "OFFSET", "SIZE", "SN"}, fh...)
				return a.printer(cmd).print(j, header, [][]string{row})
			})
		},
	}
	addChunkFlags(cmd, &f)
	addFenceFlags(cmd, &ff)
	cmd.Flags().StringVar(&offset, "offset", "0", "byte offset in the chunk (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&size, "size", "", "bytes to write: the input must hold exactly this many (default: what it holds)")
	cmd.Flags().Uint64Var(&sn, "sn", 1, "sequence number the write is made under")
	cmd.Flags().StringVar(&in, "in", "", "file to write from (default stdin)")
	return cmd
}

func newChunkReadCommand(a *app) *cobra.Command {
	var f chunkFlags
	var offset, size, out string
	cmd := &cobra.Command{
		Use:   "read --pool P --copyset C --chunk ID [--offset N] --size N [--out FILE]",
		Short: "Read bytes of a chunk to a file or stdout",
		Long: `Reads from the copyset's leader. Without --out the raw bytes, and nothing
else, go to stdout; with -o json they are printed base64 in a JSON object instead.
With --out FILE the bytes go to FILE and a summary to stdout.`,
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
				data, err := c.ReadChunk(ctx, id, off, n)
				if err != nil {
					return err
				}
				return printData(a.printer(cmd), chunkIOJSON{ChunkID: id, Offset: off}, data, out)
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().StringVar(&offset, "offset", "0", "byte offset in the chunk (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&size, "size", "", "bytes to read (4096, 4k, 1MiB)")
	cmd.Flags().StringVar(&out, "out", "", "file to write the bytes to (default stdout)")
	_ = cmd.MarkFlagRequired("size")
	return cmd
}

// printData writes the bytes of a read: raw to p's writer, base64 in j with
// -o json, or to the file out with a summary on p.
func printData(p *printer, j chunkIOJSON, data []byte, out string) error {
	j.Size = len(data)
	if out == "" || out == "-" {
		if p.isJSON() {
			j.Data = data
			return writeJSON(p.w, j)
		}
		if _, err := p.w.Write(data); err != nil {
			return fmt.Errorf("write stdout: %w", err)
		}
		return nil
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	j.File = out
	header := []string{"POOL", "COPYSET", "CHUNK", "OFFSET", "SIZE"}
	row := chunkRow(j.ChunkID, u64(uint64(j.Offset)), u64(uint64(j.Size)))
	if j.Sn != 0 {
		header, row = append(header, "SN"), append(row, u64(j.Sn))
	}
	header, row = append(header, "FILE"), append(row, out)
	return p.print(j, header, [][]string{row})
}

type chunkInfoJSON struct {
	ChunkID
	Sn     []uint64 `json:"sn"`
	Exists bool     `json:"exists"`
}

func newChunkInfoCommand(a *app) *cobra.Command {
	var f chunkFlags
	cmd := &cobra.Command{
		Use:   "info --pool P --copyset C --chunk ID",
		Short: "Show a chunk's sequence numbers: [sn] or [sn snapSn] (with a COW snapshot)",
		Long: `Prints the chunk's sequence numbers as the leader returns them: [sn] for a
chunk without a snapshot, [sn snapSn] for one with a COW snapshot, and [] (the
chunk does not exist) otherwise. A missing chunk is not an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				sns, err := c.GetChunkInfo(ctx, id)
				if err != nil {
					return err
				}
				if sns == nil {
					sns = []uint64{}
				}
				cell := fmt.Sprint(sns)
				if len(sns) == 0 {
					cell += " (chunk does not exist)"
				}
				j := chunkInfoJSON{ChunkID: id, Sn: sns, Exists: len(sns) > 0}
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "CHUNK", "SN"}, [][]string{chunkRow(id, cell)})
			})
		},
	}
	addChunkFlags(cmd, &f)
	return cmd
}

type chunkDeleteJSON struct {
	ChunkID
	Fence   *Fence `json:"fence,omitempty"`
	Deleted bool   `json:"deleted"`
}

func newChunkDeleteCommand(a *app) *cobra.Command {
	var f chunkFlags
	var ff fenceFlags
	var sn uint64
	cmd := &cobra.Command{
		Use:   "delete --pool P --copyset C --chunk ID [--sn S] [--file-id F --epoch E]",
		Short: "Delete a chunk and its COW snapshot",
		Long: `Deletes through the copyset's leader; a missing chunk counts as deleted.
With --file-id and --epoch the delete is fenced like chunk write.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("sn") && sn == 0 {
				return errors.New("--sn: must be > 0 when given")
			}
			fence, err := ff.fence(cmd)
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				var err error
				if fence != nil {
					err = c.DeleteChunkFenced(ctx, id, sn, *fence)
				} else {
					err = c.DeleteChunk(ctx, id, sn)
				}
				if err != nil {
					return fenceError(err, fence)
				}
				fh, fc := fenceCells(fence)
				return a.printer(cmd).print(chunkDeleteJSON{ChunkID: id, Fence: fence, Deleted: true},
					append([]string{"POOL", "COPYSET", "CHUNK", "RESULT"}, fh...), [][]string{append(chunkRow(id, "deleted"), fc...)})
			})
		},
	}
	addChunkFlags(cmd, &f)
	addFenceFlags(cmd, &ff)
	cmd.Flags().Uint64Var(&sn, "sn", 0, "sequence number sent with the delete (default: none)")
	return cmd
}

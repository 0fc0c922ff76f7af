package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// maxWriteInput bounds what `chunk write` reads into memory (a chunk is 16 MiB).
const maxWriteInput = 64 << 20

func newChunkCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chunk",
		Short: "Read, write, inspect and delete chunks (through the copyset leader)",
	}
	cmd.AddCommand(newChunkWriteCommand(a), newChunkReadCommand(a), newChunkInfoCommand(a), newChunkDeleteCommand(a))
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

type chunkIOJSON struct {
	ChunkID
	Offset uint32 `json:"offset"`
	Size   int    `json:"size"`
	Sn     uint64 `json:"sn,omitempty"`
	File   string `json:"file,omitempty"`
	Data   []byte `json:"data,omitempty"` // base64 in JSON
}

func chunkRow(id ChunkID, cells ...string) []string {
	return append([]string{u64(uint64(id.Pool)), u64(uint64(id.Copyset)), u64(id.Chunk)}, cells...)
}

// readInput reads all of path ("" or "-" for in), refusing empty or huge input.
func readInput(path string, in io.Reader) ([]byte, error) {
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
	if len(data) > maxWriteInput {
		return nil, fmt.Errorf("%s: more than %d bytes; write it in pieces", name, maxWriteInput)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("%s: nothing to write (empty input)", name)
	}
	return data, nil
}

func newChunkWriteCommand(a *app) *cobra.Command {
	var f chunkFlags
	var offset, in string
	var sn uint64
	cmd := &cobra.Command{
		Use:   "write --pool P --copyset C --chunk ID [--offset N] [--sn S] [--in FILE]",
		Short: "Write bytes from a file or stdin into a chunk (size = bytes read)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			off, err := parseSize32("offset", offset)
			if err != nil {
				return err
			}
			data, err := readInput(in, cmd.InOrStdin())
			if err != nil {
				return err
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				if err := c.WriteChunk(ctx, id, off, data, sn); err != nil {
					return err
				}
				j := chunkIOJSON{ChunkID: id, Offset: off, Size: len(data), Sn: sn}
				row := chunkRow(id, u64(uint64(off)), u64(uint64(len(data))), u64(sn))
				return a.printer(cmd).print(j, []string{"POOL", "COPYSET", "CHUNK", "OFFSET", "SIZE", "SN"}, [][]string{row})
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().StringVar(&offset, "offset", "0", "byte offset in the chunk (4096, 4k, 1MiB)")
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
				p := a.printer(cmd)
				j := chunkIOJSON{ChunkID: id, Offset: off, Size: len(data)}
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
				row := chunkRow(id, u64(uint64(off)), u64(uint64(len(data))), out)
				return p.print(j, []string{"POOL", "COPYSET", "CHUNK", "OFFSET", "SIZE", "FILE"}, [][]string{row})
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

type chunkInfoJSON struct {
	ChunkID
	Sn []uint64 `json:"sn"`
}

func newChunkInfoCommand(a *app) *cobra.Command {
	var f chunkFlags
	cmd := &cobra.Command{
		Use:   "info --pool P --copyset C --chunk ID",
		Short: "Show a chunk's sequence numbers (chunk sn, then snapshot sn if any)",
		Args:  cobra.NoArgs,
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
				parts := make([]string, len(sns))
				for i, s := range sns {
					parts[i] = u64(s)
				}
				row := chunkRow(id, strings.Join(parts, ","))
				return a.printer(cmd).print(chunkInfoJSON{ChunkID: id, Sn: sns}, []string{"POOL", "COPYSET", "CHUNK", "SN"}, [][]string{row})
			})
		},
	}
	addChunkFlags(cmd, &f)
	return cmd
}

type chunkDeleteJSON struct {
	ChunkID
	Deleted bool `json:"deleted"`
}

func newChunkDeleteCommand(a *app) *cobra.Command {
	var f chunkFlags
	var sn uint64
	cmd := &cobra.Command{
		Use:   "delete --pool P --copyset C --chunk ID [--sn S]",
		Short: "Delete a chunk",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("sn") && sn == 0 {
				return errors.New("--sn: must be > 0 when given")
			}
			return a.withClient(cmd, func(ctx context.Context, c *Client) error {
				id := f.id()
				if err := c.DeleteChunk(ctx, id, sn); err != nil {
					return err
				}
				return a.printer(cmd).print(chunkDeleteJSON{ChunkID: id, Deleted: true},
					[]string{"POOL", "COPYSET", "CHUNK", "RESULT"}, [][]string{chunkRow(id, "deleted")})
			})
		},
	}
	addChunkFlags(cmd, &f)
	cmd.Flags().Uint64Var(&sn, "sn", 0, "sequence number sent with the delete (default: none)")
	return cmd
}

package datastore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/klauspost/crc32"
)

// Per-block checksums.
//
// Every chunk and snapshot file ends in a crc table with one 4-byte
// little-endian entry per block (see geometry). The entry of a block holding
// data d is
//
//	crc32c(d) XOR crc32c(BlockSize zero bytes)
//
// so that an all-zero block has entry 0. This is how unwritten blocks are
// represented: a block never written reads as zeros and its entry is 0, which
// verifies like any other block. A fresh sparse file, a zero-filled pool file
// and a recycled file re-zeroed by the pool are therefore consistent as they
// are, with no "written" bit to maintain, and a torn write that lost both
// data and entry leaves the block's previous, consistent state. The XOR with
// a constant does not weaken detection: data that is not zero but has entry
// 0, or zero data with a non-zero entry, fails like any other mismatch.
//
// Writes (WriteChunk, PasteChunk, COW copies) write the data first and the
// entries second; every read of a block (ReadChunk, ReadChunkClone,
// ReadChunkSnapshot, COW source reads, GetChunkHash) verifies the entry and
// fails with an error wrapping ErrCRC that names the chunk (or snapshot) and
// the block. Store.Stats counts these failures. An I/O error between the data
// and the entry write can leave the block failing verification until it is
// written again; that only happens on an apply that already failed with a
// disk error.

// zeroBlockCRC returns the crc32c of blockSize zero bytes.
func zeroBlockCRC(blockSize uint32) uint32 {
	return crc32.Checksum(make([]byte, blockSize), castagnoli)
}

// crcEntry returns the crc table entry of block data b.
func (g *geometry) crcEntry(b []byte) uint32 {
	return crc32.Checksum(b, castagnoli) ^ g.zeroCRC
}

// crcTableOff returns the file offset of the crc entry of block i.
func (g *geometry) crcTableOff(i uint32) int64 { return g.crcOff + 4*int64(i) }

// earlyWritebackMin is the smallest data write whose writeback starts right
// away (startWriteback). Left to the kernel, the dirty chunk data of large
// writes piles up to the dirty-page threshold (gigabytes here) and is then
// flushed in a burst that the raft log's fdatasyncs queue behind: 1 MiB
// write latency at p99 was several hundred milliseconds. Small writes are
// left to the kernel, which merges them and absorbs overwrites.
const earlyWritebackMin = 256 << 10

// writeBlocks writes data (whole blocks) at block index lo of f, then the
// blocks' crc entries, marking dirty after each write. A large write's data
// starts its writeback at once (earlyWritebackMin).
func (g *geometry) writeBlocks(f File, dirty *atomic.Bool, lo uint32, data []byte) error {
	off := g.dataOff + int64(lo)*int64(g.blockSize)
	if err := writeAt(f, dirty, data, off); err != nil {
		return err
	}
	if len(data) >= earlyWritebackMin {
		startWriteback(f, off, int64(len(data)))
	}
	n := uint32(len(data)) / g.blockSize
	var tbl []byte
	if n <= crcTablePooled {
		p := crcTables.Get().(*[4 * crcTablePooled]byte)
		defer crcTables.Put(p)
		tbl = p[:4*n]
	} else {
		tbl = make([]byte, 4*n)
	}
	for i := range n {
		b := data[i*g.blockSize : (i+1)*g.blockSize]
		binary.LittleEndian.PutUint32(tbl[4*i:], g.crcEntry(b))
	}
	return writeAt(f, dirty, tbl, g.crcTableOff(lo))
}

// crcTables recycles the crc entries writeBlocks writes for up to
// crcTablePooled blocks: File.WriteAt, like io.WriterAt, keeps no part of
// its buffer once it returns.
const crcTablePooled = 64

var crcTables = sync.Pool{New: func() any { return new([4 * crcTablePooled]byte) }}

// readBlocks reads blocks [lo, lo+len(buf)/BlockSize) of f into buf and
// verifies them against the crc table. A mismatch returns an error wrapping
// ErrCRC that names what (e.g. "chunk 7") and the first bad block, and
// counts in crcFailures. The data is in buf even on a mismatch.
func (g *geometry) readBlocks(f File, what string, lo uint32, buf []byte, crcFailures *atomic.Uint64) error {
	if _, err := f.ReadAt(buf, g.dataOff+int64(lo)*int64(g.blockSize)); err != nil {
		return err
	}
	n := uint32(len(buf)) / g.blockSize
	tbl := make([]byte, 4*n)
	if _, err := f.ReadAt(tbl, g.crcTableOff(lo)); err != nil {
		return fmt.Errorf("read crc table: %w", err)
	}
	for i := range n {
		if err := g.verifyBlock(what, lo+i, buf[i*g.blockSize:(i+1)*g.blockSize], tbl[4*i:], crcFailures); err != nil {
			return err
		}
	}
	return nil
}

// verifyBlock checks block i's data b against its crc table entry (the
// first 4 bytes of entry); a mismatch is counted in crcFailures and
// returned as an error wrapping ErrCRC naming what and the block.
func (g *geometry) verifyBlock(what string, i uint32, b, entry []byte, crcFailures *atomic.Uint64) error {
	stored := binary.LittleEndian.Uint32(entry)
	if got := g.crcEntry(b); got != stored {
		crcFailures.Add(1)
		return fmt.Errorf("%s block %d (data offset %d): stored crc %#08x, computed %#08x: %w",
			what, i, int64(i)*int64(g.blockSize), stored, got, ErrCRC)
	}
	return nil
}

// GetChunkHash returns the decimal crc32c of the length bytes of chunk id's
// data at data offset off, as Curve's GetChunkHash reports it for
// consistency checks; a missing chunk hashes to "0". Unlike upstream, whose
// offset is a raw file offset (offset 0 covers the meta page), off is a data
// offset, so replicas whose meta pages differ in fields that are not data
// (say a lazily persisted sn) still agree. off and length need not be
// aligned, but [off, off+length) must lie within the chunk (else
// ErrInvalidArg); length 0 hashes to "0". Every block the range touches is
// verified against its checksum, so corruption fails with ErrCRC rather than
// producing a hash that merely differs. Unwritten blocks of a clone chunk
// hash as zeros.
func (s *Store) GetChunkHash(id uint64, off, length uint32) (string, error) {
	if uint64(off)+uint64(length) > uint64(s.g.chunkSize) {
		return "", fmt.Errorf("datastore: hash chunk %d: range [%d, %d) exceeds chunk size %d: %w",
			id, off, uint64(off)+uint64(length), s.g.chunkSize, ErrInvalidArg)
	}
	c, err := s.lookup("hash", id, lockShared)
	if err != nil {
		if isNotExist(err) {
			return "0", nil
		}
		return "", err
	}
	defer c.mu.RUnlock()
	if length == 0 {
		return "0", nil
	}
	const step = 1 << 20 // bytes read at a time, rounded to blocks
	bs := s.g.blockSize
	first, end := off/bs, (off+length-1)/bs+1
	per := max(step/bs, 1)
	buf := make([]byte, min(per, end-first)*bs)
	var h uint32
	for lo := first; lo < end; lo += per {
		hi := min(lo+per, end)
		b := buf[:(hi-lo)*bs]
		if err := s.g.readBlocks(c.f, chunkName(id), lo, b, &s.stats.crcFailures); err != nil {
			return "", fmt.Errorf("datastore: hash chunk %d: %w", id, err)
		}
		// Trim to [off, off+length) within this piece.
		from, to := int64(lo)*int64(bs), int64(hi)*int64(bs)
		a := max(int64(off), from) - from
		z := min(int64(off)+int64(length), to) - from
		h = crc32.Update(h, castagnoli, b[a:z])
	}
	return strconv.FormatUint(uint64(h), 10), nil
}

// chunkName is how errors name chunk id.
func chunkName(id uint64) string { return "chunk " + strconv.FormatUint(id, 10) }

// DataHash returns the crc32c (Castagnoli) of the store's data: the data
// region of every chunk file in ascending chunk id, then the data region of
// every chunk snapshot file in ascending chunk id (the order of Files; a
// chunk has at most one snapshot). A data region is the ChunkSize bytes of
// chunk data, exactly what GetChunkHash over the whole chunk hashes, so
// meta pages (which may lag on disk) and checksum tables do not count. The
// regions are read raw, without checking the per-block checksums, so a
// store whose data was corrupted on disk hashes differently instead of
// failing. The caller keeps the store from changing meanwhile (no writes
// are applied while it runs).
func (s *Store) DataHash() (uint32, error) {
	buf := make([]byte, 1<<20)
	var h uint32
	for _, name := range s.chunkFiles() {
		f, err := s.fs.OpenFile(filepath.Join(s.opts.Dir, name), os.O_RDONLY, 0)
		if err != nil {
			return 0, fmt.Errorf("datastore: hash %s: %w", name, err)
		}
		for off := int64(0); off < int64(s.g.chunkSize); {
			b := buf[:min(int64(len(buf)), int64(s.g.chunkSize)-off)]
			n, err := f.ReadAt(b, s.g.dataOff+off)
			if err != nil && !errors.Is(err, io.EOF) {
				f.Close()
				return 0, fmt.Errorf("datastore: hash %s: %w", name, err)
			}
			clear(b[n:]) // a short file reads as zeros past its end
			h = crc32.Update(h, castagnoli, b)
			off += int64(len(b))
		}
		f.Close()
	}
	return h, nil
}

package datastore

import "errors"

// Sentinel errors. Every error the package returns wraps at most one of them
// with context (the operation, the chunk id or file path, and the offending
// values), so callers test with errors.Is and print err.Error() as is.
//
// Errors of the file layer (see FS) are wrapped as returned, an *fs.PathError
// or *os.LinkError around a syscall.Errno, so errors.Is(err, syscall.ENOSPC)
// and errors.Is(err, syscall.EIO) work through every layer.
//
// Each sentinel names the Curve error code (src/chunkserver/datastore/define.h)
// it stands for and the CHUNK_OP_STATUS a caller reports for it. Errors
// wrapping none of them map as follows: syscall.ENOSPC -> NOSPACE; any other
// I/O error -> DISK_FAIL.
var (
	// ErrInvalidArg reports a request that breaks a static rule: an offset or
	// length that is not a multiple of the block size, a range that ends past
	// the chunk size, an empty range, sequence number 0 on a write, a clone
	// size other than ChunkSize, a bad clone location, or invalid Options. A
	// request that fails with ErrInvalidArg has changed nothing.
	// Curve: InvalidArgError. Status: INVALID_REQUEST.
	ErrInvalidArg = errors.New("invalid argument")

	// ErrChunkNotExist reports an operation on a chunk that has no file, or a
	// snapshot read of a sequence number that has no snapshot.
	// Curve: ChunkNotExistError. Status: CHUNK_NOTEXIST.
	ErrChunkNotExist = errors.New("chunk does not exist")

	// ErrBackward reports a request whose sequence number is older than the
	// chunk's sn or corrected sn. It is the expected outcome when an old log
	// entry is replayed after a newer one was applied, and it tells a client
	// to refresh its volume's sn. The request has changed nothing.
	// Curve: BackwardRequestError. Status: BACKWARD (for WriteChunk and
	// DeleteChunkSnapshotOrCorrectSn; Curve reports FAILURE_UNKNOWN for
	// DeleteChunk).
	ErrBackward = errors.New("backward request: sequence number older than the chunk's")

	// ErrCRC reports data whose crc32c does not match the checksum stored
	// with it: a meta page, a snapshot meta page, or a data block (the error
	// then names the chunk and the block index). Curve: CrcCheckError.
	// Status: CRC_FAIL.
	ErrCRC = errors.New("crc32c mismatch")

	// ErrIncompatible reports a meta page with a version this code does not
	// read: one written by a newer release, by datastore v1 (meta page
	// version 1, superseded), or a zeroed page. Curve: IncompatibleError.
	// Status: DISK_FAIL (the file is unusable, the disk is not).
	ErrIncompatible = errors.New("incompatible meta page version")

	// ErrFileFormat reports a chunk or snapshot file of the wrong length (for
	// instance written with other Options), a meta page buffer too short to
	// decode, a meta page whose fields contradict each other or the Options
	// (a clone bitmap of the wrong size), or a snapshot file whose name and
	// meta page disagree. Curve: FileFormatError. Status: DISK_FAIL.
	ErrFileFormat = errors.New("bad chunk file format")

	// ErrSnapshotConflict reports a write that needs a new chunk snapshot
	// (its sn is newer than the chunk's effective sn) while an older snapshot
	// of the chunk still exists, or a directory holding two snapshot files of
	// one chunk. The old snapshot must be removed first with
	// DeleteChunkSnapshotOrCorrectSn. Curve: SnapshotConflictError.
	// Status: FAILURE_UNKNOWN.
	ErrSnapshotConflict = errors.New("chunk snapshot conflict")

	// ErrStatusConflict reports an operation the chunk's kind forbids: a
	// write that would snapshot a clone chunk (clone chunks cannot be
	// snapshotted), or DeleteChunkSnapshotOrCorrectSn on a clone chunk.
	// Curve: StatusConflictError. Status: FAILURE_UNKNOWN.
	ErrStatusConflict = errors.New("chunk status conflict: not allowed on a clone chunk")

	// ErrChunkExist reports CreateCloneChunk on an existing chunk whose sn,
	// corrected sn or location differ from the request (or that is no longer
	// a clone). Curve: ChunkConflictError. Status: CHUNK_EXIST.
	ErrChunkExist = errors.New("chunk exists with other attributes")

	// ErrPageNeverWritten reports a plain read (ReadChunk, or
	// ReadChunkSnapshot of the live sn) of a clone chunk whose range holds
	// blocks not yet written or pasted; ReadChunkClone serves such reads.
	// Curve: PageNerverWrittenError. Status: the caller fetches the blocks
	// from the clone source (Curve's CloneManager) instead of failing.
	ErrPageNeverWritten = errors.New("page never written in clone chunk")

	// ErrPoolEmpty reports FilePool.Take with no formatted file ready. The
	// Store falls back to creating a file; other callers decide.
	ErrPoolEmpty = errors.New("chunk file pool empty")

	// ErrClosed reports an operation on a Store after Close.
	ErrClosed = errors.New("store closed")
)

package datastore

import "errors"

// Sentinel errors. Every error the package returns wraps at most one of them
// with context (the operation, the chunk id or file path, and the offending
// values), so callers test with errors.Is and print err.Error() as is.
// Errors from the operating system are wrapped as returned by package os (an
// *os.PathError or *os.LinkError), so errors.Is(err, syscall.ENOSPC) and
// similar tests work too.
var (
	// ErrInvalidArg reports a request that breaks a static rule: an offset or
	// length that is not a multiple of the block size, a range that ends past
	// the chunk size, an empty range, sequence number 0 on a write, or invalid
	// Options. A request that fails with ErrInvalidArg has changed nothing.
	// Curve: InvalidArgError.
	ErrInvalidArg = errors.New("invalid argument")

	// ErrChunkNotExist reports an operation on a chunk that has no file.
	// Curve: ChunkNotExistError.
	ErrChunkNotExist = errors.New("chunk does not exist")

	// ErrBackward reports a request whose sequence number is older than the
	// chunk's sn or corrected sn. It is the expected outcome when an old log
	// entry is replayed after a newer one was applied, and it tells a client
	// to refresh its volume's sn. The request has changed nothing.
	// Curve: BackwardRequestError.
	ErrBackward = errors.New("backward request: sequence number older than the chunk's")

	// ErrCRC reports a meta page whose stored crc32c does not match its
	// contents. Curve: CrcCheckError.
	ErrCRC = errors.New("crc32c mismatch")

	// ErrIncompatible reports a meta page with a version this code does not
	// know, typically written by a newer release. Curve: IncompatibleError.
	ErrIncompatible = errors.New("incompatible meta page version")

	// ErrFileFormat reports a chunk file that is not PageSize+ChunkSize bytes
	// long (for instance written with other Options) or a meta page buffer too
	// short to decode. Curve: FileFormatError.
	ErrFileFormat = errors.New("bad chunk file format")

	// ErrClosed reports an operation on a Store after Close.
	ErrClosed = errors.New("store closed")
)

package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Store is an object store: a flat namespace of immutable-once-written byte
// objects addressed by name. Implementations are safe for concurrent use.
type Store interface {
	// ReadAt reads len(p) bytes of object name starting at byte offset off.
	// It returns len(p), nil on success. If the object ends before
	// off+len(p) it returns the bytes that were available (possibly 0) and
	// an error wrapping io.ErrUnexpectedEOF; bytes of p past n are not
	// modified. A zero-length read of an existing object returns 0, nil
	// whatever off is. A negative off is an error.
	ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error)

	// Put stores exactly size bytes read from r as object name, replacing
	// any previous object of that name. The write is atomic: readers see
	// either the old object or the whole new one, never a partial object,
	// and a failed or cancelled Put leaves the old object (or none) in place.
	// size must be >= 0; if r ends before size bytes Put fails with an error
	// wrapping io.ErrUnexpectedEOF. Bytes of r past size are not read.
	Put(ctx context.Context, name string, r io.Reader, size int64) error

	// Stat returns the name, size and modification time of object name.
	Stat(ctx context.Context, name string) (ObjectInfo, error)

	// Delete removes object name. Deleting a missing object is not an error.
	Delete(ctx context.Context, name string) error

	// List returns every object whose name starts with prefix (a plain
	// string prefix, not necessarily ending in '/'; "" lists everything),
	// sorted by name.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)

	// Close releases the store's resources. Later calls fail with
	// ErrClosed; Close itself is idempotent.
	Close() error
}

// ObjectInfo describes one object.
type ObjectInfo struct {
	Name    string
	Size    int64
	ModTime time.Time
}

var (
	// ErrNotExist is wrapped by errors about an object that does not exist.
	ErrNotExist = errors.New("object does not exist")
	// ErrInvalidName is wrapped by errors about an invalid object name or
	// list prefix.
	ErrInvalidName = errors.New("invalid object name")
	// ErrClosed is returned by every method of a closed store.
	ErrClosed = errors.New("object store is closed")
)

const (
	// MaxNameLen is the maximum length of an object name in bytes.
	MaxNameLen = 1024
	// MaxElemLen is the maximum length in bytes of one '/'-separated
	// element of a name (the usual file-name limit of local file systems).
	MaxElemLen = 255
	// ReservedPrefix is a first name element no object may use: Local keeps
	// its in-flight temporary files in that directory under its root.
	ReservedPrefix = ".objstore-tmp"
)

// ValidateName reports whether name is a valid object name (see the package
// documentation); the error wraps ErrInvalidName.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidName)
	}
	if err := checkChars(name); err != nil {
		return err
	}
	if strings.HasSuffix(name, "/") {
		return fmt.Errorf("%w: %q ends with '/'", ErrInvalidName, name)
	}
	return checkElems(name, strings.Split(name, "/"))
}

// validatePrefix checks a List prefix: "" or a string some valid name could
// start with (the last, partial element is not checked beyond its characters).
func validatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	if err := checkChars(prefix); err != nil {
		return err
	}
	elems := strings.Split(prefix, "/")
	return checkElems(prefix, elems[:len(elems)-1])
}

func checkChars(s string) error {
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w: %d bytes long (max %d)", ErrInvalidName, len(s), MaxNameLen)
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %q is not valid UTF-8", ErrInvalidName, s)
	}
	if strings.HasPrefix(s, "/") {
		return fmt.Errorf("%w: %q starts with '/'", ErrInvalidName, s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains a control character", ErrInvalidName, s)
		}
	}
	return nil
}

func checkElems(s string, elems []string) error {
	for i, e := range elems {
		switch {
		case e == "":
			return fmt.Errorf("%w: %q has an empty element", ErrInvalidName, s)
		case e == "." || e == "..":
			return fmt.Errorf("%w: %q has a %q element", ErrInvalidName, s, e)
		case len(e) > MaxElemLen:
			return fmt.Errorf("%w: %q has an element longer than %d bytes", ErrInvalidName, s, MaxElemLen)
		case i == 0 && e == ReservedPrefix:
			return fmt.Errorf("%w: %q uses the reserved element %q", ErrInvalidName, s, ReservedPrefix)
		}
	}
	return nil
}

// checkPut validates the arguments common to every Put.
func checkPut(name string, r io.Reader, size int64) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if r == nil {
		return errors.New("nil reader")
	}
	if size < 0 {
		return fmt.Errorf("invalid size %d", size)
	}
	return nil
}

// shortObject is the error of a ReadAt that ran past the end of an object.
func shortObject(want, got int) error {
	return fmt.Errorf("%w: object ended after %d of %d bytes", io.ErrUnexpectedEOF, got, want)
}

// exactReader yields exactly remaining bytes of r, stops early when ctx ends,
// and remembers the first error it returned so Put can report it even when
// a library in between (net/http) hides it.
type exactReader struct {
	ctx       context.Context
	r         io.Reader
	remaining int64
	err       error
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.remaining <= 0 {
		return 0, io.EOF
	}
	if err := e.ctx.Err(); err != nil {
		e.err = err
		return 0, err
	}
	if int64(len(p)) > e.remaining {
		p = p[:e.remaining]
	}
	n, err := e.r.Read(p)
	e.remaining -= int64(n)
	switch {
	case err == io.EOF && e.remaining > 0:
		e.err = fmt.Errorf("%w: reader ended %d bytes short of the given size", io.ErrUnexpectedEOF, e.remaining)
		return n, e.err
	case err == io.EOF:
		return n, io.EOF
	case err != nil:
		e.err = fmt.Errorf("reading source: %w", err)
		return n, e.err
	}
	return n, nil
}

package dest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/chunkraft/chunkraft/internal/objstore"
)

// OpenTimeout bounds Open's check that an S3 dest is reachable and its
// bucket exists, when the caller's context allows longer.
const OpenTimeout = 10 * time.Second

// MaxGetSize bounds the object Get reads.
const MaxGetSize = 512 << 20

// Dest is an opened export destination. Names are object names
// (objstore.ValidateName), relative to the dest's root. Safe for concurrent
// use.
type Dest interface {
	// Put stores data as object name, atomically and durably, replacing
	// any object of that name (see the package invariants).
	Put(ctx context.Context, name string, data []byte) error
	// Get returns the whole object name; a missing object is an error
	// wrapping objstore.ErrNotExist.
	Get(ctx context.Context, name string) ([]byte, error)
	// GetInto is Get reading into buf when it has the capacity (the
	// object's size + 1), so that a reader of many objects reuses one
	// buffer; the result aliases buf then.
	GetInto(ctx context.Context, name string, buf []byte) ([]byte, error)
	// GetHead returns the first n bytes of object name, fewer when it is
	// shorter; a missing object is an error wrapping objstore.ErrNotExist.
	GetHead(ctx context.Context, name string, n int) ([]byte, error)
	// List returns the objects whose names start with prefix, sorted by
	// name.
	List(ctx context.Context, prefix string) ([]objstore.ObjectInfo, error)
	// Delete removes object name; a missing object is not an error.
	Delete(ctx context.Context, name string) error
	// Close releases the dest; later calls fail.
	Close() error
	// String describes the dest for messages (no secrets).
	String() string
}

// Open opens the dest u on the object store configuration of the server
// (its endpoint and credentials, for an s3 dest) and checks that it is
// usable: a file dest's directory is created if missing; an s3 dest's
// endpoint must answer and its bucket exist.
func Open(ctx context.Context, u URL, server objstore.Config) (Dest, error) {
	if _, err := Parse(u.String()); err != nil {
		return nil, err
	}
	switch u.Scheme {
	case SchemeFile:
		l, err := objstore.NewLocal(u.Path)
		if err != nil {
			return nil, fmt.Errorf("dest %s: %w", u, err)
		}
		return New(l, u.String()), nil
	default:
		cfg := server.S3
		if cfg.Endpoint == "" {
			return nil, fmt.Errorf("dest %s: the server has no S3 endpoint configured (object_store.s3.endpoint)", u)
		}
		cfg.Bucket, cfg.Prefix, cfg.CreateBucket = u.Bucket, u.Prefix, false
		ctx, cancel := context.WithTimeout(ctx, OpenTimeout)
		defer cancel()
		s, err := objstore.NewS3(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("dest %s: %w", u, err)
		}
		return New(s, fmt.Sprintf("%s (endpoint %s)", u, cfg.Endpoint)), nil
	}
}

// New returns a Dest on store, described by desc in messages. It takes
// over the store: Close closes it.
func New(store objstore.Store, desc string) Dest {
	return &storeDest{store: store, desc: desc}
}

type storeDest struct {
	store objstore.Store
	desc  string
}

func (d *storeDest) String() string { return d.desc }

func (d *storeDest) Put(ctx context.Context, name string, data []byte) error {
	if err := d.store.Put(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("dest %s: %w", d.desc, err)
	}
	return nil
}

// getAttempts is how many times Get reads an object that changes size
// under it before giving up.
const getAttempts = 3

func (d *storeDest) Get(ctx context.Context, name string) ([]byte, error) {
	return d.GetInto(ctx, name, nil)
}

func (d *storeDest) GetHead(ctx context.Context, name string, n int) ([]byte, error) {
	p := make([]byte, n)
	k, err := d.store.ReadAt(ctx, name, p, 0)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("dest %s: %w", d.desc, err)
	}
	return p[:k], nil
}

func (d *storeDest) GetInto(ctx context.Context, name string, buf []byte) ([]byte, error) {
	for range getAttempts {
		info, err := d.store.Stat(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("dest %s: %w", d.desc, err)
		}
		if info.Size > MaxGetSize {
			return nil, fmt.Errorf("dest %s: object %q is %d bytes, more than %d", d.desc, name, info.Size, MaxGetSize)
		}
		// One byte more than the size: a complete read of an object that
		// grew since Stat shows, as does one that shrank.
		p := buf[:cap(buf)]
		if int64(len(p)) < info.Size+1 {
			// 1/16 more, for a reader's next object, a little larger.
			p = make([]byte, info.Size+1, info.Size+1+info.Size/16)
		}
		p = p[:info.Size+1]
		n, err := d.store.ReadAt(ctx, name, p, 0)
		switch {
		case errors.Is(err, io.ErrUnexpectedEOF) && int64(n) == info.Size:
			return p[:n], nil
		case err == nil || errors.Is(err, io.ErrUnexpectedEOF):
			continue // replaced by an object of another size meanwhile
		default:
			return nil, fmt.Errorf("dest %s: %w", d.desc, err)
		}
	}
	return nil, fmt.Errorf("dest %s: object %q changed size during %d reads", d.desc, name, getAttempts)
}

func (d *storeDest) List(ctx context.Context, prefix string) ([]objstore.ObjectInfo, error) {
	infos, err := d.store.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("dest %s: %w", d.desc, err)
	}
	return infos, nil
}

func (d *storeDest) Delete(ctx context.Context, name string) error {
	if err := d.store.Delete(ctx, name); err != nil {
		return fmt.Errorf("dest %s: %w", d.desc, err)
	}
	return nil
}

func (d *storeDest) Close() error {
	if err := d.store.Close(); err != nil {
		return fmt.Errorf("dest %s: %w", d.desc, err)
	}
	return nil
}

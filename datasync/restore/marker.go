package restore

import (
	"context"
	"errors"
	"fmt"

	"github.com/chunkraft/chunkraft/datasync/dest"
	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/proto/chunkraft/syncpb"
)

// ErrNoMarker: the location has no restore marker of the copyset.
var ErrNoMarker = errors.New("no restore marker")

// WriteMarker stores m in dst under its copyset's marker name
// (exportfmt.MarkerName), replacing the one there.
func WriteMarker(ctx context.Context, dst dest.Dest, m *syncpb.RestoreMarker) error {
	b, err := exportfmt.EncodeMarker(m)
	if err != nil {
		return err
	}
	name := exportfmt.MarkerName(m.LogicPoolId, m.CopysetId)
	if err := dst.Put(ctx, name, b); err != nil {
		return fmt.Errorf("write restore marker %s to %s: %w", name, dst, err)
	}
	return nil
}

// ReadMarker reads the restore marker of copyset (pool, cs) from src and
// checks that it is that copyset's. A missing marker is ErrNoMarker.
func ReadMarker(ctx context.Context, src dest.Dest, pool, cs uint32) (*syncpb.RestoreMarker, error) {
	name := exportfmt.MarkerName(pool, cs)
	b, err := src.Get(ctx, name)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, fmt.Errorf("%w of copyset %d/%d at %s (%s)", ErrNoMarker, pool, cs, src, name)
	}
	if err != nil {
		return nil, fmt.Errorf("read restore marker %s of %s: %w", name, src, err)
	}
	m, err := exportfmt.DecodeMarker(b)
	if err == nil && (m.LogicPoolId != pool || m.CopysetId != cs) {
		err = fmt.Errorf("it is the marker of copyset %d/%d", m.LogicPoolId, m.CopysetId)
	}
	if err != nil {
		return nil, fmt.Errorf("bad restore marker %s of %s: %w", name, src, err)
	}
	return m, nil
}

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

// ReadManifest reads the whole manifest of copyset (pool, cs) from src:
// manifest.pb and the sealed parts it counts, joined into one list of
// every packet it names, and checks it (each part's prefix and CRC, its
// copyset and number, the parts' order and the chain of all the entries).
// It returns nil and no error when the copyset has no manifest (one is not
// required). The error names the part that is wrong.
func ReadManifest(ctx context.Context, src dest.Dest, pool, cs uint32) (*syncpb.Manifest, error) {
	name := exportfmt.ManifestName(pool, cs)
	b, err := src.Get(ctx, name)
	if errors.Is(err, objstore.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", name, err)
	}
	m, err := decodeManifest(b, pool, cs)
	if err != nil {
		return nil, fmt.Errorf("bad manifest %s: %w", name, err)
	}
	parts := make([]*syncpb.Manifest, 0, m.SealedParts)
	for i := range m.SealedParts {
		pname := exportfmt.ManifestPartName(pool, cs, i+1)
		b, err := src.Get(ctx, pname)
		if err != nil {
			return nil, fmt.Errorf("read manifest part %s (manifest %s counts %d parts): %w", pname, name, m.SealedParts, err)
		}
		p, err := decodeManifest(b, pool, cs)
		if err != nil {
			return nil, fmt.Errorf("bad manifest part %s: %w", pname, err)
		}
		parts = append(parts, p)
	}
	all, err := exportfmt.JoinManifest(m, parts)
	if err == nil {
		_, err = exportfmt.CheckManifest(all)
	}
	if err != nil {
		return nil, fmt.Errorf("bad manifest %s: %w", name, err)
	}
	return all, nil
}

// decodeManifest decodes a manifest or manifest part of copyset (pool, cs).
func decodeManifest(b []byte, pool, cs uint32) (*syncpb.Manifest, error) {
	m, err := exportfmt.DecodeManifest(b)
	if err == nil && (m.LogicPoolId != pool || m.CopysetId != cs) {
		err = fmt.Errorf("it is the manifest of copyset %d/%d", m.LogicPoolId, m.CopysetId)
	}
	return m, err
}

package disagg

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/chunkraft/chunkraft/proto/chunkraft/disaggpb"
)

// lockListPrefix is the prefix of the lock objects of the data file keys
// under prefix: lock/s{store}/{rest} for a prefix s{store}/data/{rest},
// else every lock object.
func lockListPrefix(prefix string) string {
	rest, ok := strings.CutPrefix(prefix, "s")
	if i := strings.Index(rest, "/data/"); ok && i > 0 && strings.Trim(rest[:i], "0123456789") == "" {
		return LockPrefix + "s" + rest[:i] + "/" + rest[i+len("/data/"):]
	}
	return LockPrefix
}

// withObjects merges into files (the table's entries under prefix,
// ascending) the locks and delete marks of the data file keys under
// prefix as the object store has them: a lock object is a Lock (index
// 0), a .del object marks its key deleted (marked_ms its time).
func (s *Service) withObjects(ctx context.Context, prefix string, files []*pb.DataFile) ([]*pb.DataFile, error) {
	byKey := map[string]*pb.DataFile{}
	for _, f := range files {
		byKey[f.GetKey()] = f
	}
	entry := func(key string) *pb.DataFile {
		f, ok := byKey[key]
		if !ok {
			f = &pb.DataFile{Key: key}
			byKey[key] = f
			files = append(files, f)
		}
		return f
	}
	locks, err := s.deps.Objects.List(ctx, lockListPrefix(prefix))
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "object store: list lock objects: %v", err)
	}
	for _, o := range locks {
		if k, store, seq, ok := parseLockObject(o.Name); ok && strings.HasPrefix(k.String(), prefix) {
			f := entry(k.String())
			f.Locks = append(f.Locks, &pb.Lock{StoreId: store, Seq: seq})
		}
	}
	objs, err := s.deps.Objects.List(ctx, prefix)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "object store: list %q: %v", prefix, err)
	}
	for _, o := range objs {
		key, ok := strings.CutSuffix(o.Name, DelMarkSuffix)
		if !ok || !isDataFileKey(key) {
			continue
		}
		f := entry(key)
		f.Deleted, f.MarkedMs = true, o.ModTime.UnixMilli()
	}
	for _, f := range files {
		slices.SortFunc(f.Locks, func(a, b *pb.Lock) int {
			return cmp.Or(cmp.Compare(a.GetStoreId(), b.GetStoreId()), cmp.Compare(a.GetSeq(), b.GetSeq()))
		})
	}
	slices.SortFunc(files, func(a, b *pb.DataFile) int { return cmp.Compare(a.GetKey(), b.GetKey()) })
	return files, nil
}

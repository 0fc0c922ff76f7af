package disagg

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The object names of upstream's S3 layout (TiFlash S3Filename), under the
// server's object store (an S3 store's prefix is upstream's root).
const (
	// LockPrefix starts every lock object's name.
	LockPrefix = "lock/"
	// DelMarkSuffix ends a data file's delete mark.
	DelMarkSuffix = ".del"
	// DMFileMeta is the object a DTFile's existence is checked on
	// (<key>/meta, upstream DMFileMetaV2::metaFileName).
	DMFileMeta = "meta"
	// maxKeyLen bounds a data file key (a lock key adds at most 48 bytes;
	// objstore.MaxNameLen is 1024).
	maxKeyLen = 512
)

// ErrNotDataFile is wrapped by ParseKey's errors.
var ErrNotDataFile = errors.New("not a data file key")

// Key is a parsed data file key s{store}/data/{subpath}.
type Key struct {
	Store   uint64
	Subpath string // dat_{seq}_{idx}, t_{table}/dmf_{id} or ks_{ks}_t_{table}/dmf_{id}
	DMFile  bool   // a DTFile (t_ or ks_), not a checkpoint data file
}

// ParseKey parses a data file key: s{store_id}/data/ followed by a
// checkpoint data file dat_{upload_seq}_{idx}, a DTFile t_{table}/dmf_{id}
// or, with a keyspace, ks_{keyspace}_t_{table}/dmf_{id}; every number
// decimal. Anything else (a lock, a delete mark, a manifest, another
// subpath) is refused with an error wrapping ErrNotDataFile.
func ParseKey(s string) (Key, error) {
	bad := func(why string) (Key, error) {
		if len(s) > 80 {
			s = s[:80] + "..."
		}
		return Key{}, fmt.Errorf("%w: %q: %s", ErrNotDataFile, s, why)
	}
	if len(s) > maxKeyLen {
		return bad(fmt.Sprintf("longer than %d bytes", maxKeyLen))
	}
	rest, ok := strings.CutPrefix(s, "s")
	if !ok {
		return bad("want s{store_id}/data/{subpath}")
	}
	storeStr, sub, ok := strings.Cut(rest, "/data/")
	if !ok {
		return bad("want s{store_id}/data/{subpath}")
	}
	store, ok := decimal(storeStr)
	if !ok {
		return bad("store id is not a decimal number")
	}
	k := Key{Store: store, Subpath: sub}
	switch {
	case strings.HasPrefix(sub, "dat_"):
		seq, idx, ok := strings.Cut(sub[len("dat_"):], "_")
		if _, ok1 := decimal(seq); !ok || !ok1 {
			return bad("a checkpoint data file is dat_{upload_seq}_{idx}")
		}
		if _, ok := decimal(idx); !ok {
			return bad("a checkpoint data file is dat_{upload_seq}_{idx}")
		}
	case strings.HasPrefix(sub, "t_"), strings.HasPrefix(sub, "ks_"):
		table, file, ok := strings.Cut(sub, "/dmf_")
		if _, ok1 := decimal(file); !ok || !ok1 {
			return bad("a DTFile is t_{table_id}/dmf_{file_id} or ks_{keyspace_id}_t_{table_id}/dmf_{file_id}")
		}
		if !validTable(table) {
			return bad("a DTFile is t_{table_id}/dmf_{file_id} or ks_{keyspace_id}_t_{table_id}/dmf_{file_id}")
		}
		k.DMFile = true
	default:
		return bad("the subpath is none of dat_{upload_seq}_{idx}, t_{table_id}/dmf_{file_id}, ks_{keyspace_id}_t_{table_id}/dmf_{file_id}")
	}
	return k, nil
}

// validTable reports whether s is t_{table} or ks_{ks}_t_{table}.
func validTable(s string) bool {
	if ks, ok := strings.CutPrefix(s, "ks_"); ok {
		id, table, ok := strings.Cut(ks, "_t_")
		_, ok1 := decimal(id)
		_, ok2 := decimal(table)
		return ok && ok1 && ok2
	}
	table, ok := strings.CutPrefix(s, "t_")
	_, ok1 := decimal(table)
	return ok && ok1
}

// decimal parses a plain decimal uint64 (digits only, no sign).
func decimal(s string) (uint64, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// String is the data file key.
func (k Key) String() string { return fmt.Sprintf("s%d/data/%s", k.Store, k.Subpath) }

// ExistsObject is the object whose presence says the data file exists:
// the key itself, or a DTFile's <key>/meta.
func (k Key) ExistsObject() string {
	if k.DMFile {
		return k.String() + "/" + DMFileMeta
	}
	return k.String()
}

// DelMarkKey is the data file's delete mark s{store}/data/{subpath}.del.
func (k Key) DelMarkKey() string { return k.String() + DelMarkSuffix }

// LockObjectPrefix starts the name of every lock object of the data file:
// lock/s{store}/{subpath}.lock_.
func (k Key) LockObjectPrefix() string {
	return fmt.Sprintf("%ss%d/%s.lock_", LockPrefix, k.Store, k.Subpath)
}

// LockKey is the lock object of store lockStore's lock at lockSeq:
// lock/s{store}/{subpath}.lock_s{lockStore}_{lockSeq}.
func (k Key) LockKey(lockStore, lockSeq uint64) string {
	return fmt.Sprintf("%ss%d_%d", k.LockObjectPrefix(), lockStore, lockSeq)
}

// parseLockObject parses a lock object name into its data file key and
// holder; ok is false for anything else.
func parseLockObject(name string) (k Key, lockStore, lockSeq uint64, ok bool) {
	rest, found := strings.CutPrefix(name, LockPrefix)
	if !found {
		return Key{}, 0, 0, false
	}
	i := strings.LastIndex(rest, ".lock_s")
	if i < 0 {
		return Key{}, 0, 0, false
	}
	storeSub, holder := rest[:i], rest[i+len(".lock_s"):]
	st, sq, found := strings.Cut(holder, "_")
	if !found {
		return Key{}, 0, 0, false
	}
	lockStore, ok1 := decimal(st)
	lockSeq, ok2 := decimal(sq)
	storeStr, sub, found := strings.Cut(storeSub, "/")
	if !ok1 || !ok2 || !found {
		return Key{}, 0, 0, false
	}
	k, err := ParseKey(storeStr + "/data/" + sub)
	if err != nil {
		return Key{}, 0, 0, false
	}
	return k, lockStore, lockSeq, true
}

// isDataFileKey reports whether name is a data file key (ParseKey).
func isDataFileKey(name string) bool {
	_, err := ParseKey(name)
	return err == nil
}

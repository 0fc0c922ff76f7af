package disagg

import (
	"errors"
	"strings"
	"testing"
)

// Data file keys of upstream's layout parse; everything else is refused
// naming the rule.
func TestParseKey(t *testing.T) {
	good := []struct {
		key            string
		store          uint64
		dmfile         bool
		exists, lock   string
		delmark, lockp string
	}{
		{"s1/data/dat_3_0", 1, false, "s1/data/dat_3_0", "lock/s1/dat_3_0.lock_s7_9", "s1/data/dat_3_0.del", "lock/s1/dat_3_0.lock_"},
		{"s22/data/t_100/dmf_5", 22, true, "s22/data/t_100/dmf_5/meta", "lock/s22/t_100/dmf_5.lock_s7_9", "s22/data/t_100/dmf_5.del", "lock/s22/t_100/dmf_5.lock_"},
		{"s3/data/ks_2_t_100/dmf_5", 3, true, "s3/data/ks_2_t_100/dmf_5/meta", "lock/s3/ks_2_t_100/dmf_5.lock_s7_9", "s3/data/ks_2_t_100/dmf_5.del", "lock/s3/ks_2_t_100/dmf_5.lock_"},
	}
	for _, g := range good {
		k, err := ParseKey(g.key)
		if err != nil {
			t.Errorf("%s: %v", g.key, err)
			continue
		}
		if k.Store != g.store || k.DMFile != g.dmfile || k.String() != g.key || k.ExistsObject() != g.exists ||
			k.LockKey(7, 9) != g.lock || k.DelMarkKey() != g.delmark || k.LockObjectPrefix() != g.lockp {
			t.Errorf("%s: %+v: exists %s lock %s del %s", g.key, k, k.ExistsObject(), k.LockKey(7, 9), k.DelMarkKey())
		}
		pk, store, seq, ok := parseLockObject(k.LockKey(7, 9))
		if !ok || pk != k || store != 7 || seq != 9 {
			t.Errorf("lock object of %s: %+v %d %d %v", g.key, pk, store, seq, ok)
		}
	}
	bad := []struct{ key, want string }{
		{"", "want s{store_id}"},
		{"x1/data/dat_1_0", "want s{store_id}"},
		{"s1/manifest/mf_3", "want s{store_id}"},
		{"sx/data/dat_1_0", "store id"},
		{"s-1/data/dat_1_0", "store id"},
		{"s1/data/dat_1_0.del", "dat_{upload_seq}_{idx}"},
		{"lock/s1/dat_1_0.lock_s2_3", "want s{store_id}"},
		{"s1/data/dat_1", "dat_{upload_seq}_{idx}"},
		{"s1/data/t_1", "DTFile"},
		{"s1/data/t_1/dmf_2/meta", "DTFile"},
		{"s1/data/t_x/dmf_2", "DTFile"},
		{"s1/data/ks_1/dmf_2", "DTFile"},
		{"s1/data/other", "the subpath is none of"},
		{"s1/data/t_1/dmf_" + strings.Repeat("9", 600), "longer than"},
		{"s99999999999999999999/data/dat_1_0", "store id"},
	}
	for _, b := range bad {
		_, err := ParseKey(b.key)
		if !errors.Is(err, ErrNotDataFile) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%q: %v, want %q", b.key, err, b.want)
		}
	}
	for _, name := range []string{"lock/s1/dat_1_0", "lock/s1/dat_1_0.lock_sx_1", "s1/data/dat_1_0", "lock/s1/other.lock_s1_2"} {
		if _, _, _, ok := parseLockObject(name); ok {
			t.Errorf("parseLockObject(%q) ok", name)
		}
	}
}

package dest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want URL
		str  string
	}{
		{"file:///data/export", URL{Scheme: SchemeFile, Path: "/data/export"}, "file:///data/export"},
		{"file:///data/export/", URL{Scheme: SchemeFile, Path: "/data/export"}, "file:///data/export"},
		{"file:/data//export", URL{Scheme: SchemeFile, Path: "/data/export"}, "file:///data/export"},
		{"FILE:///d", URL{Scheme: SchemeFile, Path: "/d"}, "file:///d"},
		{"file:///a%20b/c%23d", URL{Scheme: SchemeFile, Path: "/a b/c#d"}, "file:///a%20b/c%23d"},
		{"s3://my-bucket/cluster-a/sync", URL{Scheme: SchemeS3, Bucket: "my-bucket", Prefix: "cluster-a/sync/"}, "s3://my-bucket/cluster-a/sync/"},
		{"s3://my-bucket/cluster-a/", URL{Scheme: SchemeS3, Bucket: "my-bucket", Prefix: "cluster-a/"}, "s3://my-bucket/cluster-a/"},
		{"s3://my.bucket.1", URL{Scheme: SchemeS3, Bucket: "my.bucket.1"}, "s3://my.bucket.1/"},
		{"s3://bkt/", URL{Scheme: SchemeS3, Bucket: "bkt"}, "s3://bkt/"},
		{"s3://bkt/a..b", URL{Scheme: SchemeS3, Bucket: "bkt", Prefix: "a..b/"}, "s3://bkt/a..b/"},
	} {
		got, err := Parse(c.raw)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.raw, got, err, c.want)
			continue
		}
		if s := got.String(); s != c.str {
			t.Errorf("Parse(%q).String() = %q; want %q", c.raw, s, c.str)
		}
		if again, err := Parse(got.String()); err != nil || again != got {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", got.String(), again, err, got)
		}
	}
}

func TestParseRejects(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		raw  string
		want string
	}{
		{"", "empty"},
		{"file://rel", `host "rel"`},
		{"file://rel/path", `host "rel"`},
		{"file:relative", `relative path "relative"`},
		{"file:relative/more", "relative path"},
		{"file://", "without a path"},
		{"file:///", "root directory"},
		{"file:///data/../etc", `".." element`},
		{"file:///data/./x", `"." element`},
		{"file://" + dir + "/new/../other", `".." element`},
		{"/data/export", "no scheme"},
		{"data/export", "no scheme"},
		{"ftp://host/path", `unsupported scheme "ftp"`},
		{"hdfs://nn:9000/tmp/a", `unsupported scheme "hdfs"`},
		{"http://bucket/x", `unsupported scheme "http"`},
		{"s3://", "without a bucket"},
		{"s3:///prefix", "without a bucket"},
		{"s3:bucket", "has no bucket"},
		{"s3://ab/x", "3 to 63"},
		{"s3://" + strings.Repeat("a", 64), "3 to 63"},
		{"s3://My-Bucket/x", "not allowed"},
		{"s3://my_bucket/x", "not allowed"},
		{"s3://bucket:9000/x", "not allowed"},
		{"s3://-bucket/x", "start and end"},
		{"s3://bucket-/x", "start and end"},
		{"s3://my..bucket/x", `".."`},
		{"s3://192.168.1.1/x", "IP address"},
		{"s3://xn--bucket/x", "reserved"},
		{"s3://bucket-s3alias/x", "reserved"},
		{"s3://bucket/a/../b", `".." element`},
		{"s3://bucket/..", `".." element`},
		{"s3://bucket/a//b", "empty element"},
		{"s3://bucket/.objstore-tmp/x", "reserved"},
		{"s3://bucket/" + strings.Repeat("x", 300), "longer than"},
		{"s3://user:secret@bucket/x", "user information"},
		{"s3://bucket/x?region=eu", "query"},
		{"file:///x#frag", "fragment"},
		{"file:///x\ny", "control character"},
		{"s3://bucket/" + strings.Repeat("x/", MaxURLLen), "more than"},
		{"%zz://x", "not a URL"},
	} {
		_, err := Parse(c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) = %v; want a one-line error containing %q", c.raw, err, c.want)
		} else if c.raw != "" && !strings.HasPrefix(err.Error(), "dest ") {
			t.Errorf("Parse(%q) = %v; want it to name the dest", c.raw, err)
		}
	}
	// Nothing was created.
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("Parse created %v (%v)", entries, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("Parse created a directory: %v", err)
	}
}

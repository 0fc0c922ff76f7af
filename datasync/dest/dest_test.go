package dest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/datasync/exportfmt"
	"github.com/chunkraft/chunkraft/internal/objstore"
	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
)

func mustParse(t *testing.T, raw string) URL {
	t.Helper()
	u, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func mustOpen(t *testing.T, u URL, server objstore.Config) Dest {
	t.Helper()
	d, err := Open(t.Context(), u, server)
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func names(infos []objstore.ObjectInfo) []string {
	var out []string
	for _, o := range infos {
		out = append(out, o.Name)
	}
	return out
}

// exercise is what every dest must do: put, replace, get, list in order,
// delete.
func exercise(t *testing.T, d Dest) {
	ctx := t.Context()
	put := func(name, data string) {
		t.Helper()
		if err := d.Put(ctx, name, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) string {
		t.Helper()
		b, err := d.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	put("pool-1/copyset-2/2-binlog-00000000000000000009.pkt", "second")
	put("pool-1/copyset-2/0-start.pkt", "first, a longer version")
	put("pool-1/copyset-10/0-start.pkt", "other copyset")
	put("pool-1/copyset-2/empty", "")
	// A Put of the same name replaces the object, shorter or longer.
	put("pool-1/copyset-2/0-start.pkt", "first")
	if got := get("pool-1/copyset-2/0-start.pkt"); got != "first" {
		t.Errorf("after the replace: %q", got)
	}
	put("pool-1/copyset-2/0-start.pkt", "first, again and longer")
	if got := get("pool-1/copyset-2/0-start.pkt"); got != "first, again and longer" {
		t.Errorf("after the second replace: %q", got)
	}
	if got := get("pool-1/copyset-2/empty"); got != "" {
		t.Errorf("empty object: %q", got)
	}
	list, err := d.List(ctx, "pool-1/copyset-2/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"pool-1/copyset-2/0-start.pkt", "pool-1/copyset-2/2-binlog-00000000000000000009.pkt", "pool-1/copyset-2/empty"}
	if !slices.Equal(names(list), want) {
		t.Errorf("List = %q; want %q", names(list), want)
	}
	all, err := d.List(ctx, "")
	if err != nil || len(all) != 4 {
		t.Errorf("List everything = %q, %v; want 4 objects and no temporary file", names(all), err)
	}
	if err := d.Delete(ctx, "pool-1/copyset-2/empty"); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(ctx, "pool-1/copyset-2/empty"); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if _, err := d.Get(ctx, "pool-1/copyset-2/empty"); !errors.Is(err, objstore.ErrNotExist) || !strings.Contains(err.Error(), d.String()) {
		t.Errorf("Get of a deleted object = %v; want ErrNotExist naming the dest", err)
	}
	if err := d.Put(ctx, "../escape", []byte("x")); !errors.Is(err, objstore.ErrInvalidName) {
		t.Errorf("Put(../escape) = %v; want ErrInvalidName", err)
	}
	// GetInto reads into a buffer that has the room (object size + 1) and
	// allocates one otherwise; either way it reads the object.
	const name = "pool-1/copyset-2/0-start.pkt"
	size := len("first, again and longer")
	roomy := make([]byte, 0, size+1)
	if b, err := d.GetInto(ctx, name, roomy); err != nil || string(b) != "first, again and longer" || &b[0] != &roomy[:1][0] {
		t.Errorf("GetInto a buffer with room: %q, %v (reused: %v)", b, err, err == nil && &b[0] == &roomy[:1][0])
	}
	small := make([]byte, 0, size)
	if b, err := d.GetInto(ctx, name, small); err != nil || string(b) != "first, again and longer" || &b[0] == &small[:1][0] {
		t.Errorf("GetInto a buffer too small: %q, %v", b, err)
	}
	// GetHead reads the first bytes, or the whole of a shorter object.
	if b, err := d.GetHead(ctx, name, 5); err != nil || string(b) != "first" {
		t.Errorf("GetHead 5: %q, %v", b, err)
	}
	if b, err := d.GetHead(ctx, name, 100); err != nil || string(b) != "first, again and longer" {
		t.Errorf("GetHead past the end: %q, %v", b, err)
	}
	if _, err := d.GetHead(ctx, "pool-1/copyset-2/empty", 5); !errors.Is(err, objstore.ErrNotExist) {
		t.Errorf("GetHead of a missing object = %v; want ErrNotExist", err)
	}
}

func TestFileDest(t *testing.T) {
	root := filepath.Join(t.TempDir(), "export", "nested")
	u := mustParse(t, "file://"+root)
	d := mustOpen(t, u, objstore.Config{}) // a file dest needs nothing of the server
	if d.String() != "file://"+root {
		t.Errorf("String = %q", d.String())
	}
	exercise(t, d)
	// The files are where the names say, and no temporary file is left.
	b, err := os.ReadFile(filepath.Join(root, "pool-1", "copyset-2", "0-start.pkt"))
	if err != nil || string(b) != "first, again and longer" {
		t.Errorf("file: %q, %v", b, err)
	}
	tmp, err := os.ReadDir(filepath.Join(root, objstore.ReservedPrefix))
	if err != nil || len(tmp) != 0 {
		t.Errorf("temporary files left: %v, %v", tmp, err)
	}
	// A second Open of the same directory sees the objects.
	d2 := mustOpen(t, u, objstore.Config{})
	if got, err := d2.Get(t.Context(), "pool-1/copyset-10/0-start.pkt"); err != nil || string(got) != "other copyset" {
		t.Errorf("reopened: %q, %v", got, err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Put(t.Context(), "x", nil); !errors.Is(err, objstore.ErrClosed) {
		t.Errorf("Put after Close = %v", err)
	}
}

func TestFileDestNotADirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, file + "/sub"} {
		if _, err := Open(t.Context(), mustParse(t, "file://"+p), objstore.Config{}); err == nil || !strings.Contains(err.Error(), "dest file://"+p) {
			t.Errorf("Open(%s) = %v; want an error naming the dest", p, err)
		}
	}
	if _, err := Open(t.Context(), URL{Scheme: SchemeFile, Path: "relative"}, objstore.Config{}); err == nil {
		t.Error("Open of a hand-made relative URL succeeded")
	}
}

// s3Server returns the object store configuration of a server whose S3 is
// an in-process S3 service, and creates bucket in it.
func s3Server(t *testing.T, bucket string) objstore.Config {
	t.Helper()
	cfg := objstore.Config{Kind: objstore.KindS3, S3: objstore.S3Config{
		Endpoint: fakes3.Start(t, nil), Bucket: "server-bucket", Prefix: "server-prefix/",
		AccessKey: "test-access", SecretKey: "test-secret", Region: "us-east-1", BucketLookup: "path",
	}}
	mk := cfg.S3
	mk.Bucket, mk.CreateBucket = bucket, true
	s, err := objstore.NewS3(t.Context(), mk)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return cfg
}

func TestS3Dest(t *testing.T) {
	server := s3Server(t, "exports")
	d := mustOpen(t, mustParse(t, "s3://exports/cluster-a/sync"), server)
	if s := d.String(); !strings.Contains(s, "s3://exports/cluster-a/sync/") || !strings.Contains(s, server.S3.Endpoint) || strings.Contains(s, "test-secret") {
		t.Errorf("String = %q", s)
	}
	exercise(t, d)
	// The objects are under the URL's bucket and prefix, not the server's.
	raw := server.S3
	raw.Bucket, raw.Prefix = "exports", ""
	s, err := objstore.NewS3(t.Context(), raw)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list, err := s.List(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names(list) {
		if !strings.HasPrefix(name, "cluster-a/sync/pool-1/") {
			t.Errorf("object %q is outside the dest's prefix", name)
		}
	}
	if len(list) != 3 {
		t.Errorf("bucket holds %q", names(list))
	}
	// Two dests in one bucket with different prefixes do not see each other.
	other := mustOpen(t, mustParse(t, "s3://exports/cluster-b"), server)
	if got, err := other.List(t.Context(), ""); err != nil || len(got) != 0 {
		t.Errorf("the other prefix lists %q, %v", names(got), err)
	}
}

func TestS3DestMissingBucket(t *testing.T) {
	server := s3Server(t, "exports")
	server.S3.CreateBucket = true // the server's create_bucket does not apply to dests
	_, err := Open(t.Context(), mustParse(t, "s3://missing-bucket/x"), server)
	if err == nil || !strings.Contains(err.Error(), `"missing-bucket"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Open of a missing bucket = %v", err)
	}
	check := server.S3
	check.Bucket, check.CreateBucket = "missing-bucket", false
	if _, err := objstore.NewS3(t.Context(), check); err == nil {
		t.Error("Open created the missing bucket")
	}
}

// An unreachable endpoint fails Open. (Without a deadline minio-go gives up
// after its retries, about 4 s; the test's context ends it sooner.)
func TestS3DestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	server := objstore.Config{Kind: objstore.KindS3, S3: objstore.S3Config{
		Endpoint: addr, Bucket: "b", AccessKey: "a", SecretKey: "s", Region: "us-east-1", BucketLookup: "path",
	}}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = Open(ctx, mustParse(t, "s3://exports/x"), server)
	if err == nil || !strings.Contains(err.Error(), "dest s3://exports/x/") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("Open against a closed port = %v; want an error naming the dest and the endpoint", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open took %v to give up", d)
	}
}

func TestS3DestNeedsAnEndpoint(t *testing.T) {
	_, err := Open(t.Context(), mustParse(t, "s3://exports/x"), objstore.DefaultConfig(t.TempDir()))
	if err == nil || !strings.Contains(err.Error(), "no S3 endpoint configured") {
		t.Errorf("Open without an S3 endpoint = %v", err)
	}
}

// racyStore replaces the object between Get's Stat and its read, once.
type racyStore struct {
	objstore.Store
	replace []byte
}

func (r *racyStore) Stat(ctx context.Context, name string) (objstore.ObjectInfo, error) {
	info, err := r.Store.Stat(ctx, name)
	if r.replace != nil {
		data := r.replace
		r.replace = nil
		if err := r.Store.Put(ctx, name, bytes.NewReader(data), int64(len(data))); err != nil {
			return info, err
		}
	}
	return info, err
}

// Get returns a whole object, never a mix or a part, when the object is
// replaced by one of another size while Get reads it.
func TestGetObjectReplacedMeanwhile(t *testing.T) {
	for _, replacement := range []string{"a much longer new version", "new"} {
		l, err := objstore.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		d := New(&racyStore{Store: l}, "racy")
		if err := d.Put(t.Context(), "obj", []byte("old version")); err != nil {
			t.Fatal(err)
		}
		d.(*storeDest).store.(*racyStore).replace = []byte(replacement)
		got, err := d.Get(t.Context(), "obj")
		if err != nil || string(got) != replacement {
			t.Errorf("Get = %q, %v; want %q", got, err, replacement)
		}
		d.Close()
	}
}

func TestGetTooBig(t *testing.T) {
	d := New(bigStore{}, "big")
	if _, err := d.Get(t.Context(), "huge"); err == nil || !strings.Contains(err.Error(), fmt.Sprint(MaxGetSize)) {
		t.Errorf("Get of a huge object = %v", err)
	}
}

// bigStore has one object larger than MaxGetSize (Stat only).
type bigStore struct{ objstore.Store }

func (bigStore) Stat(_ context.Context, name string) (objstore.ObjectInfo, error) {
	return objstore.ObjectInfo{Name: name, Size: MaxGetSize + 1}, nil
}

// Every packet fits in one PutObject.
func TestPacketsFitOnePut(t *testing.T) {
	if exportfmt.MaxPacketSize > objstore.MaxSinglePutSize {
		t.Errorf("a %d-byte packet would be a multipart upload (single PUT up to %d)", exportfmt.MaxPacketSize, objstore.MaxSinglePutSize)
	}
}

package objstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
)

func testS3Config(endpoint, bucket, prefix string) S3Config {
	return S3Config{
		Endpoint:     endpoint,
		Bucket:       bucket,
		Prefix:       prefix,
		AccessKey:    "test-access",
		SecretKey:    "test-secret",
		Region:       "us-east-1",
		BucketLookup: "path",
		CreateBucket: true,
	}
}

func mustS3(t *testing.T, cfg S3Config) *S3 {
	t.Helper()
	s, err := NewS3(t.Context(), cfg)
	if err != nil {
		t.Fatalf("NewS3(%v): %v", cfg, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var uniq atomic.Int64

func TestS3Conformance(t *testing.T) {
	t.Parallel()
	endpoint := fakes3.Start(t, nil)
	// Every test gets its own prefix in one shared bucket.
	runConformance(t, func(t *testing.T) Store {
		return mustS3(t, testS3Config(endpoint, "conformance", fmt.Sprintf("run/t%d", uniq.Add(1))))
	})
}

func TestS3ConformanceRangeIgnored(t *testing.T) {
	t.Parallel()
	// A server that ignores Range and always sends the whole object; every
	// test gets its own bucket and no prefix.
	endpoint := fakes3.Start(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Del("Range")
			h.ServeHTTP(w, r)
		})
	})
	runConformance(t, func(t *testing.T) Store {
		return mustS3(t, testS3Config(endpoint, fmt.Sprintf("bucket-%d", uniq.Add(1)), ""))
	})
}

func TestS3PrefixIsolation(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	endpoint := fakes3.Start(t, nil)
	s1 := mustS3(t, testS3Config(endpoint, "shared", "p1"))
	s2 := mustS3(t, testS3Config(endpoint, "shared", "/p2/"))
	all := mustS3(t, testS3Config(endpoint, "shared", ""))
	mustPut(t, ctx, s1, "obj", []byte("one"))
	mustPut(t, ctx, s2, "obj", []byte("two"))
	if got := mustRead(t, ctx, s1, "obj", 0, 3); string(got) != "one" {
		t.Errorf("s1 obj = %q", got)
	}
	if got := mustRead(t, ctx, s2, "obj", 0, 3); string(got) != "two" {
		t.Errorf("s2 obj = %q", got)
	}
	if got, err := s1.List(ctx, ""); err != nil || !slices.Equal(names(got), []string{"obj"}) {
		t.Errorf("s1 List = %q, %v", names(got), err)
	}
	if got, err := all.List(ctx, ""); err != nil || !slices.Equal(names(got), []string{"p1/obj", "p2/obj"}) {
		t.Errorf("unprefixed List = %q, %v; want [p1/obj p2/obj]", names(got), err)
	}
	if err := s1.Delete(ctx, "obj"); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Stat(ctx, "obj"); err != nil {
		t.Errorf("deleting s1/obj affected s2: %v", err)
	}
}

func TestS3ListSkipsForeignKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	endpoint := fakes3.Start(t, nil)
	s := mustS3(t, testS3Config(endpoint, "foreign", "pfx"))
	for _, key := range []string{"pfx/ok", "pfx/a//b", "pfx/dir/", "pfx/../up", "pfxsibling", "other/x"} {
		if _, err := s.core.Client.PutObject(ctx, "foreign", key, strings.NewReader("x"), 1, minio.PutObjectOptions{}); err != nil {
			t.Fatalf("raw put %q: %v", key, err)
		}
	}
	if got, err := s.List(ctx, ""); err != nil || !slices.Equal(names(got), []string{"ok"}) {
		t.Errorf("List = %q, %v; want [ok]", names(got), err)
	}
}

// A Put up to MaxSinglePutSize is one PutObject request, never a multipart
// upload (minio-go's own threshold is 16 MiB).
func TestS3SinglePut(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var reqs []string
	endpoint := fakes3.Start(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				mu.Lock()
				reqs = append(reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
				mu.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	s := mustS3(t, testS3Config(endpoint, "single", "p"))
	mu.Lock()
	reqs = nil // the bucket's creation
	mu.Unlock()
	data := randBytes(8, 20<<20)
	mustPut(t, t.Context(), s, "big", data)
	mu.Lock()
	got := slices.Clone(reqs)
	mu.Unlock()
	if len(got) != 1 || got[0] != "PUT /single/p/big?" {
		t.Errorf("a %d-byte Put sent %q; want one PutObject", len(data), got)
	}
	if back := mustRead(t, t.Context(), s, "big", 0, len(data)); !slices.Equal(back, data) {
		t.Error("wrong bytes")
	}
}

func TestS3Bucket(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	endpoint := fakes3.Start(t, nil)
	cfg := testS3Config(endpoint, "later", "")
	cfg.CreateBucket = false
	if _, err := NewS3(ctx, cfg); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("NewS3 without the bucket = %v; want a does-not-exist error", err)
	}
	cfg.CreateBucket = true
	mustS3(t, cfg)
	mustS3(t, cfg) // already there: fine
	cfg.CreateBucket = false
	mustS3(t, cfg)
}

func TestS3EndpointURL(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	endpoint := fakes3.Start(t, nil)
	cfg := testS3Config("http://"+endpoint, "url", "")
	cfg.Secure = true // the scheme wins
	s := mustS3(t, cfg)
	mustPut(t, ctx, s, "x", []byte("y"))
	if got := mustRead(t, ctx, s, "x", 0, 1); string(got) != "y" {
		t.Errorf("x = %q", got)
	}
}

func TestS3Unreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = NewS3(ctx, testS3Config(addr, "b", ""))
	if err == nil {
		t.Fatal("NewS3 against a closed port succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("NewS3 took %v to give up", d)
	}
}

func TestS3ConfigValidation(t *testing.T) {
	t.Parallel()
	good := testS3Config("127.0.0.1:9000", "b", "")
	for _, c := range []struct {
		name string
		mod  func(*S3Config)
	}{
		{"no endpoint", func(c *S3Config) { c.Endpoint = "" }},
		{"no bucket", func(c *S3Config) { c.Bucket = "" }},
		{"access key only", func(c *S3Config) { c.SecretKey = "" }},
		{"secret key only", func(c *S3Config) { c.AccessKey = "" }},
		{"bad lookup", func(c *S3Config) { c.BucketLookup = "virtual" }},
		{"endpoint path", func(c *S3Config) { c.Endpoint = "http://h:1/path" }},
		{"endpoint scheme", func(c *S3Config) { c.Endpoint = "ftp://h:1" }},
		{"endpoint slash", func(c *S3Config) { c.Endpoint = "h:1/x" }},
		{"endpoint no host", func(c *S3Config) { c.Endpoint = "http://" }},
		{"bad prefix", func(c *S3Config) { c.Prefix = "a/../b" }},
		{"reserved prefix", func(c *S3Config) { c.Prefix = ReservedPrefix }},
	} {
		cfg := good
		c.mod(&cfg)
		if err := cfg.validate(); err == nil {
			t.Errorf("%s: %v validated", c.name, cfg)
		}
		if _, err := NewS3(t.Context(), cfg); err == nil {
			t.Errorf("%s: NewS3 succeeded", c.name)
		}
	}
	for _, ep := range []string{"h", "h:1", "http://h:1", "https://h", "https://h/"} {
		cfg := good
		cfg.Endpoint = ep
		if err := cfg.validate(); err != nil {
			t.Errorf("endpoint %q: %v", ep, err)
		}
	}
	for _, c := range []struct {
		ep       string
		secure   bool
		wantHost string
		wantTLS  bool
	}{
		{"h:1", false, "h:1", false},
		{"h:1", true, "h:1", true},
		{"http://h:1", true, "h:1", false},
		{"https://h", false, "h", true},
	} {
		host, tls, err := parseEndpoint(c.ep, c.secure)
		if err != nil || host != c.wantHost || tls != c.wantTLS {
			t.Errorf("parseEndpoint(%q, %t) = %q, %t, %v; want %q, %t", c.ep, c.secure, host, tls, err, c.wantHost, c.wantTLS)
		}
	}
}

func TestResolveCredentials(t *testing.T) { // not parallel: uses t.Setenv
	t.Setenv("AWS_ACCESS_KEY_ID", "env-id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
	t.Setenv("AWS_SESSION_TOKEN", "env-token")
	v, err := resolveCredentials(S3Config{AccessKey: "cfg-id", SecretKey: "cfg-secret"}).GetWithContext(nil)
	if err != nil || v.AccessKeyID != "cfg-id" || v.SecretAccessKey != "cfg-secret" || v.SessionToken != "" {
		t.Errorf("explicit credentials = %+v, %v", v, err)
	}
	v, err = resolveCredentials(S3Config{}).GetWithContext(nil)
	if err != nil || v.AccessKeyID != "env-id" || v.SecretAccessKey != "env-secret" || v.SessionToken != "env-token" {
		t.Errorf("environment credentials = %+v, %v", v, err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	v, err = resolveCredentials(S3Config{}).GetWithContext(nil)
	if err != nil || v.AccessKeyID != "" || !v.SignerType.IsAnonymous() {
		t.Errorf("no credentials = %+v, %v; want anonymous", v, err)
	}
}

func TestParseContentRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in         string
		start, end int64
		ok         bool
	}{
		{"bytes 0-9/10", 0, 9, true},
		{"bytes 100-199/*", 100, 199, true},
		{"bytes 5-5/6", 5, 5, true},
		{"bytes */10", 0, 0, false},
		{"bytes 9-0/10", 0, 0, false},
		{"items 0-9/10", 0, 0, false},
		{"bytes 0-9", 0, 0, false},
		{"bytes a-9/10", 0, 0, false},
		{"bytes -1-9/10", 0, 0, false},
	} {
		start, end, err := parseContentRange(c.in)
		if (err == nil) != c.ok || c.ok && (start != c.start || end != c.end) {
			t.Errorf("parseContentRange(%q) = %d, %d, %v", c.in, start, end, err)
		}
	}
}

func TestS3MapsNotExist(t *testing.T) {
	t.Parallel()
	s := &S3{bucket: "b", prefix: "p/"}
	err := s.wrap(t.Context(), "read", "x", minio.ErrorResponse{Code: minio.NoSuchKey, StatusCode: 404})
	if !errors.Is(err, ErrNotExist) || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("wrap(NoSuchKey) = %v", err)
	}
	err = s.wrap(t.Context(), "read", "x", minio.ErrorResponse{Code: minio.AccessDenied, StatusCode: 403})
	if errors.Is(err, ErrNotExist) || !strings.Contains(err.Error(), "p/x") {
		t.Errorf("wrap(AccessDenied) = %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.wrap(ctx, "read", "x", errors.New("connection reset")); !errors.Is(err, context.Canceled) {
		t.Errorf("wrap with a cancelled context = %v; want context.Canceled in the chain", err)
	}
}

func TestS3KeyLength(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	endpoint := fakes3.Start(t, nil)
	name := longName(MaxNameLen)
	// Without a prefix a name of MaxNameLen bytes fits...
	mustPut(t, ctx, mustS3(t, testS3Config(endpoint, "keylen", "")), name, []byte("x"))
	// ...with one it does not.
	s := mustS3(t, testS3Config(endpoint, "keylen", "pre"))
	if err := s.Put(ctx, name, strings.NewReader("x"), 1); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Put of a %d-byte name under a prefix = %v; want ErrInvalidName", len(name), err)
	}
	if _, err := s.Stat(ctx, name); !errors.Is(err, ErrInvalidName) {
		t.Errorf("Stat = %v; want ErrInvalidName", err)
	}
	mustPut(t, ctx, s, longName(MaxNameLen-len("pre/")), []byte("x"))
}

package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3 is a Store on an S3-compatible service, using minio-go. Object name n
// is stored under key Prefix+n of the configured bucket. (S3 limits a whole
// key to 1024 bytes, so a non-empty Prefix shortens the usable names.)
//
// ReadAt is a ranged GET, Put one PutObject (a multipart upload above
// MaxSinglePutSize, so that nothing of a smaller Put can linger as an
// incomplete upload), Stat a HEAD, Delete a RemoveObject and List a
// recursive ListObjects. Keys under the prefix that are not valid object
// names (written by other tools) are left out of List.
type S3 struct {
	core      *minio.Core
	transport *http.Transport
	bucket    string
	prefix    string
	closed    atomic.Bool
}

var _ Store = (*S3)(nil)

// MaxSinglePutSize is the largest object S3.Put uploads in one PutObject.
const MaxSinglePutSize = 64 << 20

// NewS3 connects to the service cfg describes and checks that the bucket
// exists, creating it if cfg.CreateBucket is set.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	host, secure, _ := parseEndpoint(cfg.Endpoint, cfg.Secure)
	lookup, _ := parseBucketLookup(cfg.BucketLookup)
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3: %w", err)
	}
	core, err := minio.NewCore(host, &minio.Options{
		Creds:        resolveCredentials(cfg),
		Secure:       secure,
		Transport:    tr,
		Region:       cfg.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("objstore: s3 client for %s: %w", cfg.Endpoint, err)
	}
	s := &S3{core: core, transport: tr, bucket: cfg.Bucket, prefix: normalizePrefix(cfg.Prefix)}
	if err := s.ensureBucket(ctx, cfg); err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	return s, nil
}

func (s *S3) ensureBucket(ctx context.Context, cfg S3Config) error {
	ok, err := s.core.BucketExists(ctx, s.bucket)
	if err != nil {
		return fmt.Errorf("objstore: s3 bucket %q at %s: %w", s.bucket, cfg.Endpoint, err)
	}
	if ok {
		return nil
	}
	if !cfg.CreateBucket {
		return fmt.Errorf("objstore: s3 bucket %q at %s does not exist (set s3.create_bucket to create it)", s.bucket, cfg.Endpoint)
	}
	err = s.core.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: cfg.Region})
	if err != nil {
		switch minio.ToErrorResponse(err).Code {
		case minio.BucketAlreadyOwnedByYou, minio.BucketAlreadyExists: // created concurrently
			return nil
		}
		return fmt.Errorf("objstore: s3 create bucket %q at %s: %w", s.bucket, cfg.Endpoint, err)
	}
	return nil
}

func (c S3Config) validate() error {
	if c.Endpoint == "" {
		return errors.New("objstore: s3.endpoint is required")
	}
	if _, _, err := parseEndpoint(c.Endpoint, c.Secure); err != nil {
		return err
	}
	if c.Bucket == "" {
		return errors.New("objstore: s3.bucket is required")
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("objstore: s3.access_key and s3.secret_key must be set together")
	}
	if _, err := parseBucketLookup(c.BucketLookup); err != nil {
		return err
	}
	if p := normalizePrefix(c.Prefix); p != "" {
		if err := ValidateName(strings.TrimSuffix(p, "/")); err != nil {
			return fmt.Errorf("objstore: s3.prefix: %w", err)
		}
	}
	return nil
}

// parseEndpoint returns the host[:port] minio-go wants and whether to use
// TLS.
func parseEndpoint(ep string, secure bool) (string, bool, error) {
	if !strings.Contains(ep, "://") {
		if strings.ContainsAny(ep, "/?#@") {
			return "", false, fmt.Errorf("objstore: s3.endpoint %q: want host[:port] or http(s)://host[:port]", ep)
		}
		return ep, secure, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", false, fmt.Errorf("objstore: s3.endpoint: %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("objstore: s3.endpoint %q: scheme must be http or https", ep)
	case u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "", false, fmt.Errorf("objstore: s3.endpoint %q: want http(s)://host[:port] with no path", ep)
	}
	return u.Host, u.Scheme == "https", nil
}

func parseBucketLookup(s string) (minio.BucketLookupType, error) {
	switch s {
	case "", "auto":
		return minio.BucketLookupAuto, nil
	case "path":
		return minio.BucketLookupPath, nil
	case "dns":
		return minio.BucketLookupDNS, nil
	}
	return 0, fmt.Errorf(`objstore: s3.bucket_lookup %q: want "auto", "path" or "dns"`, s)
}

func normalizePrefix(p string) string {
	p = strings.TrimLeft(p, "/")
	if p != "" && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// resolveCredentials returns the explicit credentials of cfg, else those of
// the AWS_* environment variables, else anonymous ones.
func resolveCredentials(cfg S3Config) *credentials.Credentials {
	if cfg.AccessKey != "" {
		return credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	}
	return credentials.NewStaticV4(os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN"))
}

func (s *S3) key(name string) string { return s.prefix + name }

// checkName validates name and the length of its key: S3 limits keys to
// MaxNameLen bytes, so the prefix takes room from the name.
func (s *S3) checkName(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if len(s.prefix)+len(name) > MaxNameLen {
		return fmt.Errorf("%w: %q is too long: with prefix %q its key exceeds %d bytes", ErrInvalidName, name, s.prefix, MaxNameLen)
	}
	return nil
}

// begin performs the checks every call starts with.
func (s *S3) begin(ctx context.Context, op, name string) error {
	if s.closed.Load() {
		return fmt.Errorf("objstore: s3 %s %q: %w", op, name, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: s3 %s %q: %w", op, name, err)
	}
	return nil
}

// wrap adds context to a minio-go error, mapping a missing key to
// ErrNotExist and making sure an ended ctx shows in the error chain.
func (s *S3) wrap(ctx context.Context, op, name string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", err, cerr)
	}
	if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
		return fmt.Errorf("objstore: s3 %s %q: %w: %w", op, name, ErrNotExist, err)
	}
	return fmt.Errorf("objstore: s3 %s %q (bucket %s, key %s): %w", op, name, s.bucket, s.key(name), err)
}

// ReadAt implements Store.
func (s *S3) ReadAt(ctx context.Context, name string, p []byte, off int64) (int, error) {
	if err := s.begin(ctx, "read", name); err != nil {
		return 0, err
	}
	if err := s.checkName(name); err != nil {
		return 0, fmt.Errorf("objstore: s3 read: %w", err)
	}
	if off < 0 {
		return 0, fmt.Errorf("objstore: s3 read %q: negative offset %d", name, off)
	}
	if len(p) == 0 {
		_, err := s.stat(ctx, "read", name)
		return 0, err
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
		return 0, fmt.Errorf("objstore: s3 read %q: %w", name, err)
	}
	body, info, hdr, err := s.core.GetObject(ctx, s.bucket, s.key(name), opts)
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.InvalidRange { // off >= size
			return 0, fmt.Errorf("objstore: s3 read %q at %d: %w", name, off, shortObject(len(p), 0))
		}
		return 0, s.wrap(ctx, "read", name, err)
	}
	defer body.Close()

	// avail is how many bytes from off the response carries.
	var avail int64
	if cr := hdr.Get("Content-Range"); cr != "" {
		start, end, err := parseContentRange(cr)
		if err != nil || start != off {
			return 0, fmt.Errorf("objstore: s3 read %q at %d: unexpected Content-Range %q", name, off, cr)
		}
		avail = end - start + 1
	} else {
		// The server ignored the Range header and sent the whole object.
		if _, err := io.CopyN(io.Discard, body, min(off, info.Size)); err != nil {
			return 0, s.wrap(ctx, "read", name, err)
		}
		avail = max(info.Size-off, 0)
	}
	want := min(int64(len(p)), avail)
	if n, err := io.ReadFull(body, p[:want]); err != nil {
		return n, s.wrap(ctx, "read", name, fmt.Errorf("response body: %w", err))
	}
	if want < int64(len(p)) {
		return int(want), fmt.Errorf("objstore: s3 read %q at %d: %w", name, off, shortObject(len(p), int(want)))
	}
	return len(p), nil
}

// parseContentRange parses "bytes start-end/total".
func parseContentRange(s string) (start, end int64, err error) {
	rest, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, errors.New("bad unit")
	}
	rng, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, errors.New("no total")
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, errors.New("no range")
	}
	if start, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, err
	}
	if end, err = strconv.ParseInt(b, 10, 64); err != nil {
		return 0, 0, err
	}
	if start < 0 || end < start {
		return 0, 0, errors.New("bad range")
	}
	return start, end, nil
}

// emptySHA256 is the hex SHA-256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// Put implements Store.
func (s *S3) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if err := s.begin(ctx, "put", name); err != nil {
		return err
	}
	if err := checkPut(name, r, size); err != nil {
		return fmt.Errorf("objstore: s3 put %q: %w", name, err)
	}
	if err := s.checkName(name); err != nil {
		return fmt.Errorf("objstore: s3 put: %w", err)
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream", DisableMultipart: size <= MaxSinglePutSize}
	var err error
	src := &exactReader{ctx: ctx, r: r, remaining: size}
	if size == 0 {
		// minio-go's streaming (aws-chunked) signature, used on plain HTTP,
		// sends an empty body without a Content-Length, which S3 rejects
		// (MissingContentLength). Sign the known empty payload instead.
		opts.DisableContentSha256 = true
		_, err = s.core.PutObject(ctx, s.bucket, s.key(name), http.NoBody, 0, "", emptySHA256, opts)
	} else {
		_, err = s.core.Client.PutObject(ctx, s.bucket, s.key(name), src, size, opts)
	}
	if err != nil {
		if src.err != nil { // the source failed: report that, not the HTTP error
			return fmt.Errorf("objstore: s3 put %q: %w", name, src.err)
		}
		return s.wrap(ctx, "put", name, err)
	}
	return nil
}

// Stat implements Store.
func (s *S3) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	if err := s.begin(ctx, "stat", name); err != nil {
		return ObjectInfo{}, err
	}
	if err := s.checkName(name); err != nil {
		return ObjectInfo{}, fmt.Errorf("objstore: s3 stat: %w", err)
	}
	return s.stat(ctx, "stat", name)
}

func (s *S3) stat(ctx context.Context, op, name string) (ObjectInfo, error) {
	info, err := s.core.StatObject(ctx, s.bucket, s.key(name), minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s.wrap(ctx, op, name, err)
	}
	return ObjectInfo{Name: name, Size: info.Size, ModTime: info.LastModified}, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, name string) error {
	if err := s.begin(ctx, "delete", name); err != nil {
		return err
	}
	if err := s.checkName(name); err != nil {
		return fmt.Errorf("objstore: s3 delete: %w", err)
	}
	err := s.core.RemoveObject(ctx, s.bucket, s.key(name), minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != minio.NoSuchKey {
		return s.wrap(ctx, "delete", name, err)
	}
	return nil
}

// List implements Store.
func (s *S3) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := s.begin(ctx, "list", prefix); err != nil {
		return nil, err
	}
	if err := validatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("objstore: s3 list: %w", err)
	}
	// Cancelling stops minio-go's listing goroutine if we return early.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []ObjectInfo
	for obj := range s.core.Client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("objstore: s3 list %q (bucket %s): %w", prefix, s.bucket, obj.Err)
		}
		name, ok := strings.CutPrefix(obj.Key, s.prefix)
		if !ok || ValidateName(name) != nil {
			continue
		}
		out = append(out, ObjectInfo{Name: name, Size: obj.Size, ModTime: obj.LastModified})
	}
	if err := ctx.Err(); err != nil { // minio-go may end the listing silently
		return nil, fmt.Errorf("objstore: s3 list %q: %w", prefix, err)
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Close implements Store: it closes idle connections.
func (s *S3) Close() error {
	if !s.closed.Swap(true) {
		s.transport.CloseIdleConnections()
	}
	return nil
}

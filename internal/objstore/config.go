package objstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
)

// Store kinds accepted in Config.Kind.
const (
	KindLocal = "local"
	KindS3    = "s3"
)

// DefaultLocalDir is the directory, relative to the chunkserver data
// directory, of the default local object store.
const DefaultLocalDir = "objects"

// Config selects and configures an object store. The chunkserver
// configuration embeds it under "object_store:", for example
//
//	object_store:
//	  kind: s3
//	  s3:
//	    endpoint: https://s3.eu-west-1.amazonaws.com
//	    bucket: chunkraft
//	    prefix: cluster-a/
//	    region: eu-west-1
//
// or, the default,
//
//	object_store:
//	  kind: local
//	  local:
//	    root: /var/lib/chunkraft/objects
type Config struct {
	// Kind is "local" (the default when empty) or "s3".
	Kind string `yaml:"kind"`
	// Local configures the "local" kind.
	Local LocalConfig `yaml:"local"`
	// S3 configures the "s3" kind.
	S3 S3Config `yaml:"s3"`
}

// LocalConfig configures a Local store.
type LocalConfig struct {
	// Root is the directory holding the objects. It is created if missing.
	// Empty means "<data_dir>/objects", filled in by ApplyDefaults.
	Root string `yaml:"root"`
}

// S3Config configures an S3 store.
type S3Config struct {
	// Endpoint is the service address: "host[:port]", or a URL
	// "http://host[:port]" / "https://host[:port]" whose scheme then
	// overrides Secure. Required.
	Endpoint string `yaml:"endpoint"`
	// Bucket holds the objects. Required.
	Bucket string `yaml:"bucket"`
	// Prefix is prepended to every object name to form its key, so several
	// clusters can share one bucket. A '/' is appended if missing; leading
	// '/'s are dropped. Empty means the bucket root.
	Prefix string `yaml:"prefix"`
	// AccessKey and SecretKey are the credentials. When both are empty the
	// environment variables AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
	// (and AWS_SESSION_TOKEN, if set) are used, read once when the store
	// is opened; when those are empty too requests are anonymous. Setting
	// only one of the two is an error.
	AccessKey string `yaml:"access_key"`
	SecretKey string `yaml:"secret_key"`
	// Secure selects HTTPS when Endpoint has no scheme.
	Secure bool `yaml:"secure"`
	// Region is the bucket's region; empty lets the client discover it.
	Region string `yaml:"region"`
	// BucketLookup is the addressing style: "auto" (the default: virtual
	// host style for AWS and a few known services, path style otherwise),
	// "path" (http://host/bucket/key) or "dns" (http://bucket.host/key).
	BucketLookup string `yaml:"bucket_lookup"`
	// CreateBucket creates Bucket when it does not exist; otherwise
	// opening the store fails if it is missing.
	CreateBucket bool `yaml:"create_bucket"`
}

// String formats the configuration with the secret key redacted, so the
// configuration can be logged.
func (c S3Config) String() string {
	secret := ""
	if c.SecretKey != "" {
		secret = "<redacted>"
	}
	return fmt.Sprintf("{Endpoint:%s Bucket:%s Prefix:%s AccessKey:%s SecretKey:%s Secure:%t Region:%s BucketLookup:%s CreateBucket:%t}",
		c.Endpoint, c.Bucket, c.Prefix, c.AccessKey, secret, c.Secure, c.Region, c.BucketLookup, c.CreateBucket)
}

// DefaultConfig returns the default configuration for a chunkserver whose
// data directory is dataDir: a local store in dataDir/objects.
func DefaultConfig(dataDir string) Config {
	return Config{Kind: KindLocal, Local: LocalConfig{Root: filepath.Join(dataDir, DefaultLocalDir)}}
}

// ApplyDefaults fills in what the configuration leaves empty: Kind becomes
// "local" and, for a local store, Root becomes dataDir/objects.
func (c *Config) ApplyDefaults(dataDir string) {
	if c.Kind == "" {
		c.Kind = KindLocal
	}
	if c.Kind == KindLocal && c.Local.Root == "" && dataDir != "" {
		c.Local.Root = filepath.Join(dataDir, DefaultLocalDir)
	}
}

// Validate checks the configuration without touching the store.
func (c Config) Validate() error {
	switch c.Kind {
	case KindLocal, "":
		if c.Local.Root == "" {
			return errors.New("objstore: local.root is required")
		}
		return nil
	case KindS3:
		return c.S3.validate()
	default:
		return fmt.Errorf("objstore: unknown kind %q (want %q or %q)", c.Kind, KindLocal, KindS3)
	}
}

// Open opens the store the configuration describes. An empty Kind means
// "local"; Local.Root must be set (see ApplyDefaults).
func Open(ctx context.Context, c Config) (Store, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch c.Kind {
	case KindS3:
		return NewS3(ctx, c.S3)
	default:
		return NewLocal(c.Local.Root)
	}
}

// KeyPrefix is the prefix the store puts before every object name (Prefix
// normalized: no leading '/', a trailing '/' unless empty).
func (c S3Config) KeyPrefix() string { return normalizePrefix(c.Prefix) }

package objstore

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/chunkraft/chunkraft/internal/objstore/fakes3"
)

func TestConfigYAML(t *testing.T) {
	t.Parallel()
	const doc = `
object_store:
  kind: s3
  local:
    root: /data/objects
  s3:
    endpoint: https://s3.example.com
    bucket: chunks
    prefix: cluster-a/
    access_key: AK
    secret_key: SK
    secure: true
    region: eu-west-1
    bucket_lookup: path
    create_bucket: true
`
	var got struct {
		ObjectStore Config `yaml:"object_store"`
	}
	if err := yaml.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Kind:  KindS3,
		Local: LocalConfig{Root: "/data/objects"},
		S3: S3Config{
			Endpoint: "https://s3.example.com", Bucket: "chunks", Prefix: "cluster-a/",
			AccessKey: "AK", SecretKey: "SK", Secure: true, Region: "eu-west-1",
			BucketLookup: "path", CreateBucket: true,
		},
	}
	if got.ObjectStore != want {
		t.Errorf("parsed %+v\nwant   %+v", got.ObjectStore, want)
	}
	if err := got.ObjectStore.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	want := Config{Kind: KindLocal, Local: LocalConfig{Root: filepath.Join(dataDir, "objects")}}
	if got := DefaultConfig(dataDir); got != want {
		t.Errorf("DefaultConfig = %+v; want %+v", got, want)
	}
	var c Config
	c.ApplyDefaults(dataDir)
	if c != want {
		t.Errorf("ApplyDefaults on the zero Config = %+v; want %+v", c, want)
	}
	c = Config{Local: LocalConfig{Root: "/elsewhere"}}
	c.ApplyDefaults(dataDir)
	if c.Kind != KindLocal || c.Local.Root != "/elsewhere" {
		t.Errorf("ApplyDefaults overrode an explicit root: %+v", c)
	}
	c = Config{Kind: KindS3}
	c.ApplyDefaults(dataDir)
	if c.Local.Root != "" {
		t.Errorf("ApplyDefaults filled local.root for kind s3: %+v", c)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "local.root"},
		{Config{Kind: KindLocal}, "local.root"},
		{Config{Kind: "gcs", Local: LocalConfig{Root: "/x"}}, "unknown kind"},
		{Config{Kind: KindS3}, "s3.endpoint"},
		{Config{Kind: KindS3, S3: S3Config{Endpoint: "h:1"}}, "s3.bucket"},
	} {
		err := c.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v; want an error about %s", c.cfg, err, c.want)
		}
		if _, err := Open(t.Context(), c.cfg); err == nil {
			t.Errorf("Open(%+v) succeeded", c.cfg)
		}
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := filepath.Join(t.TempDir(), "objects")
	s, err := Open(ctx, Config{Local: LocalConfig{Root: root}}) // empty kind: local
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := s.(*Local); !ok || l.Root() != root {
		t.Errorf("Open(local) = %T %v", s, s)
	}
	mustPut(t, ctx, s, "x", []byte("local"))
	s.Close()

	endpoint := fakes3.Start(t, nil)
	s, err = Open(ctx, Config{Kind: KindS3, S3: testS3Config(endpoint, "opened", "p")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*S3); !ok {
		t.Errorf("Open(s3) = %T", s)
	}
	mustPut(t, ctx, s, "x", []byte("s3"))
	if got := mustRead(t, ctx, s, "x", 0, 2); string(got) != "s3" {
		t.Errorf("x = %q", got)
	}
}

func TestS3ConfigRedactsSecret(t *testing.T) {
	t.Parallel()
	c := Config{Kind: KindS3, S3: S3Config{Endpoint: "h", Bucket: "b", AccessKey: "AKID", SecretKey: "hunter2"}}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v", c), fmt.Sprintf("%v", c.S3), c.S3.String()} {
		if strings.Contains(s, "hunter2") || !strings.Contains(s, "AKID") {
			t.Errorf("formatted config %q leaks the secret or lost the access key", s)
		}
	}
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, name := range invalidNames {
		if err := ValidateName(name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v; want ErrInvalidName", name, err)
		}
	}
	for _, name := range []string{"a", "a/b", "a..b", ".a", "a.", "...", "x/" + ReservedPrefix, ReservedPrefix + "x", longName(MaxNameLen)} {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v; want nil", name, err)
		}
	}
	for _, p := range []string{"", "a", "a/", "a/b", "a/.", "a/..", ".", "..x", ReservedPrefix, "x/" + ReservedPrefix + "/"} {
		if err := validatePrefix(p); err != nil {
			t.Errorf("validatePrefix(%q) = %v; want nil", p, err)
		}
	}
}

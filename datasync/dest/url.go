package dest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"

	"github.com/chunkraft/chunkraft/internal/objstore"
)

// Schemes of a dest URL.
const (
	SchemeFile = "file"
	SchemeS3   = "s3"
)

// MaxURLLen bounds a dest URL.
const MaxURLLen = 2048

// want is the usage every Parse error ends with.
const want = "want file:///absolute/path or s3://bucket/prefix"

// URL is a parsed dest URL. Build one with Parse.
type URL struct {
	// Scheme is SchemeFile or SchemeS3.
	Scheme string
	// Path is a file dest's directory: absolute, clean, not "/".
	Path string
	// Bucket and Prefix are an S3 dest's bucket and key prefix (empty, or
	// a valid object name followed by '/').
	Bucket, Prefix string
}

// String returns the URL in its canonical form, file:///path or
// s3://bucket/prefix, escaped as a URL: Parse(u.String()) is u.
func (u URL) String() string {
	if u.Scheme == SchemeFile {
		return (&url.URL{Scheme: SchemeFile, Path: u.Path}).String()
	}
	return (&url.URL{Scheme: SchemeS3, Host: u.Bucket, Path: "/" + u.Prefix}).String()
}

// Parse parses and checks a dest URL, without touching anything.
func Parse(raw string) (URL, error) {
	u, err := parse(raw)
	if err != nil {
		return URL{}, fmt.Errorf("dest %q: %w", raw, err)
	}
	return u, nil
}

func parse(raw string) (URL, error) {
	switch {
	case raw == "":
		return URL{}, errors.New("empty; " + want)
	case len(raw) > MaxURLLen:
		return URL{}, fmt.Errorf("%d bytes long, more than %d", len(raw), MaxURLLen)
	}
	for _, r := range raw {
		if r < 0x20 || r == 0x7f {
			return URL{}, errors.New("contains a control character")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return URL{}, fmt.Errorf("not a URL (%v); %s", err, want)
	}
	switch {
	case u.Scheme == "":
		return URL{}, errors.New("no scheme; " + want)
	case u.Scheme != SchemeFile && u.Scheme != SchemeS3:
		return URL{}, fmt.Errorf("unsupported scheme %q; %s", u.Scheme, want)
	case u.User != nil:
		return URL{}, errors.New("user information is not allowed (S3 credentials come from the server's object_store configuration)")
	case u.RawQuery != "" || u.ForceQuery:
		return URL{}, errors.New("a query is not allowed")
	case u.Fragment != "":
		return URL{}, errors.New("a fragment is not allowed")
	}
	if u.Scheme == SchemeFile {
		return parseFile(u)
	}
	return parseS3(u)
}

func parseFile(u *url.URL) (URL, error) {
	switch {
	case u.Opaque != "":
		return URL{}, fmt.Errorf("relative path %q: a file dest needs an absolute path, file:///absolute/path", u.Opaque)
	case u.Host != "":
		return URL{}, fmt.Errorf("file dest with host %q: a file dest needs an absolute path, file:///absolute/path (three slashes)", u.Host)
	case u.Path == "":
		return URL{}, errors.New("file dest without a path; want file:///absolute/path")
	}
	if err := checkElems(u.Path); err != nil {
		return URL{}, err
	}
	p := path.Clean(u.Path)
	if p == "/" {
		return URL{}, errors.New("file dest is the root directory; name a directory for the export")
	}
	return URL{Scheme: SchemeFile, Path: p}, nil
}

func parseS3(u *url.URL) (URL, error) {
	switch {
	case u.Opaque != "":
		return URL{}, fmt.Errorf("s3 dest %q has no bucket; want s3://bucket/prefix", u.Opaque)
	case u.Host == "":
		return URL{}, errors.New("s3 dest without a bucket; want s3://bucket/prefix")
	}
	if err := checkBucket(u.Host); err != nil {
		return URL{}, err
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	if err := checkElems(prefix); err != nil {
		return URL{}, err
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		if err := objstore.ValidateName(prefix); err != nil {
			return URL{}, fmt.Errorf("s3 prefix %q: %w", prefix, err)
		}
		prefix += "/"
	}
	return URL{Scheme: SchemeS3, Bucket: u.Host, Prefix: prefix}, nil
}

// checkElems refuses "." and ".." path elements.
func checkElems(p string) error {
	for e := range strings.SplitSeq(p, "/") {
		if e == "." || e == ".." {
			return fmt.Errorf("path %q has a %q element", p, e)
		}
	}
	return nil
}

// checkBucket checks the S3 bucket naming rules: 3 to 63 lowercase
// letters, digits, '.' and '-', starting and ending with a letter or digit,
// no "..", not an IP address, none of the reserved prefixes and suffixes.
func checkBucket(b string) error {
	bad := func(why string) error { return fmt.Errorf("invalid S3 bucket name %q: %s", b, why) }
	if len(b) < 3 || len(b) > 63 {
		return bad("it must be 3 to 63 characters long")
	}
	for _, r := range b {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' || r == '-') {
			return bad(fmt.Sprintf("%q is not allowed (lowercase letters, digits, '.' and '-' only)", r))
		}
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	switch {
	case !alnum(b[0]) || !alnum(b[len(b)-1]):
		return bad("it must start and end with a letter or digit")
	case strings.Contains(b, ".."):
		return bad(`it must not contain ".."`)
	case net.ParseIP(b) != nil:
		return bad("it must not be an IP address")
	case strings.HasPrefix(b, "xn--") || strings.HasPrefix(b, "sthree-"):
		return bad("the prefixes xn-- and sthree- are reserved")
	case strings.HasSuffix(b, "-s3alias") || strings.HasSuffix(b, "--ol-s3"):
		return bad("the suffixes -s3alias and --ol-s3 are reserved")
	}
	return nil
}

package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Environment variables that set the defaults of --tls-ca, --tls-cert and
// --tls-key (chunkctl and chunkbench).
const (
	EnvTLSCA   = "CHUNKCTL_TLS_CA"
	EnvTLSCert = "CHUNKCTL_TLS_CERT"
	EnvTLSKey  = "CHUNKCTL_TLS_KEY"
)

// TLSFlags are the client's TLS settings. With none set the client talks
// plaintext; with any set it talks TLS, verifying the servers against CA
// (the system roots if empty) and presenting Cert/Key as its client
// certificate if given. Servers with tls configured require one; admin RPCs
// require one whose Subject OU is the servers' admin OU ("admin").
type TLSFlags struct {
	CA, Cert, Key string
}

// stringFlags is the part of a pflag.FlagSet AddTLSFlags needs.
type stringFlags interface {
	StringVar(p *string, name, value, usage string)
}

// AddTLSFlags adds --tls-ca, --tls-cert and --tls-key to fs, defaulting to
// the CHUNKCTL_TLS_* environment variables.
func AddTLSFlags(fs stringFlags, f *TLSFlags) {
	fs.StringVar(&f.CA, "tls-ca", os.Getenv(EnvTLSCA), "PEM CA bundle that verifies the chunkservers (turns TLS on); $"+EnvTLSCA+" sets the default")
	fs.StringVar(&f.Cert, "tls-cert", os.Getenv(EnvTLSCert), "PEM client certificate presented to the chunkservers; $"+EnvTLSCert+" sets the default")
	fs.StringVar(&f.Key, "tls-key", os.Getenv(EnvTLSKey), "PEM key of --tls-cert; $"+EnvTLSKey+" sets the default")
}

// Enabled reports whether any TLS setting is given.
func (f TLSFlags) Enabled() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// DialOptions returns the dial options for f: none (plaintext) when no
// setting is given, else TLS transport credentials.
func (f TLSFlags) DialOptions() ([]grpc.DialOption, error) {
	if !f.Enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate found", f.CA)
		}
		tc.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("--tls-cert and --tls-key must be given together")
	}
	if f.Cert != "" {
		cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tc))}, nil
}

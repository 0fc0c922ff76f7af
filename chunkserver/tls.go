package chunkserver

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultAdminOU is the certificate Subject Organizational Unit that
// carries the admin role unless tls.admin_ou says otherwise.
const DefaultAdminOU = "admin"

// TLSConfig is the tls: section of the configuration. With ca_file,
// cert_file and key_file set, every gRPC connection is mutual TLS: the
// server requires a client certificate signed by the CA, and the server
// dials its peers (raft, probes, clone sources, scan maps) presenting its
// own certificate. Unset, everything is plaintext.
//
// The server's certificate is used both ways, so it needs the extended key
// usages serverAuth and clientAuth, SANs for the addresses peers dial
// (the advertise host: an IP SAN for an IP), and the admin role: peers call
// admin-only RPCs (raft, FollowScanMap) on each other.
type TLSConfig struct {
	// CAFile is the PEM bundle of the CAs that sign clients and peers.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are this server's PEM certificate (chain) and key.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// AdminOU is the Subject OU naming the admin role; "" means
	// DefaultAdminOU. A certificate carrying it may call admin RPCs
	// (membership, snapshots, copyset creation/deletion, ConfigService.Set,
	// integrity jobs, the raft transport); any certificate from the CA may
	// call the data RPCs (auth.go has the table).
	AdminOU string `yaml:"admin_ou"`
}

// Enabled reports whether TLS is configured.
func (t TLSConfig) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

func (t TLSConfig) validate() error {
	if !t.Enabled() {
		if t.AdminOU != "" {
			return errors.New("admin_ou is set without ca_file, cert_file and key_file")
		}
		return nil
	}
	if t.CAFile == "" || t.CertFile == "" || t.KeyFile == "" {
		return errors.New("ca_file, cert_file and key_file must be set together")
	}
	return nil
}

func (t TLSConfig) adminOU() string {
	if t.AdminOU == "" {
		return DefaultAdminOU
	}
	return t.AdminOU
}

// serverTLS is the loaded key material: credentials for the gRPC server
// (client certificates required and verified) and for dialing peers.
type serverTLS struct {
	server credentials.TransportCredentials
	peer   credentials.TransportCredentials
}

// loadTLS reads the files of t; nil (plaintext) when TLS is not configured.
func loadTLS(t TLSConfig) (*serverTLS, error) {
	if !t.Enabled() {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: cert_file/key_file: %w", err)
	}
	pool, err := LoadCertPool(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("tls: ca_file: %w", err)
	}
	return &serverTLS{
		server: credentials.NewTLS(&tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
		}),
		peer: credentials.NewTLS(&tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			RootCAs:      pool,
		}),
	}, nil
}

// LoadCertPool reads a PEM bundle of CA certificates.
func LoadCertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate found", path)
	}
	return pool, nil
}

// serverOptions are the gRPC server options of t: TLS credentials and the
// authorization interceptors. None without TLS.
func (t *serverTLS) serverOptions(adminOU string) []grpc.ServerOption {
	if t == nil {
		return nil
	}
	a := authorizer{adminOU: adminOU}
	return []grpc.ServerOption{
		grpc.Creds(t.server),
		grpc.ChainUnaryInterceptor(a.unary),
		grpc.ChainStreamInterceptor(a.stream),
	}
}

// peerDial is the transport credentials option for dialing another
// chunkserver: this server's certificate with TLS on, plaintext otherwise.
func (t *serverTLS) peerDial() grpc.DialOption {
	if t == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(t.peer)
}

// maxStreams maps max_concurrent_streams to gRPC's option: 0 = unbounded.
func maxStreams(n uint32) uint32 {
	if n == 0 {
		return math.MaxUint32
	}
	return n
}

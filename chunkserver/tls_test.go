package chunkserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chunkraft/chunkraft/internal/testwait"
	pb "github.com/chunkraft/chunkraft/proto/curve/chunkserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// testPKI is a throwaway CA writing PEM files into a temp dir.
type testPKI struct {
	t      *testing.T
	dir    string
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caFile string
	serial int64
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "chunkraft test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca, caKey: key, serial: 1}
	p.caFile = filepath.Join(p.dir, "ca.crt")
	p.writePEM(p.caFile, "CERTIFICATE", der)
	return p
}

func (p *testPKI) writePEM(path, typ string, der []byte) {
	p.t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
}

// issue signs a certificate for name with Subject OU ou ("" = none); a
// server certificate gets the 127.0.0.1 SAN. It returns the cert and key
// files.
func (p *testPKI) issue(name, ou string, server bool) (string, string) {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if ou != "" {
		tmpl.Subject.OrganizationalUnit = []string{ou}
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	p.writePEM(certFile, "CERTIFICATE", der)
	p.writePEM(keyFile, "EC PRIVATE KEY", kder)
	return certFile, keyFile
}

// serverOpt configures a test server for mTLS with its own admin cert.
func (p *testPKI) serverOpt() clusterOpts {
	return func(cfg *Config) {
		cert, key := p.issue("server-"+filepath.Base(filepath.Dir(cfg.DataDir)), DefaultAdminOU, true)
		cfg.TLS = TLSConfig{CAFile: p.caFile, CertFile: cert, KeyFile: key}
	}
}

// dial connects to addr presenting a certificate with OU ou, or none with
// noCert.
func (p *testPKI) dial(addr, name, ou string, noCert bool) *grpc.ClientConn {
	p.t.Helper()
	pool, err := LoadCertPool(p.caFile)
	if err != nil {
		p.t.Fatal(err)
	}
	tc := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if !noCert {
		certFile, keyFile := p.issue(name, ou, false)
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			p.t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { cc.Close() })
	return cc
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := grpcstatus.Code(err); got != want {
		t.Fatalf("%s: code %v (%v), want %v", what, got, err, want)
	}
}

// TestTLS: a 3-server cluster with mTLS elects and replicates; clients
// without a valid certificate are refused at the handshake; a non-admin
// certificate may read and write chunks but not change membership or
// configuration; an admin certificate may.
func TestTLS(t *testing.T) {
	pki := newTestPKI(t)
	c := startTestCluster(t, 3, pki.serverOpt()) // elects over mTLS raft
	var user, admin []*grpc.ClientConn
	for i, cfg := range c.Cfgs {
		user = append(user, pki.dial(cfg.Listen, "user", "users", false))
		admin = append(admin, pki.dial(cfg.Listen, "admin", DefaultAdminOU, false))
		c.Conns[i].Close()
	}
	c.Conns = user
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := c.Leader(t)
	getLeader := func(cc *grpc.ClientConn) error {
		_, err := pb.NewCliService2Client(cc).GetLeader(ctx, &pb.GetLeaderRequest2{
			LogicPoolId: proto.Uint32(1), CopysetId: proto.Uint32(1)})
		return err
	}

	// Refused at the handshake: no certificate, a certificate of another
	// CA, plaintext.
	wantCode(t, "no client certificate", getLeader(pki.dial(c.Cfgs[l].Listen, "", "", true)), codes.Unavailable)
	other := newTestPKI(t)
	otherConn := other.dial(c.Cfgs[l].Listen, "stranger", DefaultAdminOU, false)
	wantCode(t, "certificate of another CA", getLeader(otherConn), codes.Unavailable)
	plain, err := grpc.NewClient(c.Cfgs[l].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	wantCode(t, "plaintext client", getLeader(plain), codes.Unavailable)

	// Non-admin: data RPCs work, and the write replicates to every server.
	if err := getLeader(user[l]); err != nil {
		t.Fatalf("GetLeader with a non-admin certificate: %v", err)
	}
	c.Write(t, 1, 1, 0, block(5), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if got := c.Read(t, 1, 0, 4096); !bytes.Equal(got, block(5)) {
		t.Fatal("read back differs")
	}
	c.WaitSame(t, []uint64{1})

	// A fourth server with an empty replica to add.
	n := c.AddServer(t)
	c.Conns[n].Close()
	user = append(user, pki.dial(c.Cfgs[n].Listen, "user", "users", false))
	admin = append(admin, pki.dial(c.Cfgs[n].Listen, "admin", DefaultAdminOU, false))
	c.Conns = admin
	c.mbCreateEmpty(t, n, []string{c.id(0), c.id(1), c.id(2)})
	c.Conns = user
	pool, cs := c.mbCopyset()
	addReq := &pb.AddPeerRequest2{LogicPoolId: pool, CopysetId: cs, Leader: mbPeer(c.id(l)), AddPeer: mbPeer(c.id(n))}
	_, err = pb.NewCliService2Client(user[l]).AddPeer(ctx, addReq)
	wantCode(t, "AddPeer with a non-admin certificate", err, codes.PermissionDenied)
	_, err = pb.NewCliServiceClient(user[l]).AddPeer(ctx, &pb.AddPeerRequest{LogicPoolId: pool, CopysetId: cs,
		LeaderId: proto.String(c.id(l)), PeerId: proto.String(c.id(n))})
	wantCode(t, "v1 add_peer with a non-admin certificate", err, codes.PermissionDenied)
	_, err = pb.NewConfigServiceClient(user[l]).Set(ctx, &pb.ConfigRequest{Key: proto.String("max_inflight"), Value: proto.String("100")})
	wantCode(t, "ConfigService.Set with a non-admin certificate", err, codes.PermissionDenied)
	_, err = pb.NewCopysetServiceClient(user[n]).DeleteBrokenCopyset(ctx, &pb.CopysetRequest{LogicPoolId: pool, CopysetId: cs})
	wantCode(t, "DeleteBrokenCopyset with a non-admin certificate", err, codes.PermissionDenied)
	_, err = pb.NewCliService2Client(user[l]).SnapshotAll(ctx, &pb.SnapshotAllRequest{})
	wantCode(t, "SnapshotAll with a non-admin certificate", err, codes.PermissionDenied)
	if _, err := pb.NewConfigServiceClient(user[l]).Get(ctx, &pb.ConfigRequest{Key: proto.String("max_inflight")}); err != nil {
		t.Fatalf("ConfigService.Get with a non-admin certificate: %v", err)
	}

	// Admin: the membership change goes through (the leader probes the new
	// server over mTLS first) and the new replica catches up over raft.
	testwait.Until(t, 10*time.Second, func() error {
		_, err := pb.NewCliService2Client(admin[c.Leader(t)]).AddPeer(ctx, &pb.AddPeerRequest2{LogicPoolId: pool, CopysetId: cs,
			Leader: mbPeer(c.id(c.Leader(t))), AddPeer: mbPeer(c.id(n))})
		if err != nil {
			t.Logf("AddPeer: %v", err)
			return fmt.Errorf("admin AddPeer: %w", err)
		}
		return nil
	})
	c.WaitSame(t, []uint64{1})
	resp, err := pb.NewConfigServiceClient(admin[l]).Set(ctx, &pb.ConfigRequest{Key: proto.String("max_inflight"), Value: proto.String("100")})
	if err != nil || resp.GetStatus() != pb.CONFIG_OP_STATUS_CONFIG_OP_STATUS_SUCCESS {
		t.Fatalf("ConfigService.Set with an admin certificate: %v %v", resp.GetStatus(), err)
	}
	c.Write(t, 2, 1, 0, block(6), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	c.WaitSame(t, []uint64{1, 2})
}

func TestRequiredRole(t *testing.T) {
	for m, want := range map[string]role{
		"/curve.chunkserver.ChunkService/ReadChunk":               roleAny,
		"/curve.chunkserver.ChunkService/WriteChunk":              roleAny,
		"/curve.chunkserver.CliService2/GetLeader":                roleAny,
		"/curve.chunkserver.CopysetService/GetCopysetStatus":      roleAny,
		"/grpc.health.v1.Health/Check":                            roleAny,
		"/curve.chunkserver.CliService2/AddPeer":                  roleAdmin,
		"/curve.chunkserver.CliService/reset_peer":                roleAdmin,
		"/curve.chunkserver.CopysetService/DeleteBrokenCopyset":   roleAdmin,
		"/curve.chunkserver.ConfigService/Set":                    roleAdmin,
		"/chunkraft.raft.RaftTransport/AppendEntriesPipeline":     roleAdmin,
		"/curve.chunkserver.ScanService/FollowScanMap":            roleAdmin,
		"/chunkraft.cluster.Cluster/ClusterMap":                   roleAny,
		"/chunkraft.cluster.Cluster/LocalCopysets":                roleAdmin,
		"/curve.chunkserver.CopysetService/SomethingNotListedYet": roleAdmin,
	} {
		if got := requiredRole(m); got != want {
			t.Errorf("%s: role %v, want %v", m, got, want)
		}
	}
}

func TestTLSConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg TLSConfig
		ok  bool
	}{
		{TLSConfig{}, true},
		{TLSConfig{CAFile: "ca", CertFile: "c", KeyFile: "k"}, true},
		{TLSConfig{CAFile: "ca", CertFile: "c", KeyFile: "k", AdminOU: "ops"}, true},
		{TLSConfig{CAFile: "ca"}, false},
		{TLSConfig{CertFile: "c", KeyFile: "k"}, false},
		{TLSConfig{AdminOU: "ops"}, false},
	} {
		if err := tc.cfg.validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: err %v, want ok=%v", tc.cfg, err, tc.ok)
		}
	}
}

// TestFloodGetsOverload: 3×max_inflight concurrent writes over several
// connections get OVERLOAD for some, and the server serves afterwards.
func TestFloodGetsOverload(t *testing.T) {
	const maxInflight = 4
	c := startTestCluster(t, 1, func(cfg *Config) { cfg.MaxInflight = maxInflight })
	ctx := context.Background()
	var conns []*grpc.ClientConn
	for range 3 {
		cc, err := grpc.NewClient(c.Cfgs[0].Listen, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	data := bytes.Repeat([]byte{9}, 1<<20)
	var overloaded, ok atomic.Int64
	for round := 0; round < 20 && overloaded.Load() == 0; round++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 3 * maxInflight {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				cl := pb.NewChunkServiceClient(conns[i%len(conns)])
				resp, err := cl.WriteChunk(ctx, writeReq(uint64(i+1), 0, data))
				switch {
				case err != nil:
					if grpcstatus.Code(err) != codes.ResourceExhausted {
						t.Errorf("flood write: %v", err)
					}
				case resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_OVERLOAD:
					overloaded.Add(1)
				case resp.GetStatus() == pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS:
					ok.Add(1)
				default:
					t.Errorf("flood write: status %v", resp.GetStatus())
				}
			}()
		}
		close(start)
		wg.Wait()
	}
	if overloaded.Load() == 0 {
		t.Fatalf("no OVERLOAD in 20 floods of %d writes (max_inflight %d)", 3*maxInflight, maxInflight)
	}
	t.Logf("flood: %d OVERLOAD, %d SUCCESS", overloaded.Load(), ok.Load())
	c.Write(t, 100, 1, 0, block(3), pb.CHUNK_OP_STATUS_CHUNK_OP_STATUS_SUCCESS)
	if got := c.Read(t, 100, 0, 4096); !bytes.Equal(got, block(3)) {
		t.Fatal("read after flood differs")
	}
}

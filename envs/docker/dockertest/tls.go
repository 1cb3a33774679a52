package dockertest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tlsPort is the port the engine listens on with TLS, inside its network
// namespace.
const tlsPort = "2376"

// StartTLSEngine is StartEngine with the engine also listening on TCP
// with TLS, verifying client certificates. It returns the engine, its TCP
// address (tcp://127.0.0.1:PORT, a proxy on the host into the engine's
// network namespace) and a directory with the client's ca.pem, cert.pem
// and key.pem, as DOCKER_CERT_PATH takes them.
func StartTLSEngine(t testing.TB, name string) (e *Engine, host, certDir string) {
	t.Helper()
	certDir = t.TempDir()
	serverDir := t.TempDir()
	if err := writeCerts(certDir, serverDir); err != nil {
		t.Fatal(err)
	}
	e = startEngine(t, name, []string{
		"-H", "tcp://127.0.0.1:" + tlsPort, "--tlsverify",
		"--tlscacert", filepath.Join(serverDir, "ca.pem"),
		"--tlscert", filepath.Join(serverDir, "cert.pem"),
		"--tlskey", filepath.Join(serverDir, "key.pem"),
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, e: e, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	// Cleanups run last first: the proxy stops before the engine.
	t.Cleanup(p.close)
	return e, "tcp://" + ln.Addr().String(), certDir
}

// proxy forwards TCP connections from the host to the engine's TLS port
// in its network namespace.
type proxy struct {
	ln net.Listener
	e  *Engine
	wg sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.forward(c)
		}()
	}
}

// forward copies between c and a connection to the engine until either
// side closes.
func (p *proxy) forward(c net.Conn) {
	defer c.Close()
	pid := p.e.pid()
	if pid == 0 {
		return
	}
	d, err := dialInNetns(pid, "127.0.0.1:"+tlsPort)
	if err != nil {
		return
	}
	defer d.Close()
	if !p.track(c, d) {
		return
	}
	defer p.untrack(c, d)
	done := make(chan struct{}, 2)
	go func() { io.Copy(d, c); d.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, d); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// close stops accepting, closes the open connections and waits for the
// goroutines.
func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// dialInNetns dials addr from the network namespace of process pid.
func dialInNetns(pid int, addr string) (net.Conn, error) {
	target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, err
	}
	defer target.Close()
	// The thread switches namespace for the dial; a socket stays in the
	// namespace it was made in.
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer self.Close()
	if err := setns(target); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	c, dialErr := net.DialTimeout("tcp", addr, 5*time.Second)
	if err := setns(self); err != nil {
		// The thread is left in the other namespace: keep it locked, so
		// that it ends with this goroutine.
		if c != nil {
			c.Close()
		}
		return nil, err
	}
	runtime.UnlockOSThread()
	return c, dialErr
}

func setns(f *os.File) error {
	if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns: %w", err)
	}
	return nil
}

// writeCerts makes a CA and, signed by it, a client certificate (in
// clientDir: ca.pem, cert.pem, key.pem) and a server certificate for
// 127.0.0.1 (in serverDir, the same names).
func writeCerts(clientDir, serverDir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gymserver test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	issue := func(dir string, serial int64, leaf *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		leaf.SerialNumber = big.NewInt(serial)
		leaf.NotBefore, leaf.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		leaf.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		for name, b := range map[string]*pem.Block{
			"ca.pem":   {Type: "CERTIFICATE", Bytes: caDER},
			"cert.pem": {Type: "CERTIFICATE", Bytes: der},
			"key.pem":  {Type: "EC PRIVATE KEY", Bytes: keyDER},
		} {
			if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
				return err
			}
		}
		return nil
	}
	if err := issue(serverDir, 2, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return err
	}
	return issue(clientDir, 3, &x509.Certificate{Subject: pkix.Name{CommonName: "gymserver test client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

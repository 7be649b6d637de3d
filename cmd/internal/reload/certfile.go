package reload

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"sync"
	"sync/atomic"
)

// Roles of the certificate files: the values of
// itlproxy_tls_reload_failures_total's file label.
const (
	ListenerCert   = "listener_cert"
	UpstreamCA     = "upstream_ca"
	UpstreamClient = "upstream_client_cert"
)

// CertFile is a certificate and its key, or a CA bundle (no key file),
// loaded at start and re-read when it changes on disk (cert-manager
// rotates files in place). Each handshake takes what it holds at that
// moment, so a rotation needs no restart and fails no handshake: a new
// file that cannot be used leaves the old contents in place.
type CertFile struct {
	role              string
	certFile, keyFile string

	pair atomic.Pointer[tls.Certificate] // with a key file
	pool atomic.Pointer[x509.CertPool]   // without

	mu       sync.Mutex
	loaded   [2][]byte // the certificate and key files' bytes in use
	attempts [2][]byte // the bytes last tried, to count a bad file once
	readErr  string    // why the files last could not be read, or ""
}

// NewCertFile returns the certificate files of role, not yet loaded: a
// certificate and its key, or a CA bundle when keyFile is "".
func NewCertFile(role, certFile, keyFile string) *CertFile {
	return &CertFile{role: role, certFile: certFile, keyFile: keyFile}
}

// Role is what the files are for: ListenerCert, UpstreamCA or
// UpstreamClient.
func (f *CertFile) Role() string { return f.role }

// Files returns the files to watch.
func (f *CertFile) Files() []string {
	if f.keyFile == "" {
		return []string{f.certFile}
	}
	return []string{f.certFile, f.keyFile}
}

// Load reads the files and puts them in effect if they differ from those
// in use. changed reports whether they differ from the last ones tried:
// a file already refused is not refused (and counted) again.
func (f *CertFile) Load() (changed bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var read [2][]byte
	for i, name := range f.Files() {
		if read[i], err = os.ReadFile(name); err != nil {
			changed, f.readErr, f.attempts = err.Error() != f.readErr, err.Error(), [2][]byte{}
			return changed, err
		}
	}
	f.readErr = ""
	if bytes.Equal(read[0], f.loaded[0]) && bytes.Equal(read[1], f.loaded[1]) {
		return false, nil
	}
	changed = !bytes.Equal(read[0], f.attempts[0]) || !bytes.Equal(read[1], f.attempts[1])
	f.attempts = read
	if f.keyFile == "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(read[0]) {
			return changed, errors.New("no PEM certificate in it")
		}
		f.pool.Store(pool)
	} else {
		pair, err := tls.X509KeyPair(read[0], read[1])
		if err != nil {
			return changed, err
		}
		f.pair.Store(&pair)
	}
	f.loaded = read
	return true, nil
}

// ServerCertificate is the listener's tls.Config.GetCertificate.
func (f *CertFile) ServerCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.pair.Load(), nil
}

// ClientCertificate is the upstream's tls.Config.GetClientCertificate: the
// certificate in use, or none when the upstream asks for another CA's (as
// crypto/tls does with a fixed certificate).
func (f *CertFile) ClientCertificate(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	pair := f.pair.Load()
	if cri.SupportsCertificate(pair) != nil {
		return new(tls.Certificate), nil
	}
	return pair, nil
}

// VerifyServers makes tc verify the upstream's certificate against the
// CA file's current certificates. A tls.Config's RootCAs cannot change
// under connections being dialed, so crypto/tls's own verification is
// turned off and done here instead, the same way: the chain to these
// roots, for server authentication, and the name dialed: the one sent as
// SNI, or for an address (which crypto/tls does not send) one of
// upstreamHosts, the upstream's hosts. The connection's state does not say
// which address was dialed: with a list of upstream addresses, a
// certificate any of them holds is accepted from each.
func (f *CertFile) VerifyServers(tc *tls.Config, upstreamHosts ...string) {
	tc.InsecureSkipVerify = true
	tc.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("tls: the upstream sent no certificate")
		}
		names := upstreamHosts
		if cs.ServerName != "" {
			names = []string{cs.ServerName}
		}
		if len(names) == 0 {
			return errors.New("tls: no server name to verify the upstream's certificate against")
		}
		var err error
		for _, name := range names {
			opts := x509.VerifyOptions{Roots: f.pool.Load(), DNSName: name, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err = cs.PeerCertificates[0].Verify(opts); err == nil {
				return nil
			}
		}
		return err
	}
}

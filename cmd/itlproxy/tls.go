package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// upstreamTLS returns the TLS settings for an https upstream: the system's
// roots unless a CA file is given, verification unless explicitly turned
// off, and a client certificate when one is given (mTLS). Problems name
// their variable.
func upstreamTLS(c config) (*tls.Config, []string) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.UpstreamInsecureSkipVerify}
	var problems []string
	if c.UpstreamCAFile != "" {
		pool, err := certPool(c.UpstreamCAFile)
		if err != nil {
			problems = append(problems, fmt.Sprintf("ITLPROXY_UPSTREAM_CA_FILE=%q: %v", c.UpstreamCAFile, err))
		}
		tc.RootCAs = pool
	}
	if cert, problem := keyPair("ITLPROXY_UPSTREAM_CLIENT_CERT_FILE", c.UpstreamClientCertFile,
		"ITLPROXY_UPSTREAM_CLIENT_KEY_FILE", c.UpstreamClientKeyFile); problem != "" {
		problems = append(problems, problem)
	} else if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return tc, problems
}

// listenerTLS returns the proxy listener's TLS settings, or nil when it
// serves cleartext. HTTP/2 is negotiated by ALPN.
func listenerTLS(c config) (*tls.Config, string) {
	cert, problem := keyPair("ITLPROXY_TLS_CERT_FILE", c.TLSCertFile, "ITLPROXY_TLS_KEY_FILE", c.TLSKeyFile)
	if problem != "" || cert == nil {
		return nil, problem
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*cert}}, ""
}

// keyPair loads a certificate and its key, named by two variables that go
// together: nil when neither is set.
func keyPair(certVar, certFile, keyVar, keyFile string) (*tls.Certificate, string) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, ""
	case certFile == "":
		return nil, keyVar + ": set without " + certVar
	case keyFile == "":
		return nil, certVar + ": set without " + keyVar
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Sprintf("%s=%q, %s=%q: %v", certVar, certFile, keyVar, keyFile, err)
	}
	return &cert, ""
}

func certPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no PEM certificate in it")
	}
	return pool, nil
}

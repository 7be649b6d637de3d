package main

import (
	"crypto/tls"
	"fmt"

	"github.com/itlproxy/itlproxy/cmd/internal/reload"
)

// upstreamTLS returns the TLS settings for an https upstream: the system's
// roots unless a CA file is given, verification unless explicitly turned
// off, and a client certificate when one is given (mTLS), with the files
// it re-reads when they change. Problems name their variable.
func upstreamTLS(c config) (*tls.Config, []*reload.CertFile, []string) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: c.UpstreamInsecureSkipVerify}
	if urls := c.upstreamURLs(); c.UpstreamResolve == "dns" && len(urls) > 0 {
		// Requests go to the name's addresses: the certificate is still
		// the name's, and the name is the one sent.
		tc.ServerName = urls[0].Hostname()
	}
	var problems []string
	var files []*reload.CertFile
	if c.UpstreamCAFile != "" {
		ca := reload.NewCertFile(reload.UpstreamCA, c.UpstreamCAFile, "")
		if _, err := ca.Load(); err != nil {
			problems = append(problems, fmt.Sprintf("ITLPROXY_UPSTREAM_CA_FILE=%q: %v", c.UpstreamCAFile, err))
		}
		var hosts []string
		for _, u := range c.upstreamURLs() {
			hosts = append(hosts, u.Hostname())
		}
		ca.VerifyServers(tc, hosts...)
		files = append(files, ca)
	}
	if client, problem := keyPair(reload.UpstreamClient, "ITLPROXY_UPSTREAM_CLIENT_CERT_FILE", c.UpstreamClientCertFile,
		"ITLPROXY_UPSTREAM_CLIENT_KEY_FILE", c.UpstreamClientKeyFile); problem != "" {
		problems = append(problems, problem)
	} else if client != nil {
		tc.GetClientCertificate = client.ClientCertificate
		files = append(files, client)
	}
	return tc, files, problems
}

// listenerTLS returns the proxy listener's TLS settings, or nil when it
// serves cleartext, with the key pair it re-reads when it changes. HTTP/2
// is negotiated by ALPN.
func listenerTLS(c config) (*tls.Config, *reload.CertFile, string) {
	pair, problem := keyPair(reload.ListenerCert, "ITLPROXY_TLS_CERT_FILE", c.TLSCertFile, "ITLPROXY_TLS_KEY_FILE", c.TLSKeyFile)
	if problem != "" || pair == nil {
		return nil, nil, problem
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: pair.ServerCertificate}, pair, ""
}

// keyPair loads a certificate and its key, named by two variables that go
// together: nil when neither is set.
func keyPair(role, certVar, certFile, keyVar, keyFile string) (*reload.CertFile, string) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, ""
	case certFile == "":
		return nil, keyVar + ": set without " + certVar
	case keyFile == "":
		return nil, certVar + ": set without " + keyVar
	}
	f := reload.NewCertFile(role, certFile, keyFile)
	if _, err := f.Load(); err != nil {
		return nil, fmt.Sprintf("%s=%q, %s=%q: %v", certVar, certFile, keyVar, keyFile, err)
	}
	return f, ""
}

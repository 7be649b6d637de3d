package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
)

// upstreamTLS returns the TLS settings for an https upstream: the system's
// roots unless a CA file is given, verification unless explicitly turned
// off.
func upstreamTLS(caFile string, insecure bool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, err
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("no PEM certificate in it")
		}
	}
	return c, nil
}

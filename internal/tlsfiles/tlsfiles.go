// Package tlsfiles builds a client's TLS configuration from PEM files, as
// scripts/redis.sh writes them for its TLS server: the tests and
// examples/storebench reach that server with it.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Config returns a client configuration that trusts only the CA in the
// PEM file ca and shows the certificate in cert with its key in key. It
// names the file it cannot use in its error.
func Config(ca, cert, key string) (*tls.Config, error) {
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tlsfiles: no certificate in %s", ca)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("tlsfiles: client certificate %s, key %s: %w", cert, key, err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

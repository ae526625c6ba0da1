// Package tlsfiles turns the certificate files a command's flags name
// into TLS configurations, for every hop a Tessera component dials or
// serves: etcd, the sidecars, Temporal. It owns no connection; each
// caller passes the configuration to its own client or server.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Client names the files of a client's side of TLS.
type Client struct {
	// CA verifies the server's certificate; empty: the system's roots.
	CA string
	// Cert and Key, together, are the client's certificate, for servers
	// that require one (etcd's --client-cert-auth, mutual TLS).
	Cert, Key string
	// ServerName overrides the name checked in the server's certificate
	// (default: the host dialed).
	ServerName string
}

// Enabled reports whether any file is named: TLS is on.
func (c Client) Enabled() bool { return c.CA != "" || c.Cert != "" || c.Key != "" }

// Config loads the files: nil (plaintext) when none is named, else a
// configuration that verifies the server, with the client's certificate
// when given. Every problem is reported at once, for startup validation.
func (c Client) Config() (*tls.Config, error) {
	if !c.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	var errs []error
	if c.CA != "" {
		pool, err := loadPool(c.CA)
		if err != nil {
			errs = append(errs, err)
		}
		cfg.RootCAs = pool
	}
	switch {
	case c.Cert != "" && c.Key != "":
		cert, err := tls.LoadX509KeyPair(c.Cert, c.Key)
		if err != nil {
			errs = append(errs, fmt.Errorf("client certificate %s and key %s: %w", c.Cert, c.Key, err))
		}
		cfg.Certificates = []tls.Certificate{cert}
	case c.Cert != "" || c.Key != "":
		errs = append(errs, errors.New("a client certificate needs both its certificate and its key file"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

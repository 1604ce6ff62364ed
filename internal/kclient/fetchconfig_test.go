package kclient

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writePEM writes a self-signed certificate and its key, returning their
// paths.
func writePEM(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestReaderConfigChoosesTheFetcherOnlyForWhatItHonours: a restore must
// never connect with less security than the user configured, so every
// property the fetcher cannot carry out sends the reader to librdkafka.
func TestReaderConfigChoosesTheFetcherOnlyForWhatItHonours(t *testing.T) {
	cert, key := writePEM(t)
	base := func(extra Config) Config {
		c := Config{
			// What streams gives a restore consumer.
			"bootstrap.servers": "127.0.0.1:9092,127.0.0.1:9093", "group.id": "app-restore",
			"enable.auto.commit": false, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
			"client.id": "app-restore-consumer", "log_level": 3, "fetch.queue.backoff.ms": 5,
			"queued.min.messages": 500_000, "queued.max.messages.kbytes": 64 << 10, "fetch.wait.max.ms": 10,
		}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	for _, tc := range []struct {
		name          string
		cfg           Config
		fetcher       bool
		readCommitted bool
	}{
		{"eddy's own restore config", base(nil), true, true},
		{"read_uncommitted", base(Config{"isolation.level": "read_uncommitted"}), true, false},
		{"SASL_SSL with SCRAM and a CA file", base(Config{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
			"sasl.username": "u", "sasl.password": "p", "ssl.ca.location": cert}), true, true},
		{"SASL_PLAINTEXT with PLAIN", base(Config{"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
			"sasl.username": "u", "sasl.password": "p"}), true, true},
		{"mutual TLS from PEM files", base(Config{"security.protocol": "SSL", "ssl.ca.location": cert,
			"ssl.certificate.location": cert, "ssl.key.location": key}), true, true},
		{"TLS without hostname checks", base(Config{"security.protocol": "SSL", "ssl.ca.location": cert,
			"ssl.endpoint.identification.algorithm": "none"}), true, true},

		{"SASL without a mechanism (librdkafka's default is GSSAPI)", base(Config{"security.protocol": "SASL_SSL",
			"sasl.username": "u", "sasl.password": "p"}), false, true},
		{"Kerberos", base(Config{"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}), false, true},
		{"OAuth", base(Config{"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}), false, true},
		{"a PKCS#12 key store", base(Config{"security.protocol": "SSL", "ssl.keystore.location": "/x.p12"}), false, true},
		{"an encrypted key", base(Config{"security.protocol": "SSL", "ssl.certificate.location": cert,
			"ssl.key.location": key, "ssl.key.password": "k"}), false, true},
		{"a CA directory", base(Config{"security.protocol": "SSL", "ssl.ca.location": filepath.Dir(cert)}), false, true},
		{"a missing CA file", base(Config{"security.protocol": "SSL", "ssl.ca.location": cert + ".missing"}), false, true},
		{"certificates on a plaintext connection", base(Config{"ssl.ca.location": cert}), false, true},
		{"credentials on a plaintext connection", base(Config{"sasl.username": "u"}), false, true},
		{"an unknown protocol", base(Config{"security.protocol": "quic"}), false, true},
		{"debug logging", base(Config{"debug": "all"}), false, true},
		{"a listener-style server", base(Config{"bootstrap.servers": "SASL_SSL://b:9093"}), false, true},
		{"no servers", base(Config{"bootstrap.servers": ""}), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, ok, err := parseFetchConfig(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.fetcher {
				t.Fatalf("fetcher chosen: %v, want %v", ok, tc.fetcher)
			}
			if ok && fc.readCommitted != tc.readCommitted {
				t.Errorf("read committed: %v, want %v", fc.readCommitted, tc.readCommitted)
			}
		})
	}
}

func TestReaderRefusesOffsetsItCannotStartFrom(t *testing.T) {
	r, err := NewReader(Config{"bootstrap.servers": "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, ok := r.(*fetcher); !ok {
		t.Fatalf("reader is a %T, want the fetcher", r)
	}
	if err := r.Assign(map[TP]int64{{Topic: "t", Partition: 0}: -1}); err == nil {
		t.Fatal("Assign from offset -1: no error")
	}
	if _, err := r.Position([]TP{{Topic: "t", Partition: 0}}); err == nil {
		t.Fatal("Position of a partition not assigned: no error")
	}
}

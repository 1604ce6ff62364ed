package franz

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
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/eddy-go/eddy/internal/kclient"
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

// TestClientConfigRefusesWhatItCannotHonour: a client must never connect
// with less security than the user configured, so every property eddy's
// client cannot carry out is named (the franz-go backend refuses the
// configuration; the librdkafka backend hands it to librdkafka), and a
// value no client could take is an error.
func TestClientConfigRefusesWhatItCannotHonour(t *testing.T) {
	cert, key := writePEM(t)
	base := func(extra kclient.Config) kclient.Config {
		c := kclient.Config{
			// What streams gives a restore consumer.
			"bootstrap.servers": "127.0.0.1:9092,127.0.0.1:9093", "group.id": "app-restore",
			"enable.auto.commit": false, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
			"client.id": "app-restore-consumer",
		}
		for k, v := range extra {
			c[k] = v
		}
		return c
	}
	for _, tc := range []struct {
		name          string
		cfg           kclient.Config
		unsupported   string // the property named, "" none
		err           bool
		readCommitted bool
	}{
		{"eddy's own restore config", base(nil), "", false, true},
		{"read_uncommitted", base(kclient.Config{"isolation.level": "read_uncommitted"}), "", false, false},
		{"SASL_SSL with SCRAM and a CA file", base(kclient.Config{"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
			"sasl.username": "u", "sasl.password": "p", "ssl.ca.location": cert}), "", false, true},
		{"SASL_PLAINTEXT with PLAIN", base(kclient.Config{"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
			"sasl.username": "u", "sasl.password": "p"}), "", false, true},
		{"mutual TLS from PEM files", base(kclient.Config{"security.protocol": "SSL", "ssl.ca.location": cert,
			"ssl.certificate.location": cert, "ssl.key.location": key}), "", false, true},
		{"TLS without hostname checks", base(kclient.Config{"security.protocol": "SSL", "ssl.ca.location": cert,
			"ssl.endpoint.identification.algorithm": "none"}), "", false, true},
		{"timeouts and producer tuning", base(kclient.Config{"session.timeout.ms": 6000, "heartbeat.interval.ms": "500",
			"transaction.timeout.ms": 10000, "linger.ms": 10, "acks": "all", "compression.type": "zstd",
			"partitioner": "murmur2_random", "retry.backoff.ms": 10}), "", false, true},

		{"SASL without a mechanism (librdkafka's default is GSSAPI)", base(kclient.Config{"security.protocol": "SASL_SSL",
			"sasl.username": "u", "sasl.password": "p"}), "sasl.mechanism", false, true},
		{"Kerberos", base(kclient.Config{"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}), "sasl.mechanism", false, true},
		{"OAuth", base(kclient.Config{"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}), "sasl.mechanism", false, true},
		{"a PKCS#12 key store", base(kclient.Config{"security.protocol": "SSL", "ssl.keystore.location": "/x.p12"}), "ssl.keystore.location", false, true},
		{"an encrypted key", base(kclient.Config{"security.protocol": "SSL", "ssl.certificate.location": cert,
			"ssl.key.location": key, "ssl.key.password": "k"}), "ssl.key.password", false, true},
		{"a CA directory", base(kclient.Config{"security.protocol": "SSL", "ssl.ca.location": filepath.Dir(cert)}), "ssl.ca.location", false, true},
		{"a missing CA file", base(kclient.Config{"security.protocol": "SSL", "ssl.ca.location": cert + ".missing"}), "ssl.ca.location", false, true},
		{"debug logging", base(kclient.Config{"debug": "all"}), "debug", false, true},
		{"librdkafka's queue tuning", base(kclient.Config{"queued.min.messages": 1000}), "queued.min.messages", false, true},
		{"a listener-style server", base(kclient.Config{"bootstrap.servers": "SASL_SSL://b:9093,127.0.0.1:9092"}), "bootstrap.servers", false, true},
		{"another partitioner", base(kclient.Config{"partitioner": "random"}), "partitioner", false, true},

		{"certificates on a plaintext connection", base(kclient.Config{"ssl.ca.location": cert}), "", true, true},
		{"credentials on a plaintext connection", base(kclient.Config{"sasl.username": "u"}), "", true, true},
		{"an unknown protocol", base(kclient.Config{"security.protocol": "quic"}), "", true, true},
		{"no servers", base(kclient.Config{"bootstrap.servers": ""}), "", true, true},
		{"a bad timeout", base(kclient.Config{"session.timeout.ms": "soon"}), "", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(tc.cfg)
			if (err != nil) != tc.err {
				t.Fatalf("error %v, want error %v", err, tc.err)
			}
			if err != nil {
				t.Logf("%v", err)
				return
			}
			uerr := c.UnsupportedErr()
			switch {
			case tc.unsupported == "" && uerr != nil:
				t.Fatalf("unsupported: %v", uerr)
			case tc.unsupported != "" && (uerr == nil || !strings.Contains(uerr.Error(), tc.unsupported+":")):
				t.Fatalf("unsupported: %v, want %s named", uerr, tc.unsupported)
			}
			if c.readCommitted != tc.readCommitted {
				t.Errorf("read committed: %v, want %v", c.readCommitted, tc.readCommitted)
			}
		})
	}
}

// A client refreshes metadata at most every MetadataRefreshBackoff unless
// topic.metadata.refresh.fast.interval.ms says otherwise (franz-go's own
// interval is 5 s; see the producer test of a refused batch).
func TestMetadataRefreshBackoff(t *testing.T) {
	for _, tc := range []struct {
		cfg  kclient.Config
		want time.Duration
	}{
		{kclient.Config{"bootstrap.servers": "127.0.0.1:1"}, MetadataRefreshBackoff},
		{kclient.Config{"bootstrap.servers": "127.0.0.1:1", "topic.metadata.refresh.fast.interval.ms": 250}, 250 * time.Millisecond},
	} {
		c, err := ParseConfig(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(c.conn...)
		if err != nil {
			t.Fatal(err)
		}
		got := cl.OptValue(kgo.MetadataMinAge)
		cl.Close()
		if got != tc.want {
			t.Errorf("%v: MetadataMinAge %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

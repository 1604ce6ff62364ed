package kafkatest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Environment variables read by Secure (scripts/kafka.sh env prints them
// when the broker was started with its SASL_SSL listener).
const (
	// EnvSASLBootstrap names the SASL_SSL listener(s) of the broker.
	EnvSASLBootstrap = "EDDY_KAFKA_SASL_BOOTSTRAP"
	// EnvSecureRegistry is the HTTPS, basic-auth schema registry.
	EnvSecureRegistry = "EDDY_SCHEMA_REGISTRY_TLS_URL"
	// EnvSecretsDir holds ca.pem, admin.password, registry.user and
	// registry.password.
	EnvSecretsDir = "EDDY_SECRETS_DIR"
)

// SecureCluster is the secured side of the test services: a SASL_SSL
// listener (SCRAM-SHA-512, TLS with a throwaway CA) with ACLs enforced, and a
// schema registry over HTTPS with basic auth.
type SecureCluster struct {
	// Bootstrap lists the SASL_SSL listeners.
	Bootstrap string
	// CAFile is the PEM certificate of the CA that signed the broker's and
	// the registry's certificates.
	CAFile string
	// RegistryURL is the https:// URL of the secured registry, and
	// RegistryUser and RegistryPassword its basic-auth credentials.
	RegistryURL, RegistryUser, RegistryPassword string

	adminPassword string
}

// Secure returns the secured services scripts/kafka.sh started. Without
// them it fails the test under EDDY_REQUIRE_REAL_SERVICES=1 and skips it
// otherwise.
func Secure(t testing.TB) *SecureCluster {
	t.Helper()
	boot, dir, reg := os.Getenv(EnvSASLBootstrap), os.Getenv(EnvSecretsDir), os.Getenv(EnvSecureRegistry)
	if boot == "" || dir == "" || reg == "" {
		msg := fmt.Sprintf("kafkatest: no secured broker and registry (%s, %s, %s): start them with scripts/kafka.sh start (EDDY_KAFKA_SECURE=1, the default)",
			EnvSASLBootstrap, EnvSecretsDir, EnvSecureRegistry)
		if RequireReal() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("kafkatest: reading the secured services' %s: %v", name, err)
		}
		return strings.TrimSpace(string(b))
	}
	return &SecureCluster{
		Bootstrap:        boot,
		CAFile:           filepath.Join(dir, "ca.pem"),
		RegistryURL:      strings.TrimRight(reg, "/"),
		RegistryUser:     read("registry.user"),
		RegistryPassword: read("registry.password"),
		adminPassword:    read("admin.password"),
	}
}

// AdminPassword is the password of the super user admin (for tests that
// check it never leaks).
func (c *SecureCluster) AdminPassword() string { return c.adminPassword }

// ClientConfig returns the librdkafka properties that connect as user over
// SASL_SSL with SCRAM-SHA-512, trusting the test CA.
func (c *SecureCluster) ClientConfig(user, password string) map[string]string {
	return map[string]string{
		"security.protocol": "SASL_SSL",
		"sasl.mechanism":    "SCRAM-SHA-512",
		"sasl.username":     user,
		"sasl.password":     password,
		"ssl.ca.location":   c.CAFile,
	}
}

// TLSConfig trusts the test CA (for the registry and for HTTPS servers using
// the test certificate).
func (c *SecureCluster) TLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		t.Fatalf("kafkatest: reading the test CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("kafkatest: %s holds no PEM certificate", c.CAFile)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// ServerCertificate returns the test certificate and key (for 127.0.0.1 and
// localhost, signed by the test CA), for a test's own HTTPS server.
func (c *SecureCluster) ServerCertificate(t testing.TB) tls.Certificate {
	t.Helper()
	dir := filepath.Dir(c.CAFile)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"))
	if err != nil {
		t.Fatalf("kafkatest: loading the test server certificate: %v", err)
	}
	return cert
}

// HTTPClient is an http.Client that trusts the test CA.
func (c *SecureCluster) HTTPClient(t testing.TB) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: c.TLSConfig(t)}}
}

// admin is a kadm client connected as the super user admin over SASL_SSL.
func (c *SecureCluster) admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(c.Bootstrap, ",")...),
		kgo.DialTLSConfig(c.TLSConfig(t)),
		kgo.SASL(scram.Auth{User: "admin", Pass: c.adminPassword}.AsSha512Mechanism()))
	if err != nil {
		t.Fatalf("kafkatest: admin client for %s: %v", c.Bootstrap, err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// CreateUser creates (or resets) the SCRAM-SHA-512 user name with password.
// A new user holds no ACL.
func (c *SecureCluster) CreateUser(t testing.TB, name, password string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	res, err := c.admin(t).AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{
		User: name, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: password,
	}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("kafkatest: creating SCRAM user %s: %v", name, err)
	}
}

// ACL is one allowed operation on a resource.
type ACL struct {
	// Resource is "topic", "group", "transactional-id" or "cluster".
	Resource string
	// Name is the resource's name, or its prefix when Prefixed. The cluster
	// resource's name is "kafka-cluster".
	Name     string
	Prefixed bool
	// Operation is Kafka's name of it: READ, WRITE, CREATE, DELETE,
	// DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER…
	Operation string
}

func (a ACL) String() string {
	kind := "literal"
	if a.Prefixed {
		kind = "prefixed"
	}
	return fmt.Sprintf("%s on %s %s %q", a.Operation, kind, a.Resource, a.Name)
}

func (a ACL) builder(principal string) (*kadm.ACLBuilder, error) {
	op, err := kmsg.ParseACLOperation(strings.ReplaceAll(a.Operation, "_", ""))
	if err != nil || op == kadm.OpUnknown {
		return nil, fmt.Errorf("kafkatest: unknown ACL operation %q", a.Operation)
	}
	b := kadm.NewACLs().Allow(principal).AllowHosts("*").Operations(op)
	switch a.Resource {
	case "topic":
		b = b.Topics(a.Name)
	case "group":
		b = b.Groups(a.Name)
	case "transactional-id":
		b = b.TransactionalIDs(a.Name)
	case "cluster":
		b = b.Clusters()
	default:
		return nil, fmt.Errorf("kafkatest: unknown ACL resource type %q", a.Resource)
	}
	if a.Prefixed {
		b = b.ResourcePatternType(kadm.ACLPatternPrefixed)
	} else {
		b = b.ResourcePatternType(kadm.ACLPatternLiteral)
	}
	return b, nil
}

// Grant gives the principal ("User:name") every ACL in acls.
func (c *SecureCluster) Grant(t testing.TB, principal string, acls ...ACL) {
	t.Helper()
	adm := c.admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for _, a := range acls {
		b, err := a.builder(principal)
		if err != nil {
			t.Fatal(err)
		}
		res, err := adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
				}
			}
		}
		if err != nil {
			t.Fatalf("kafkatest: granting %s to %s: %v", a, principal, err)
		}
	}
}

// Package franz is the Kafka client seam on franz-go: the client
// configuration every backend parses, the group member that carries eddy's
// task assignor over the classic group protocol and fetches nothing, the
// producer and its transactions, admin, and rebalance notices.
package franz

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/eddy-go/eddy/internal/kclient"
)

// Every standard Kafka client property eddy's own client (franz-go) carries
// out is read here, in one table: ParseConfig. A property it cannot
// carry out is recorded as unsupported with the reason; the franz-go
// backend refuses it (CheckConfig), the librdkafka backend hands such a
// configuration to librdkafka.

// ClientConfig is a Config parsed for franz-go.
type ClientConfig struct {
	// conn: servers, client id, TLS, SASL, timeouts — every client's.
	conn          []kgo.Opt
	servers       []string
	group         string // group.id
	instanceID    string // group.instance.id
	readCommitted bool
	reset         kclient.Reset            // auto.offset.reset (the default: the end)
	resets        map[string]kclient.Reset // TopicResets: per topic, over reset
	// subtopologies: the source topics of each sub-topology (kclient.Subtopologies).
	subtopologies [][]string
	// member: the group member's options (timeouts).
	member []kgo.Opt
	// producer: the producer's options; txnID its transactional.id.
	producer []kgo.Opt
	txnID    string
	// batchMaxBytes: the largest record batch the producer makes (0:
	// franz-go's default, Kafka's 1,000,012).
	batchMaxBytes int32
	// Fetch sizes and wait (0: the fetcher's own).
	fetchMaxBytes, fetchPartitionBytes int32
	fetchWait                          time.Duration
	// unsupported: property → why no franz-go client carries it out.
	unsupported map[string]string
}

// Conn is every client's connection options: servers, client id, TLS,
// SASL, timeouts.
func (c ClientConfig) Conn() []kgo.Opt { return c.conn }

// ReadCommitted reports whether readers skip aborted transactions'
// records (isolation.level read_committed).
func (c ClientConfig) ReadCommitted() bool { return c.readCommitted }

// Reset is where a group member starts a partition without a committed
// offset (auto.offset.reset); Resets the policies per topic over it.
func (c ClientConfig) Reset() kclient.Reset { return c.reset }

// Resets are the offset reset policies per topic (kclient.TopicResets).
func (c ClientConfig) Resets() map[string]kclient.Reset { return c.resets }

// FetchSizes are the fetch sizes and wait the configuration sets (0: the
// fetcher's own).
func (c ClientConfig) FetchSizes() (maxBytes, partBytes int32, wait time.Duration) {
	return c.fetchMaxBytes, c.fetchPartitionBytes, c.fetchWait
}

// Unsupported reports whether a property is set that no franz-go client
// carries out (UnsupportedErr says which).
func (c ClientConfig) Unsupported() bool { return len(c.unsupported) > 0 }

// MetadataRefreshBackoff is the shortest time between two metadata
// requests of one client (franz-go's MetadataMinAge; librdkafka's
// topic.metadata.refresh.fast.interval.ms, whose default it is, and the
// Java client's retry.backoff.ms). franz-go retries a produce batch that
// a broker answered with a retriable error only after a metadata refresh,
// and its own default spaces refreshes 5 s apart: under exactly-once on
// Kafka 4 (KIP-890), a transaction's first batch to a partition whose
// previous commit marker is still being written is answered
// CONCURRENT_TRANSACTIONS, and when that came within 5 s of the client's
// last refresh (a new topic learned, a task moved), the batch — and the
// commit flushing it, and the whole stream thread — waited up to 5 s.
const MetadataRefreshBackoff = 100 * time.Millisecond

// clientIgnored are properties that only choose what eddy's client does
// anyway (eddy commits offsets itself, and runs its own assignor).
var clientIgnored = map[string]bool{
	"enable.auto.commit": true, "enable.auto.offset.store": true, "enable.partition.eof": true,
	"partition.assignment.strategy": true,
}

// ParseConfig translates cfg. An error is a property whose value is
// wrong whichever client reads it.
func ParseConfig(cfg kclient.Config) (c ClientConfig, err error) {
	c.unsupported = map[string]string{}
	c.reset = kclient.Reset{Policy: kclient.ResetLatest}
	str := func(k string) string {
		v, ok := cfg[k]
		if !ok || v == nil {
			return ""
		}
		return strings.TrimSpace(fmt.Sprint(v))
	}
	ms := func(k string) (time.Duration, error) {
		n, err := strconv.ParseInt(str(k), 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("kclient: %s = %q: want milliseconds, a whole number ≥ 0", k, str(k))
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	integer := func(k string) (int32, error) {
		n, err := strconv.ParseInt(str(k), 10, 32)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("kclient: %s = %q: want a whole number > 0", k, str(k))
		}
		return int32(n), nil
	}
	boolean := func(k string) (bool, error) {
		switch strings.ToLower(str(k)) {
		case "true", "1":
			return true, nil
		case "false", "0":
			return false, nil
		}
		return false, fmt.Errorf("kclient: %s = %q: want true or false", k, str(k))
	}
	unsupported := func(k, why string) { c.unsupported[k] = why }
	// Before the properties: topic.metadata.refresh.fast.interval.ms
	// replaces it.
	c.conn = append(c.conn, kgo.MetadataMinAge(MetadataRefreshBackoff))
	protocol, mechanism := "plaintext", ""
	var user, password string
	verify, hostnames := true, true
	var caPEM, certPEM, keyPEM []byte
	for k := range cfg {
		var d time.Duration
		var n int32
		var b bool
		switch k {
		case "bootstrap.servers":
			for _, s := range strings.Split(str(k), ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				if strings.Contains(s, "://") {
					unsupported(k, fmt.Sprintf("a listener-style server %q (give host:port)", s))
					continue
				}
				c.servers = append(c.servers, s)
			}
		case "client.id":
			c.conn = append(c.conn, kgo.ClientID(str(k)))
		case "group.id":
			c.group = str(k)
		case "group.instance.id":
			c.instanceID = str(k)
		case "transactional.id":
			c.txnID = str(k)
		case "auto.offset.reset":
			if c.reset, err = kclient.ParseReset(str(k)); err != nil {
				return c, fmt.Errorf("kclient: auto.offset.reset: %w", err)
			}
		case kclient.TopicResets:
			r, ok := cfg[k].(map[string]kclient.Reset)
			if !ok {
				return c, fmt.Errorf("kclient: %s is a map[string]kclient.Reset, not %T", k, cfg[k])
			}
			c.resets = r
		case kclient.Subtopologies:
			st, ok := cfg[k].([][]string)
			if !ok {
				return c, fmt.Errorf("kclient: %s is a [][]string, not %T", k, cfg[k])
			}
			c.subtopologies = st
		case "isolation.level":
			switch str(k) {
			case "read_committed":
				c.readCommitted = true
			case "read_uncommitted":
			default:
				return c, fmt.Errorf("kclient: isolation.level = %q: want read_committed or read_uncommitted", str(k))
			}
		case "security.protocol":
			protocol = strings.ToLower(str(k))
		case "sasl.mechanism", "sasl.mechanisms":
			mechanism = strings.ToUpper(str(k))
		case "sasl.username":
			user = str(k)
		case "sasl.password":
			password = fmt.Sprint(cfg[k])
		case "ssl.ca.location", "ssl.certificate.location", "ssl.key.location":
			path := str(k)
			if st, err := os.Stat(path); err != nil || st.IsDir() {
				unsupported(k, fmt.Sprintf("%q is not a PEM file", path))
				continue
			}
			pemBytes, err := os.ReadFile(path)
			if err != nil {
				unsupported(k, err.Error())
				continue
			}
			switch k {
			case "ssl.ca.location":
				caPEM = append(caPEM, pemBytes...)
			case "ssl.certificate.location":
				certPEM = pemBytes
			default:
				keyPEM = pemBytes
			}
		case "ssl.ca.pem":
			caPEM = append(caPEM, []byte(str(k))...)
		case "ssl.certificate.pem":
			certPEM = []byte(str(k))
		case "ssl.key.pem":
			keyPEM = []byte(str(k))
		case "ssl.endpoint.identification.algorithm":
			switch strings.ToLower(str(k)) {
			case "https":
			case "none", "":
				hostnames = false
			default:
				return c, fmt.Errorf("kclient: %s = %q: want https or none", k, str(k))
			}
		case "enable.ssl.certificate.verification":
			if verify, err = boolean(k); err != nil {
				return c, err
			}
		case "session.timeout.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.member = append(c.member, kgo.SessionTimeout(d))
		case "heartbeat.interval.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.member = append(c.member, kgo.HeartbeatInterval(d))
		case "max.poll.interval.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.member = append(c.member, kgo.RebalanceTimeout(d))
		case "transaction.timeout.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.producer = append(c.producer, kgo.TransactionTimeout(d))
		case "linger.ms", "queue.buffering.max.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.producer = append(c.producer, kgo.ProducerLinger(d))
		case "acks", "request.required.acks":
			switch strings.ToLower(str(k)) {
			case "all", "-1":
				c.producer = append(c.producer, kgo.RequiredAcks(kgo.AllISRAcks()))
			case "1":
				c.producer = append(c.producer, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
			case "0":
				c.producer = append(c.producer, kgo.RequiredAcks(kgo.NoAck()), kgo.DisableIdempotentWrite())
			default:
				return c, fmt.Errorf("kclient: %s = %q: want all, 1 or 0", k, str(k))
			}
		case "enable.idempotence":
			if b, err = boolean(k); err != nil {
				return c, err
			}
			if !b {
				c.producer = append(c.producer, kgo.DisableIdempotentWrite())
			}
		case "compression.type", "compression.codec":
			codec, ok := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(),
				"snappy": kgo.SnappyCompression(), "lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression()}[strings.ToLower(str(k))]
			if !ok {
				return c, fmt.Errorf("kclient: %s = %q: want none, gzip, snappy, lz4 or zstd", k, str(k))
			}
			c.producer = append(c.producer, kgo.ProducerBatchCompression(codec))
		case "batch.size", "message.max.bytes":
			if n, err = integer(k); err != nil {
				return c, err
			}
			c.producer = append(c.producer, kgo.ProducerBatchMaxBytes(n))
			c.batchMaxBytes = n
		case "partitioner":
			if p := str(k); p != "murmur2_random" && p != "murmur2" {
				unsupported(k, fmt.Sprintf("%q (eddy partitions by murmur2 of the key, as Kafka's Java client)", p))
			}
		case "retry.backoff.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			backoff := d
			c.conn = append(c.conn, kgo.RetryBackoffFn(func(tries int) time.Duration {
				return min(backoff<<min(tries-1, 10), time.Second)
			}))
		case "request.timeout.ms", "socket.timeout.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.conn = append(c.conn, kgo.RequestTimeoutOverhead(d))
		case "socket.connection.setup.timeout.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.conn = append(c.conn, kgo.DialTimeout(d))
		case "topic.metadata.refresh.fast.interval.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.conn = append(c.conn, kgo.MetadataMinAge(max(d, time.Millisecond)))
		case "metadata.max.age.ms", "topic.metadata.refresh.interval.ms":
			if d, err = ms(k); err != nil {
				return c, err
			}
			c.conn = append(c.conn, kgo.MetadataMaxAge(d))
		case "fetch.max.bytes":
			if c.fetchMaxBytes, err = integer(k); err != nil {
				return c, err
			}
		case "max.partition.fetch.bytes":
			if c.fetchPartitionBytes, err = integer(k); err != nil {
				return c, err
			}
		case "fetch.wait.max.ms":
			if c.fetchWait, err = ms(k); err != nil {
				return c, err
			}
		default:
			if !clientIgnored[k] {
				unsupported(k, "not one of the properties eddy's client carries out (see the README's Pointing at a real cluster)")
			}
		}
	}
	if len(c.servers) == 0 {
		return c, errors.New("kclient: bootstrap.servers names no broker")
	}
	c.conn = append(c.conn, kgo.SeedBrokers(c.servers...), kgo.MaxVersions(requestVersions()))
	switch protocol {
	case "plaintext", "sasl_plaintext":
		if caPEM != nil || certPEM != nil || keyPEM != nil {
			return c, fmt.Errorf("kclient: certificates given with security.protocol %s: use SSL or SASL_SSL", protocol)
		}
	case "ssl", "sasl_ssl":
		t := &tls.Config{MinVersion: tls.VersionTLS12}
		if caPEM != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caPEM) {
				return c, errors.New("kclient: ssl.ca.location / ssl.ca.pem holds no PEM certificate")
			}
			t.RootCAs = pool
		}
		if (certPEM == nil) != (keyPEM == nil) {
			return c, errors.New("kclient: a client certificate needs both ssl.certificate.* and ssl.key.*")
		}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				if _, set := cfg["ssl.key.password"]; !set {
					return c, fmt.Errorf("kclient: the client certificate and key: %w", err)
				}
			} else {
				t.Certificates = []tls.Certificate{pair}
			}
		}
		switch {
		case !verify:
			t.InsecureSkipVerify = true
		case !hostnames:
			// The chain is checked, the broker's name is not.
			roots := t.RootCAs
			t.InsecureSkipVerify = true
			t.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the broker sent no certificate")
				}
				inter := x509.NewCertPool()
				for _, c := range cs.PeerCertificates[1:] {
					inter.AddCert(c)
				}
				_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
				return err
			}
		}
		c.conn = append(c.conn, kgo.DialTLSConfig(t))
	default:
		return c, fmt.Errorf("kclient: security.protocol = %q: want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", protocol)
	}
	if strings.HasPrefix(protocol, "sasl_") {
		var m sasl.Mechanism
		switch mechanism {
		case "PLAIN":
			m = plain.Auth{User: user, Pass: password}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
		case "":
			unsupported("sasl.mechanism", "not set (librdkafka's default is GSSAPI, Kerberos): set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		default:
			unsupported("sasl.mechanism", fmt.Sprintf("%s (eddy's client speaks PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512)", mechanism))
		}
		if m != nil {
			c.conn = append(c.conn, kgo.SASL(m))
		}
	} else if mechanism != "" || user != "" {
		return c, fmt.Errorf("kclient: SASL settings given with security.protocol %s: use SASL_PLAINTEXT or SASL_SSL", protocol)
	}
	if _, set := cfg["ssl.key.password"]; set {
		unsupported("ssl.key.password", "an encrypted private key (give an unencrypted PEM key)")
	}
	return c, nil
}

// requestVersions are the newest request versions eddy's clients send:
// the versions that name topics by name in the requests eddy builds
// itself (fetches, offset commits and fetches, transactional offset
// commits); newer ones name them by topic id.
func requestVersions() *kversion.Versions {
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Fetch.Int16(), FetchVersion)
	v.SetMaxKeyVersion(kmsg.OffsetCommit.Int16(), 9)
	v.SetMaxKeyVersion(kmsg.OffsetFetch.Int16(), 9)
	v.SetMaxKeyVersion(kmsg.TxnOffsetCommit.Int16(), 5)
	return v
}

// UnsupportedErr is the error of a configuration with properties no
// franz-go client carries out, naming each.
func (c ClientConfig) UnsupportedErr() error {
	if len(c.unsupported) == 0 {
		return nil
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c.unsupported)) {
		parts = append(parts, fmt.Sprintf("%s: %s", k, c.unsupported[k]))
	}
	return fmt.Errorf("kclient: client properties eddy's Kafka client cannot carry out: %s", strings.Join(parts, "; "))
}

// isTLSVerifyErr reports whether err is a failed TLS handshake: the
// broker's certificate not trusted or not for its name, or no TLS at all
// on the other end.
func isTLSVerifyErr(err error) bool {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var ve *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var ae tls.AlertError
	return errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci) || errors.As(err, &ve) ||
		errors.As(err, &rh) || errors.As(err, &ae)
}

// FetchVersion is the newest Fetch request version the fetcher sends:
// version 13 names topics by id, 12 still by name.
const FetchVersion = 12

package kclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// fetchConfig is a Reader configuration the fetcher can carry out.
type fetchConfig struct {
	opts          []kgo.Opt
	readCommitted bool
	reset         resetPolicy // auto.offset.reset (librdkafka's default: the end)
}

// fetchIgnored are librdkafka properties that only tune librdkafka's own
// consumer, its group or its logging: the fetcher has no use for them.
var fetchIgnored = map[string]bool{
	"group.id": true, "enable.auto.commit": true, "enable.auto.offset.store": true,
	"log_level": true, "fetch.queue.backoff.ms": true, "queued.min.messages": true,
	"queued.max.messages.kbytes": true, "fetch.wait.max.ms": true, "fetch.min.bytes": true,
	"fetch.max.bytes": true, "max.partition.fetch.bytes": true, "fetch.message.max.bytes": true,
	"session.timeout.ms": true, "heartbeat.interval.ms": true, "max.poll.interval.ms": true,
	"partition.assignment.strategy": true, "group.instance.id": true, "enable.partition.eof": true,
	"statistics.interval.ms": true, "socket.keepalive.enable": true, "allow.auto.create.topics": true,
	"go.events.channel.enable": true, "go.application.rebalance.enable": true,
}

// parseFetchConfig translates cfg for the fetcher; ok is false when cfg
// holds a property the fetcher cannot honour (the caller then uses
// librdkafka). An error is a property whose value is wrong either way.
func parseFetchConfig(cfg Config) (fc fetchConfig, ok bool, err error) {
	str := func(k string) string {
		v, ok := cfg[k]
		if !ok || v == nil {
			return ""
		}
		return strings.TrimSpace(fmt.Sprint(v))
	}
	var servers []string
	protocol, mechanism := "plaintext", ""
	var user, password string
	var tlsc *tls.Config
	newTLS := func() *tls.Config {
		if tlsc == nil {
			tlsc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		return tlsc
	}
	verify, hostnames := true, true
	var caPEM, certPEM, keyPEM []byte
	fc.reset = resetLatest
	for k := range cfg {
		switch k {
		case "bootstrap.servers":
			for _, s := range strings.Split(str(k), ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				if strings.Contains(s, "://") {
					return fc, false, nil // a listener name: librdkafka's to parse
				}
				servers = append(servers, s)
			}
		case "client.id":
			fc.opts = append(fc.opts, kgo.ClientID(str(k)))
		case "auto.offset.reset":
			switch strings.ToLower(str(k)) {
			case "earliest", "smallest", "beginning":
				fc.reset = resetEarliest
			case "latest", "largest", "end":
				fc.reset = resetLatest
			default: // "error": librdkafka's to report
				return fc, false, nil
			}
		case "isolation.level":
			switch str(k) {
			case "read_committed":
				fc.readCommitted = true
			case "read_uncommitted":
			default:
				return fc, false, nil
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
				return fc, false, nil // a directory, "probe", or missing: librdkafka says what is wrong
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return fc, false, nil
			}
			switch k {
			case "ssl.ca.location":
				caPEM = append(caPEM, b...)
			case "ssl.certificate.location":
				certPEM = b
			default:
				keyPEM = b
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
				return fc, false, nil
			}
		case "enable.ssl.certificate.verification":
			switch strings.ToLower(str(k)) {
			case "true":
			case "false":
				verify = false
			default:
				return fc, false, nil
			}
		default:
			if !fetchIgnored[k] {
				return fc, false, nil
			}
		}
	}
	if len(servers) == 0 {
		return fc, false, nil
	}
	fc.opts = append(fc.opts, kgo.SeedBrokers(servers...))
	switch protocol {
	case "plaintext", "sasl_plaintext":
		if caPEM != nil || certPEM != nil || keyPEM != nil {
			return fc, false, nil
		}
	case "ssl", "sasl_ssl":
		t := newTLS()
		if caPEM != nil {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(caPEM) {
				return fc, false, nil
			}
			t.RootCAs = pool
		}
		if (certPEM == nil) != (keyPEM == nil) {
			return fc, false, nil
		}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				return fc, false, nil // an encrypted key, say: librdkafka reads it
			}
			t.Certificates = []tls.Certificate{pair}
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
		fc.opts = append(fc.opts, kgo.DialTLSConfig(t))
	default:
		return fc, false, nil
	}
	if strings.HasPrefix(protocol, "sasl_") {
		var m sasl.Mechanism
		switch mechanism {
		case "PLAIN": // librdkafka's default is GSSAPI (Kerberos): left to it
			m = plain.Auth{User: user, Pass: password}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
		case "SCRAM-SHA-512":
			m = scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
		default:
			return fc, false, nil
		}
		fc.opts = append(fc.opts, kgo.SASL(m))
	} else if mechanism != "" || user != "" {
		return fc, false, nil
	}
	return fc, true, nil
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

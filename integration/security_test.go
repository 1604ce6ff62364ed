package integration_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/eddy-go/eddy/integration/kafkatest"
	"github.com/eddy-go/eddy/internal/kclient"
	"github.com/eddy-go/eddy/internal/kclient/backend"
	"github.com/eddy-go/eddy/internal/rt"
	"github.com/eddy-go/eddy/serde"
	"github.com/eddy-go/eddy/serde/avro"
	"github.com/eddy-go/eddy/streams"
	"github.com/eddy-go/eddy/topology"
)

// The security tests run eddy over the broker's SASL_SSL listener
// (SCRAM-SHA-512, TLS with the test CA, ACLs enforced) and the registry's
// HTTPS, basic-auth twin, both started by scripts/kafka.sh.

const lineSchema = `{"type":"record","name":"Line","namespace":"eddy.it.secure","fields":[{"name":"text","type":"string"}]}`

type line struct {
	Text string `avro:"text"`
}

// secureApp is one application's topics and principal on the secured
// cluster.
type secureApp struct {
	t       *testing.T
	sec     *kafkatest.SecureCluster
	plain   string // the plaintext listener, for the test's own reads and writes
	app     string
	in      string // Avro lines
	dict    string // a global table's topic
	out     string // word counts
	dlq     string
	late    string
	want    map[string]int64
	secrets []string // every password in play: none may appear in logs
	logs    *syncBuffer
	running chan error // the running app's Run result
}

func newSecureApp(t *testing.T) *secureApp {
	t.Helper()
	sec := kafkatest.Secure(t)
	s := &secureApp{t: t, sec: sec, plain: realBroker(t), app: kafkatest.UniqueName(t, "sec-app"),
		in: kafkatest.UniqueName(t, "sec-lines"), dict: kafkatest.UniqueName(t, "sec-dict"),
		out: kafkatest.UniqueName(t, "sec-counts"), dlq: kafkatest.UniqueName(t, "sec-dlq"),
		late: kafkatest.UniqueName(t, "sec-late"), want: map[string]int64{}, logs: &syncBuffer{}}
	s.secrets = []string{sec.RegistryPassword, sec.AdminPassword()}
	for _, topic := range []string{s.in, s.dict, s.out, s.dlq, s.late} {
		kafkatest.CreateTopic(t, s.plain, topic, 1, nil)
	}
	kafkatest.Produce(t, s.plain, s.dict, kafkatest.KV("the", "article"), kafkatest.KV("fox", "animal"))
	return s
}

// registry is the secured registry as user with password.
func (s *secureApp) registry(user, password string) *avro.Registry {
	reg, err := avro.NewRegistry(avro.RegistryConfig{URL: s.sec.RegistryURL, Username: user, Password: password,
		TLS: s.sec.TLSConfig(s.t)})
	if err != nil {
		s.t.Fatal(err)
	}
	return reg
}

// feed writes the input: Avro lines, one record that is not Avro (for the
// dead-letter topic) and one line two hours older than the others (late
// for the one-minute windows: for the late-records topic). The bad and the
// late record come early, so that an app missing the ACLs for them fails
// at once.
func (s *secureApp) feed(n int) {
	s.t.Helper()
	ser, err := avro.New[line](s.registry(s.sec.RegistryUser, s.sec.RegistryPassword), lineSchema)
	if err != nil {
		s.t.Fatal(err)
	}
	now := time.Now()
	words := []string{"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"}
	rec := func(i int, at time.Time) kafkatest.Record {
		text := words[i%len(words)] + " " + words[(i*3+1)%len(words)] + " " + words[(i*5+2)%len(words)]
		for _, w := range strings.Fields(text) {
			s.want[w]++
		}
		b, err := ser.Serialize(s.in, line{Text: text})
		if err != nil {
			s.t.Fatal(err)
		}
		r := kafkatest.KV(fmt.Sprintf("l%d", i), "")
		r.Value, r.Timestamp = b, at
		return r
	}
	recs := []kafkatest.Record{rec(0, now), {Key: []byte("bad"), Value: []byte("not avro"), Timestamp: now}, rec(1, now.Add(-2*time.Hour))}
	for i := 2; i < n; i++ {
		recs = append(recs, rec(i, now.Add(time.Duration(i)*time.Millisecond)))
	}
	kafkatest.Produce(s.t, s.plain, s.in, recs...)
}

// topology is the word count the security tests run: Avro lines from the
// registry, words repartitioned by word and counted (a changelog), counts
// per minute keeping late records, a global table, bad records
// dead-lettered.
func (s *secureApp) topology(reg *avro.Registry) *topology.Topology {
	s.t.Helper()
	lines, err := avro.New[line](reg, lineSchema)
	if err != nil {
		s.t.Fatal(err)
	}
	str := serde.String()
	b := topology.NewBuilder()
	in := topology.Stream(b, s.in, topology.Consumed(str, lines))
	words := topology.FlatMapValues(in, func(l line) []string { return strings.Fields(l.Text) })
	byWord := topology.GroupBy(words, func(_, w string) string { return w }, topology.Grouped(str, str))
	topology.Count(byWord, topology.Materialized[string, int64]("counts")).ToStream().
		To(s.out, topology.Produced(str, serde.Int64()))
	topology.WindowedCount(byWord.WindowedBy(topology.TumblingWindows(time.Minute, 0)).LateRecords(s.late),
		topology.Materialized[string, int64]("per-minute"))
	topology.GlobalTable(b, s.dict, topology.Consumed(str, str), topology.Materialized[string, string]("dict"))
	top, err := b.Build()
	if err != nil {
		s.t.Fatal(err)
	}
	return top
}

// config is the app's configuration as user over SASL_SSL.
func (s *secureApp) config(user, password, server string) streams.Config {
	enc := zap.NewDevelopmentEncoderConfig()
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(s.logs), zapcore.DebugLevel)
	return streams.Config{
		ApplicationID: s.app, BootstrapServers: s.sec.Bootstrap, Guarantee: streams.ExactlyOnce,
		StateDir: s.t.TempDir(), ClientConfig: s.sec.ClientConfig(user, password),
		DeserializationErrors: streams.Always(streams.DeadLetter), DeadLetterTopic: s.dlq,
		ApplicationServer: server, Logger: zap.New(core).With(zap.String("app", s.app)),
	}
}

// acls returns the README's ACL table for this app: each row's concrete
// names, with every row's operations. A row the test does not know fails
// it, so the table cannot grow past what is proven.
func (s *secureApp) acls() []kafkatest.ACL {
	s.t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(), "README.md"))
	if err != nil {
		s.t.Fatal(err)
	}
	defer f.Close()
	names := map[string][]string{
		"`<application.id>-`":      {s.app + "-"},
		"each source topic":        {s.in, s.dict},
		"each sink topic":          {s.out},
		"the `DeadLetterTopic`":    {s.dlq},
		"each `LateRecords` topic": {s.late},
		"`<application.id>`":       {s.app},
	}
	resources := map[string]string{"Topic": "topic", "Group": "group", "TransactionalId": "transactional-id"}
	var out []kafkatest.ACL
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "<!-- acl-table"):
			in = true
			continue
		case strings.HasPrefix(l, "<!-- end acl-table"):
			in = false
		}
		if !in || !strings.HasPrefix(l, "|") || strings.HasPrefix(l, "| Resource") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		res, ok := resources[cells[0]]
		concrete, known := names[cells[2]]
		if !ok || !known || (cells[1] != "prefixed" && cells[1] != "literal") {
			s.t.Fatalf("README ACL row %q: resource, pattern or name unknown to the test", l)
		}
		for _, name := range concrete {
			for _, op := range strings.Split(cells[3], ",") {
				out = append(out, kafkatest.ACL{Resource: res, Name: name, Prefixed: cells[1] == "prefixed", Operation: strings.TrimSpace(op)})
			}
		}
	}
	if len(out) == 0 {
		s.t.Fatal("README.md has no ACL table between <!-- acl-table --> markers")
	}
	return out
}

// user creates a SCRAM user holding acls and returns its name and
// password.
func (s *secureApp) user(acls []kafkatest.ACL) (string, string) {
	s.t.Helper()
	name := kafkatest.UniqueName(s.t, "u")
	password := randomSecret()
	s.sec.CreateUser(s.t, name, password)
	s.sec.Grant(s.t, "User:"+name, acls...)
	s.secrets = append(s.secrets, password)
	return name, password
}

// checkNoSecrets fails the test if a password shows up in what the apps
// logged or in text the test collected (errors, /state, /healthz).
func (s *secureApp) checkNoSecrets(texts ...string) {
	s.t.Helper()
	all := s.logs.String() + strings.Join(texts, "\n")
	if len(s.logs.String()) == 0 {
		s.t.Fatal("no logs captured: the check would prove nothing")
	}
	for _, p := range s.secrets {
		if p != "" && strings.Contains(all, p) {
			s.t.Errorf("a password appears in the logs, errors or endpoints")
		}
	}
}

func randomSecret() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "pw-" + hex.EncodeToString(b)
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// runUntilFailure runs app and returns Run's error, failing the test if
// Run does not fail within limit.
func runUntilFailure(t *testing.T, app *streams.App, limit time.Duration) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("Run returned no error after %v", time.Since(start))
		}
		return err, time.Since(start)
	case <-time.After(limit):
		cancel()
		<-done
		if os.Getenv("EDDY_TEST_DEBUG_LOGS") != "" {
			t.Log(logsOf(app))
		}
		t.Fatalf("Run did not fail within %v", limit)
		return nil, 0
	}
}

var appLogs sync.Map // *streams.App → *syncBuffer, for EDDY_TEST_DEBUG_LOGS

func logsOf(app *streams.App) string {
	if b, ok := appLogs.Load(app); ok {
		return b.(*syncBuffer).String()
	}
	return ""
}

// healthz is what the app's /healthz answers.
func healthz(app *streams.App) (int, string) {
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return rec.Code, rec.Body.String()
}

// Proof 1: an exactly-once word count with a repartition, a changelog, a
// global table, a dead-letter and a late-records topic and the instance
// directory, over SASL_SSL as a principal holding only the README's ACLs,
// Avro values through the registry over TLS with basic auth: exact output.
func TestSecureExactlyOnceWithReadmeACLs(t *testing.T) {
	s := newSecureApp(t)
	s.feed(600)
	user, password := s.user(s.acls())
	reg := s.registry(s.sec.RegistryUser, s.sec.RegistryPassword)
	app, stop := s.run(user, password, reg)
	got := s.waitCounts(app)
	if dl := kafkatest.ConsumeAll(t, s.plain, s.dlq); len(dl) != 1 || string(dl[0].Value) != "not avro" {
		t.Errorf("dead-letter topic: %d records, want the one that is not Avro", len(dl))
	}
	// The late line's three words, each late for its word's window.
	if late := kafkatest.ConsumeAll(t, s.plain, s.late); len(late) != 3 {
		t.Errorf("late-records topic: %d records, want 3", len(late))
	}
	rec := httptest.NewRecorder()
	app.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/state", nil))
	t.Logf("word counts exact (%d words) as %s holding only the README's ACLs", len(got), user)
	stop()

	// A cold restore over SASL_SSL with the same ACLs: a new instance on
	// an empty state directory reads the counts back from their changelog
	// and counts on from them — starting from zero would give wrong counts.
	// And (franz-go: librdkafka's admin client cannot) an instance of the
	// app that died with a transaction open on the counts' changelog (its
	// timeout ten minutes, far past waitCounts' wait): the new instance's
	// task waits for it, finds it, and ends it (its process is no member
	// of the group) with the README's ACLs alone.
	departed := backend.Name == "franz-go"
	if departed {
		s.openTransaction(user, password, s.app+"-gone-0", s.app+"-counts-changelog")
	}
	s.feed(300)
	app2, stop2 := s.run(user, password, reg)
	defer stop2()
	s.waitCounts(app2)
	if departed && !strings.Contains(s.logs.String(), "ended the open transaction of an instance gone from the group") {
		t.Errorf("the new instance did not end the dead instance's open transaction")
	}
	mrec := httptest.NewRecorder()
	app2.Handler().ServeHTTP(mrec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !regexp.MustCompile(`(?m)^eddy_restore_records_total(\{[^}]*\})? [1-9]`).MatchString(mrec.Body.String()) {
		t.Errorf("the new instance restored no records: the counts did not come from the changelog\n%s",
			regexp.MustCompile(`(?m)^eddy_restore.*$`).FindAllString(mrec.Body.String(), -1))
	}
	t.Logf("after a cold restore on a new instance, counts exact again")
	s.checkNoSecrets(rec.Body.String())
}

// openTransaction leaves a transaction open on partition 0 of topic, as
// an instance of the app killed mid-commit does: transactionalID's
// producer (as user) begins one, writes a record and is closed without
// ending it.
func (s *secureApp) openTransaction(user, password, transactionalID, topic string) {
	s.t.Helper()
	cfg := kclient.Config{"bootstrap.servers": s.sec.Bootstrap, "transactional.id": transactionalID, "transaction.timeout.ms": 600_000}
	for k, v := range s.sec.ClientConfig(user, password) {
		cfg[k] = v
	}
	p, err := backend.NewProducer(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		s.t.Fatal(err)
	}
	before := kafkatest.EndOffsets(s.t, s.plain, topic)[0]
	if err := p.BeginTransaction(); err != nil {
		s.t.Fatal(err)
	}
	if err := p.Produce(&rt.OutRecord{Topic: topic, Partition: 0, Key: []byte("never"), Value: []byte("committed")}); err != nil {
		s.t.Fatal(err)
	}
	if err := p.WaitDelivered(ctx); err != nil {
		s.t.Fatal(err)
	}
	// WaitDelivered waits only until the client holds the record: wait
	// for the brokers to have it, so that the transaction is open there.
	deadline := time.Now().Add(time.Minute)
	for kafkatest.EndOffsets(s.t, s.plain, topic)[0] <= before {
		if time.Now().After(deadline) {
			s.t.Fatalf("the open transaction's record did not reach %s within a minute", topic)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// run starts the app as user on a new state directory; stop ends it and
// fails the test if Run failed.
func (s *secureApp) run(user, password string, reg *avro.Registry) (*streams.App, func()) {
	s.t.Helper()
	app, err := streams.New(s.topology(reg), s.config(user, password, "https://127.0.0.1:1"))
	if err != nil {
		s.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	s.running = done
	var once sync.Once
	return app, func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				s.t.Errorf("Run: %v", err)
			}
		})
	}
}

// waitCounts waits until the output topic's last count per word is what
// the input holds, failing the test after 90 s or when Run ends.
func (s *secureApp) waitCounts(app *streams.App) map[string]int64 {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		got := map[string]int64{}
		for _, r := range kafkatest.ConsumeAll(s.t, s.plain, s.out) {
			n, err := serde.Int64().Deserialize(s.out, r.Value)
			if err != nil {
				s.t.Fatal(err)
			}
			got[string(r.Key)] = n
		}
		if fmt.Sprint(got) == fmt.Sprint(s.want) {
			return got
		}
		select {
		case err := <-s.running:
			s.running <- err
			s.t.Fatalf("Run ended early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("counts after 90s:\n got %v\nwant %v", got, s.want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Proof 2 and 3: a wrong password, an untrusted CA, a registry password
// that is wrong, and each of the README's ACLs removed in turn: a clear
// error naming the cause within 10 s, also on /healthz; no password in the
// logs.
func TestSecureFailuresNameTheirCause(t *testing.T) {
	s := newSecureApp(t)
	s.feed(50)
	all := s.acls()
	reg := s.registry(s.sec.RegistryUser, s.sec.RegistryPassword)
	var texts []string
	expect := func(t *testing.T, cfg streams.Config, is error, wants ...string) string {
		t.Helper()
		app, err := streams.New(s.topology(reg), cfg)
		if err != nil {
			t.Fatal(err)
		}
		appLogs.Store(app, s.logs)
		err, took := runUntilFailure(t, app, 10*time.Second)
		msg := err.Error()
		texts = append(texts, msg)
		if !errors.Is(err, is) {
			t.Errorf("error does not wrap %v: %v", is, err)
		}
		for _, w := range wants {
			if !strings.Contains(msg, w) {
				t.Errorf("error does not name %q: %v", w, err)
			}
		}
		code, body := healthz(app)
		texts = append(texts, body)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, strings.ReplaceAll(wants[0], `"`, `\"`)) {
			t.Errorf("/healthz answered %d %s", code, body)
		}
		t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
		return msg
	}

	user, password := s.user(all)
	t.Run("wrong password", func(t *testing.T) {
		_ = expect(t, s.config(user, password+"x", ""), streams.ErrAuthentication, "sasl.password", "invalid credentials")
	})
	t.Run("unknown user", func(t *testing.T) {
		_ = expect(t, s.config("nobody-"+user, password, ""), streams.ErrAuthentication, "sasl.username", "invalid credentials")
	})
	t.Run("untrusted CA", func(t *testing.T) {
		cfg := s.config(user, password, "")
		cfg.ClientConfig["ssl.ca.location"] = otherCA(t)
		_ = expect(t, cfg, streams.ErrAuthentication, "ssl.ca.location", "certificate verify failed")
	})
	t.Run("registry wrong password", func(t *testing.T) {
		// Producing: the serde's first Serialize registers the schema.
		ser, err := avro.New[line](s.registry(s.sec.RegistryUser, s.sec.RegistryPassword+"x"), lineSchema)
		if err == nil {
			_, err = ser.Serialize(s.in, line{Text: "x"})
		}
		if err == nil || !errors.Is(err, avro.ErrUnauthorized) || !strings.Contains(err.Error(), "HTTP 401") {
			t.Errorf("Serialize with a wrong registry password: %v; want avro.ErrUnauthorized, HTTP 401", err)
		} else {
			texts = append(texts, err.Error())
		}
		// The app: its first record's schema lookup is refused, which is
		// no bad record: Run fails (the handler dead-letters bad
		// records, so a handled error would not stop it).
		cfg := s.config(user, password, "")
		app, err := streams.New(s.topology(s.registry(s.sec.RegistryUser, s.sec.RegistryPassword+"x")), cfg)
		if err != nil {
			t.Fatal(err)
		}
		err, took := runUntilFailure(t, app, 10*time.Second)
		texts = append(texts, err.Error())
		if !errors.Is(err, avro.ErrUnauthorized) || !strings.Contains(err.Error(), "HTTP 401") {
			t.Errorf("Run with a wrong registry password: %v; want avro.ErrUnauthorized, HTTP 401", err)
		}
		t.Logf("failed after %v: %v", took.Round(time.Millisecond), err)
	})
	for i, removed := range all {
		t.Run("without "+removed.Operation+" on "+removed.Resource+" "+strings.TrimSuffix(removed.Name, "-"), func(t *testing.T) {
			// An application of its own (an earlier case's committed
			// offsets would leave it nothing to do), with the same ACLs
			// but one.
			s.app = kafkatest.UniqueName(t, "sec-app")
			acls := s.acls()
			removed = acls[i]
			rest := append(append([]kafkatest.ACL{}, acls[:i]...), acls[i+1:]...)
			user, password := s.user(rest)
			// The error names the resource; the operation is the one
			// removed, or DESCRIBE, which READ and WRITE imply and which
			// goes with the last of them.
			kind := map[string]string{"topic": "topic", "group": "group", "transactional-id": "transactional id"}[removed.Resource]
			msg := expect(t, s.config(user, password, "127.0.0.1:1"), streams.ErrAuthorization, "on "+kind+` "`+removed.Name)
			if !strings.Contains(msg, removed.Operation+" on") && !strings.Contains(msg, "DESCRIBE on") {
				t.Errorf("error names neither %s nor DESCRIBE: %s", removed.Operation, msg)
			}
		})
	}
	s.checkNoSecrets(texts...)
}

// otherCA writes the certificate of a CA that signed nothing the broker
// has.
func otherCA(t *testing.T) string {
	t.Helper()
	srv := httptest.NewTLSServer(http.NotFoundHandler()) // its certificate is self-signed by Go's test CA
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	var buf bytes.Buffer
	for _, c := range srv.TLS.Certificates[0].Certificate {
		pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c})
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Proof 4: interactive queries across two instances serving https behind
// the service's own token check, forwarding with a custom client.
func TestSecureInteractiveQueriesOverHTTPS(t *testing.T) {
	s := newSecureApp(t)
	// Two partitions, so each instance owns a share of the words.
	s.in = kafkatest.UniqueName(t, "sec-lines2")
	kafkatest.CreateTopic(t, s.plain, s.in, 2, nil)
	s.feed(200)
	user, password := s.user(s.acls())
	reg := s.registry(s.sec.RegistryUser, s.sec.RegistryPassword)
	const token = "query-token"
	type instance struct {
		app *streams.App
		url string
	}
	var insts []instance
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	client := s.sec.HTTPClient(t)
	client.Transport = tokenTransport{token: token, next: client.Transport}
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		url := "https://" + l.Addr().String()
		cfg := s.config(user, password, url)
		cfg.QueryClient = client
		app, err := streams.New(s.topology(reg), cfg)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: requireToken(token, app.Handler()),
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{s.sec.ServerCertificate(t)}}}
		go srv.ServeTLS(l, "", "")
		t.Cleanup(func() { srv.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := app.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		}()
		insts = append(insts, instance{app, url})
	}
	// Every word from every instance, through its https endpoint with the
	// token: the instance that does not own a word forwards to the one
	// that does.
	ask := func(base, word string) (string, error) {
		resp, err := client.Get(base + "/stores/counts/keys/" + word)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%d %s", resp.StatusCode, b)
		}
		return string(b), nil
	}
	deadline := time.Now().Add(90 * time.Second)
	forwarded := 0
	for word, n := range s.want {
		for _, in := range insts {
			for {
				body, err := ask(in.url, word)
				if err == nil && strings.Contains(body, fmt.Sprintf(`"value": %d`, n)) {
					if !strings.Contains(body, in.app.Report().ProcessID) {
						forwarded++
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s from %s: %v %s (want %d)", word, in.url, err, body, n)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	if forwarded == 0 {
		t.Fatal("no answer was forwarded: the test proves nothing about forwarding")
	}
	// Without the token the middleware refuses: the custom client is what
	// carried it.
	resp, err := s.sec.HTTPClient(t).Get(insts[0].url + "/stores/counts/keys/fox")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %d", resp.StatusCode)
	}
	t.Logf("%d words asked of 2 https instances, %d answers forwarded with the custom client", len(s.want), forwarded)
	s.checkNoSecrets()
}

type tokenTransport struct {
	token string
	next  http.RoundTripper
}

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+tt.token)
	return tt.next.RoundTrip(r)
}

func requireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

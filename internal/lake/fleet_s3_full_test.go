//go:build full

package lake_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/trellara/trellara/internal/lake"
	"github.com/trellara/trellara/internal/lake/lakeread"
	"github.com/trellara/trellara/internal/pgtest"
)

// s3Server is an S3-protocol server in the test process: gofakes3 over an
// in-memory backend, behind a handler that checks AWS Signature V4 on
// every request, counts operations, and can fail a fraction of requests.
type s3Server struct {
	t       *testing.T
	srv     *httptest.Server
	backend *s3mem.Backend
	key     string // the only access key id accepted
	secret  string
	region  string

	mu  sync.Mutex
	ops map[string]int // operation name -> requests that reached the backend
	// faulted are the fault keys (method, path, range, upload id, part)
	// of the requests failed so far: each is failed at most once, so a
	// request's retry always passes (see fault).
	faulted map[string]bool

	faultPermille atomic.Int64 // of 1000 requests, how many fail (0: none)
	faults        atomic.Int64 // requests failed by the fault mode
	rejected      atomic.Int64 // requests refused by the signature check
	verify        bool         // false only in the mutation (see TestS3SignedRequests)
}

func startS3(t *testing.T, bucket, key, secret string) *s3Server {
	t.Helper()
	s := &s3Server{t: t, backend: s3mem.New(), key: key, secret: secret, region: "us-east-1",
		ops: map[string]int{}, faulted: map[string]bool{}, verify: true}
	if err := s.backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(s.backend, gofakes3.WithoutVersioning())
	s.srv = httptest.NewServer(s.handler(fake.Server()))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *s3Server) URL() string { return s.srv.URL }

// opCount is how many requests of operation op reached the backend.
func (s *s3Server) opCount(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ops[op]
}

func (s *s3Server) opsString() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.ops))
	for k := range s.ops {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s=%d ", n, s.ops[n])
	}
	return strings.TrimSpace(b.String())
}

// operation names the S3 operation of r, as far as the test needs them.
func operation(r *http.Request) string {
	q := r.URL.Query()
	_, uploads := q["uploads"]
	switch {
	case r.Method == http.MethodPost && uploads:
		return "CreateMultipartUpload"
	case r.Method == http.MethodPut && q.Get("uploadId") != "":
		return "UploadPart"
	case r.Method == http.MethodPost && q.Get("uploadId") != "":
		return "CompleteMultipartUpload"
	case r.Method == http.MethodDelete && q.Get("uploadId") != "":
		return "AbortMultipartUpload"
	case r.Method == http.MethodPost && q.Has("delete"):
		return "DeleteObjects"
	case r.Method == http.MethodPut:
		return "PutObject"
	case r.Method == http.MethodGet && strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0:
		return "ListObjects"
	case r.Method == http.MethodGet:
		return "GetObject"
	case r.Method == http.MethodHead:
		return "HeadObject"
	case r.Method == http.MethodDelete:
		return "DeleteObject"
	}
	return r.Method
}

func s3Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName xml.Name `xml:"Error"`
		Code    string
		Message string
	}{Code: code, Message: msg})
}

func (s *s3Server) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.verify {
			if err := s.verifySigV4(r); err != nil {
				s.rejected.Add(1)
				_, _ = io.Copy(io.Discard, r.Body)
				s3Error(w, http.StatusForbidden, "SignatureDoesNotMatch", err.Error())
				return
			}
		}
		op := operation(r)
		if s.fault(r) {
			// Before the backend: the request has no effect, as when a
			// store sheds load at its front end.
			_, _ = io.Copy(io.Discard, r.Body)
			if rand.IntN(2) == 0 {
				s3Error(w, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
			} else {
				s3Error(w, http.StatusInternalServerError, "InternalError", "We encountered an internal error. Please try again.")
			}
			return
		}
		s.mu.Lock()
		s.ops[op]++
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// fault decides whether to fail r: with the configured probability, but
// never the same request (method, path, range, upload id, part) twice.
// A client that retries at least once therefore always gets through,
// whatever other clients ask for the same object meanwhile (the fleet and
// the test both read the same metadata); one that does not retry fails
// about permille/1000 of its new requests.
func (s *s3Server) fault(r *http.Request) bool {
	p := s.faultPermille.Load()
	if p == 0 {
		return false
	}
	q := r.URL.Query()
	k := r.Method + " " + r.URL.Path + " " + r.Header.Get("Range") + " " + q.Get("uploadId") + " " + q.Get("partNumber")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.faulted[k] || rand.Int64N(1000) >= p {
		return false
	}
	s.faulted[k] = true
	s.faults.Add(1)
	return true
}

// verifySigV4 recomputes the AWS Signature Version 4 of r (header auth,
// the form every SDK request takes) with the server's key pair and
// compares it with the one r carries. It also requires a hex
// x-amz-content-sha256 to be the SHA-256 of the body, so a body changed
// in flight fails as a header changed in flight does.
func (s *s3Server) verifySigV4(r *http.Request) error {
	auth := r.Header.Get("Authorization")
	const algo = "AWS4-HMAC-SHA256"
	rest, ok := strings.CutPrefix(auth, algo+" ")
	if !ok {
		return fmt.Errorf("not a %s Authorization header", algo)
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	cred := strings.Split(fields["Credential"], "/")
	if len(cred) != 5 || cred[3] != "s3" || cred[4] != "aws4_request" {
		return fmt.Errorf("credential scope %q is not KEY/DATE/REGION/s3/aws4_request", fields["Credential"])
	}
	if cred[0] != s.key {
		return fmt.Errorf("unknown access key id")
	}
	if cred[2] != s.region {
		return fmt.Errorf("region %q, want %q", cred[2], s.region)
	}
	amzDate := r.Header.Get("X-Amz-Date")
	when, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil || !strings.HasPrefix(amzDate, cred[1]) {
		return fmt.Errorf("x-amz-date %q does not match the credential date %q", amzDate, cred[1])
	}
	if d := time.Since(when); d > 15*time.Minute || d < -15*time.Minute {
		return fmt.Errorf("x-amz-date %s is %v off", amzDate, d)
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	if payload == "" {
		return fmt.Errorf("no x-amz-content-sha256")
	}
	if len(payload) == 64 {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != payload {
			return fmt.Errorf("the body's SHA-256 is not x-amz-content-sha256")
		}
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	if !contains(signed, "host") || !contains(signed, "x-amz-date") || !contains(signed, "x-amz-content-sha256") {
		return fmt.Errorf("signed headers %q miss host, x-amz-date or x-amz-content-sha256", fields["SignedHeaders"])
	}
	var canonHeaders strings.Builder
	for _, h := range signed {
		var vals []string
		switch h {
		case "host":
			vals = []string{r.Host}
		case "content-length":
			vals = []string{fmt.Sprint(r.ContentLength)}
		case "transfer-encoding":
			vals = r.TransferEncoding
		default:
			vals = r.Header.Values(h)
		}
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		fmt.Fprintf(&canonHeaders, "%s:%s\n", h, strings.Join(vals, ","))
	}
	path, rawQuery, _ := strings.Cut(r.RequestURI, "?")
	canon := strings.Join([]string{r.Method, path, canonicalQuery(rawQuery), canonHeaders.String(), fields["SignedHeaders"], payload}, "\n")
	scope := strings.Join(cred[1:], "/")
	sum := sha256.Sum256([]byte(canon))
	toSign := algo + "\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	k := hmacSHA256([]byte("AWS4"+s.secret), cred[1])
	for _, part := range cred[2:] {
		k = hmacSHA256(k, part)
	}
	want := hex.EncodeToString(hmacSHA256(k, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return fmt.Errorf("the signature does not match the request")
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// canonicalQuery is SigV4's canonical query string: each name and value
// URI-encoded (RFC 3986 unreserved characters kept), sorted by name then
// value.
func canonicalQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "\x00unparsable"
	}
	var pairs []string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, uriEncode(k)+"="+uriEncode(v))
		}
	}
	sort.Strings(pairs)
	return strings.Join(pairs, "&")
}

func uriEncode(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// s3Opener is lakeread's Opener for the fake store: it reads the objects
// straight from the in-memory backend, so the independent reader's view
// passes through neither iceberg-go nor the AWS SDK.
type s3Opener struct{ backend *s3mem.Backend }

func (o s3Opener) Open(_ context.Context, location string) (lakeread.File, error) {
	u, err := url.Parse(location)
	if err != nil || u.Scheme != "s3" {
		return nil, fmt.Errorf("s3 opener: location %q is not s3://bucket/key", location)
	}
	obj, err := o.backend.GetObject(u.Host, strings.TrimPrefix(u.Path, "/"), nil)
	if err != nil {
		return nil, fmt.Errorf("s3 opener: bucket %s key %s: %w", u.Host, u.Path, err)
	}
	defer obj.Contents.Close()
	b, err := io.ReadAll(obj.Contents)
	if err != nil {
		return nil, fmt.Errorf("s3 opener: bucket %s key %s: %w", u.Host, u.Path, err)
	}
	return memFile{bytes.NewReader(b)}, nil
}

type memFile struct{ *bytes.Reader }

func (memFile) Close() error { return nil }

// s3Warehouse is fleet.yml's lake lines for an s3:// warehouse on srv,
// with the key pair read from LAKE_S3_KEY and LAKE_S3_SECRET.
func s3Warehouse(srv *s3Server, bucket string) string {
	return fmt.Sprintf(`  warehouse: s3://%s/prefix
  s3:
    endpoint: %s
    region: %s
    path_style: true
    access_key_id: {env: LAKE_S3_KEY}
    secret_access_key: {env: LAKE_S3_SECRET}
`, bucket, srv.URL(), srv.region)
}

// bigTxn is one transaction of 80,000 rows of incompressible text (hex of
// SHA-512s, ~41 MB): its changelog data file is well over the AWS SDK
// transfer manager's 16 MiB multipart threshold, so it is written with
// CreateMultipartUpload, UploadPart (8 MiB parts), CompleteMultipartUpload.
const bigTxn = `INSERT INTO items SELECT g,
	encode(sha512(('a' || g)::bytea) || sha512(('b' || g)::bytea) || sha512(('c' || g)::bytea) || sha512(('d' || g)::bytea), 'hex'), 0
	FROM generate_series(3000001, 3080000) g`

// s3Restarts are the fleet log's component restarts caused by an S3
// error (a fault the SDK's retries did not absorb).
func s3Restarts(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "restarting") && (strings.Contains(line, "SlowDown") || strings.Contains(line, "InternalError") || strings.Contains(line, "StatusCode: 50")) {
			out = append(out, line)
		}
	}
	return out
}

// TestFleetFanInS3 is TestFleetFanIn's fan-in on an s3:// warehouse: two
// sources, the SQL catalog on PostgreSQL, the warehouse on an S3-protocol
// server in this process (gofakes3, in memory) that checks every
// request's SigV4 signature.
//
//   - A fleet run with a wrong secret_access_key gets every request
//     refused (403 SignatureDoesNotMatch), writes nothing, and its log
//     shows neither the wrong nor the right secret.
//   - With the right key pair, under a write workload, one source commits
//     a ~41 MB transaction: its data file goes up as a multipart upload
//     (the server saw CreateMultipartUpload, UploadPart,
//     CompleteMultipartUpload).
//   - Then the server fails 10% of requests (503 SlowDown or 500
//     InternalError, never the same request twice); the fleet is
//     SIGKILLed once under load and once at the after-table-commit
//     failpoint. The SDK's retries absorb every fault: the committer never
//     restarts on an S3 error.
//   - At the end an epoch is complete, fanin verify is CONVERGED, and the
//     changelog, read by lakeread straight from the fake store's backend
//     (no iceberg-go, no AWS SDK), holds every change of each source's
//     test_decoding record exactly once and nets to the source.
//
// Mutations, each tried once and red: retries disabled in the fleet
// (AWS_MAX_ATTEMPTS=1 in its environment) fails the "no restart on an S3
// error" check; the signature check disabled (s3Server.verify false)
// fails the wrong-secret phase (the wrong-secret fleet writes objects).
func TestFleetFanInS3(t *testing.T) {
	pgtest.Require(t)
	const bucket, keyID = "lake", "AKIDTRELLARATEST0001"
	secret := fmt.Sprintf("trellaraS3secret%016x%08x", rand.Uint64(), rand.Uint32())
	wrong := fmt.Sprintf("wrongS3secretvalue%016x%06x", rand.Uint64(), rand.Uint32()>>8)
	srv := startS3(t, bucket, keyID, secret)
	t.Setenv("LAKE_S3_KEY", keyID)
	t.Setenv("LAKE_S3_SECRET", secret)
	catalog := pgtest.Start(t, pgtest.Options{})
	e := newFleetAt(t, 2, catalog, s3Warehouse(srv, bucket))
	e.opener = s3Opener{srv.backend}
	startRecord(t, e)
	logText := func() string {
		b, _ := os.ReadFile(filepath.Join(e.dir, "fleet.log"))
		return string(b)
	}
	noSecret := func(what, text string) {
		t.Helper()
		for _, s := range []string{secret, wrong} {
			if strings.Contains(text, s) {
				t.Fatalf("%s shows a secret_access_key", what)
			}
		}
	}

	// A wrong secret: refused, nothing written.
	bad := e.start("LAKE_S3_SECRET=" + wrong)
	deadline := time.Now().Add(60 * time.Second)
	for srv.rejected.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	_ = bad.Process.Signal(syscall.SIGKILL)
	_ = bad.Wait()
	if n := srv.rejected.Load(); n < 3 {
		t.Fatalf("with a wrong secret the server refused %d requests, want the fleet's writes refused\n%s", n, tail(logText(), 20))
	}
	if n := srv.opCount("PutObject") + srv.opCount("CreateMultipartUpload"); n != 0 {
		t.Fatalf("with a wrong secret %d writes reached the store (%s)", n, srv.opsString())
	}
	if !strings.Contains(logText(), "SignatureDoesNotMatch") {
		t.Fatalf("the fleet log does not name the refusal:\n%s", tail(logText(), 20))
	}
	noSecret("the wrong-secret fleet's log", logText())
	t.Logf("wrong secret: %d requests refused", srv.rejected.Load())
	rejectedBefore := srv.rejected.Load()

	l := e.openLake()
	fleet := e.start()
	w := startWorkload(t, e.sources)
	first := e.waitEpoch(l, 0, "complete", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	t.Logf("epoch %d complete (%s)", first.ID, srv.opsString())

	// Multipart: one large transaction.
	e.sources[0].Exec(t, bigTxn)
	deadline = time.Now().Add(120 * time.Second)
	for srv.opCount("CompleteMultipartUpload") == 0 && time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
	}
	if srv.opCount("CreateMultipartUpload") == 0 || srv.opCount("UploadPart") < 2 || srv.opCount("CompleteMultipartUpload") == 0 {
		t.Fatalf("no multipart upload reached the store: %s\n%s", srv.opsString(), tail(logText(), 20))
	}
	t.Logf("multipart: %s", srv.opsString())

	// Faults, and SIGKILLs under them.
	srv.faultPermille.Store(100)
	e.waitEpoch(l, lastID(t, l), "complete under faults", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	_ = fleet.Process.Signal(syscall.SIGKILL)
	_ = fleet.Wait()
	fp := e.start("TRELLARA_LAKE_FAILPOINT=after-table-commit:kill")
	err := fp.Wait()
	if ws, ok := fp.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("fleet run with failpoint after-table-commit:kill ended with %v, want SIGKILL at the failpoint", err)
	}
	e.start()
	e.waitEpoch(l, lastID(t, l), "complete after the SIGKILLs, under faults", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	w.end()
	e.waitEpoch(l, lastID(t, l), "complete after the workload, under faults", func(ep lake.Epoch) bool { return ep.Status == lake.StatusComplete })
	srv.faultPermille.Store(0)
	faults := srv.faults.Load()
	if faults < 10 {
		t.Fatalf("the fault mode failed only %d requests", faults)
	}
	if r := s3Restarts(logText()); len(r) > 0 {
		t.Fatalf("%d faults, and the committer restarted on an S3 error %d times (the SDK's retries should absorb each); first:\n%s", faults, len(r), r[0])
	}
	if n := srv.rejected.Load() - rejectedBefore; n != 0 {
		t.Fatalf("%d requests with the right key pair failed the signature check", n)
	}
	t.Logf("faults injected: %d; store operations: %s", faults, srv.opsString())

	out, errOut, code := e.cli("fanin", "verify", "--wait", "60s")
	if code != 0 || !strings.Contains(out, "CONVERGED") {
		t.Fatalf("fanin verify: exit %d\n%s\n%s", code, out, errOut)
	}
	noSecret("fanin verify", out+errOut)
	if out, errOut, code := e.cli("lake", "epoch"); code != 0 || !strings.Contains(out, lake.StatusComplete) {
		t.Fatalf("lake epoch: exit %d\n%s\n%s", code, out, errOut)
	}
	noSecret("the fleet log", logText())
	t.Logf("workload transactions per source: %v\n%s", w.n, out)

	checkNoDuplicates(t, l)
	checkAgainstSource(t, l, e)
	checkIndependently(t, e)
}

// TestS3SignedRequests checks the fake store's SigV4 verifier against the
// AWS SDK's own signer: a correctly signed PUT and GET pass; a wrong
// secret, a signed header changed after signing, a changed query, a
// changed body and an unsigned request are refused with 403.
//
// Mutation, tried once and red: the signature check disabled
// (s3Server.verify false) lets the wrong-secret request through.
func TestS3SignedRequests(t *testing.T) {
	const keyID, secret = "AKIDSIGNTEST", "sign-test-secret-0123456789abcdef"
	srv := startS3(t, "b", keyID, secret)
	send := func(method, path, body, sec string, tamper func(*http.Request)) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(body))
		hash := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", hash)
		req.Header.Set("X-Amz-Meta-Note", "signed value")
		if sec != "" {
			// A signer per request: the SDK's caches derived signing keys
			// by access key id and scope, not by secret.
			err = v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: sec}, req, hash, "s3", srv.region, time.Now(),
				func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true })
			if err != nil {
				t.Fatal(err)
			}
		}
		if tamper != nil {
			tamper(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := send(http.MethodPut, "/b/dir/obj-1.json", "hello", secret, nil); code != http.StatusOK {
		t.Fatalf("signed PUT: %d, want 200", code)
	}
	if code := send(http.MethodGet, "/b?list-type=2&prefix=dir%2F", "", secret, nil); code != http.StatusOK {
		t.Fatalf("signed list with a query: %d, want 200", code)
	}
	for _, c := range []struct {
		name   string
		method string
		path   string
		body   string
		secret string
		tamper func(*http.Request)
	}{
		{"wrong secret", http.MethodPut, "/b/dir/obj-2.json", "hello", "not-the-secret-0123456789abcdef", nil},
		{"signed header changed", http.MethodPut, "/b/dir/obj-3.json", "hello", secret, func(r *http.Request) { r.Header.Set("X-Amz-Meta-Note", "changed") }},
		{"query changed", http.MethodGet, "/b?list-type=2&prefix=dir%2F", "", secret, func(r *http.Request) { r.URL.RawQuery = "list-type=2&prefix=other" }},
		{"path changed", http.MethodPut, "/b/dir/obj-4.json", "hello", secret, func(r *http.Request) { r.URL.Path = "/b/dir/obj-5.json" }},
		{"body changed", http.MethodPut, "/b/dir/obj-6.json", "hello", secret, func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader("hellp")) }},
		{"unsigned", http.MethodPut, "/b/dir/obj-7.json", "hello", "", nil},
	} {
		if code := send(c.method, c.path, c.body, c.secret, c.tamper); code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, code)
		}
	}
	if n := srv.opCount("PutObject"); n != 1 {
		t.Fatalf("%d PUTs reached the store, want the one correctly signed", n)
	}
}

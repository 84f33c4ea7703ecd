// Package contract checks HTTP traffic against bootops' OpenAPI document
// (api/openapi.json) with kin-openapi's openapi3filter: a test installs
// Checker.Wrap around the handler it tests, and every request and
// response that goes through is validated and counted.
package contract

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/bootops/bootops/api"
)

// bodyLimit is how much of a response is kept for validation: a larger
// one (an image, a stream) has its status and content type checked only.
const bodyLimit = 1 << 20

func init() {
	// Text the routes send whose schema is a string.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
}

// Checker validates traffic against the document and remembers which
// operations it saw and what did not match.
type Checker struct {
	doc    *openapi3.T
	router routers.Router

	mu       sync.Mutex
	seen     map[string]int // operationId → requests
	failures []string
}

// New loads and validates the embedded document.
func New() (*Checker, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Document())
	if err != nil {
		return nil, fmt.Errorf("contract: load api/openapi.json: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("contract: api/openapi.json: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("contract: router: %w", err)
	}
	return &Checker{doc: doc, router: router, seen: map[string]int{}}, nil
}

// Doc is the loaded document.
func (c *Checker) Doc() *openapi3.T { return c.doc }

// Wrap validates every request to next and next's response. A request
// the document refuses must be refused (4xx or 5xx): the hostile tests
// send such requests on purpose. A response must have a documented
// status, content type and, for JSON, body.
func (c *Checker) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request's body as the handler reads it: a server that
		// refuses a request before reading its body must still be able to
		// (the hostile tests count the bytes read).
		tee := &teeBody{ReadCloser: r.Body}
		if r.Body != nil {
			r.Body = tee
		}
		orig := r.Clone(r.Context())
		rec := &recorder{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(rec, r)
		if tee.buf.Len() > 0 && orig.Header.Get("Content-Type") == "" {
			// The server reads a body as JSON whatever it is labelled
			// (the agent labels it; some tests do not).
			orig.Header.Set("Content-Type", "application/json")
		}
		orig.Body = io.NopCloser(bytes.NewReader(tee.buf.Bytes()))
		// A body the handler did not read to its end is not checked.
		orig.ContentLength = int64(tee.buf.Len())
		rec.partialRequest = r.Body != nil && tee.buf.Len() > 0 && (!tee.eof || tee.buf.Len() >= bodyLimit)
		c.check(orig, rec)
	})
}

func (c *Checker) check(r *http.Request, rec *recorder) {
	if r.Method == http.MethodHead {
		return // a GET's headers; the document lists GETs
	}
	// The router matches on the URL's host too: the document's server is "/".
	u := *r.URL
	u.Scheme, u.Host = "http", r.Host
	if u.Host == "" {
		u.Host = "localhost"
	}
	r.URL = &u
	line := r.Method + " " + r.URL.RequestURI()
	route, params, err := c.router.FindRoute(r)
	if err != nil {
		// A path the document does not have is no route of the server's:
		// the mux must have said so.
		// (or redirected to the cleaned path).
		switch rec.code {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		default:
			c.fail("%s: %d, but the document has no such operation (%v)", line, rec.code, err)
		}
		return
	}
	c.mu.Lock()
	c.seen[route.Operation.OperationID]++
	c.mu.Unlock()
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: presented, IncludeResponseStatus: true, ExcludeRequestBody: rec.partialRequest},
	}
	ctx := context.Background()
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && rec.code < 400 {
		c.fail("%s: the document refuses the request, but the server answered %d: %v", line, rec.code, oneLine(err))
	}
	if rec.Header().Get("Content-Type") == "" && rec.body.Len() > 0 {
		// What net/http sends when the handler set none (a real
		// server's ResponseWriter sniffs outside the handler's map).
		rec.Header().Set("Content-Type", http.DetectContentType(rec.body.Bytes()))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: rec.code, Header: rec.Header(),
		Body:    io.NopCloser(bytes.NewReader(rec.body.Bytes())),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: rec.over},
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		c.fail("%s: response %d (%s) does not match the document: %v", line, rec.code, rec.Header().Get("Content-Type"), oneLine(err))
	}
}

// presented checks that a request carries the credential a security
// scheme names; whether it is good is the server's to say.
func presented(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s, r := in.SecurityScheme, in.RequestValidationInput.Request
	switch {
	case s.Type == "http" && s.Scheme == "bearer":
		if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
			return errors.New("no bearer token")
		}
	case s.Type == "apiKey" && s.In == "header":
		if r.Header.Get(s.Name) == "" {
			return errors.New("no " + s.Name + " header")
		}
	case s.Type == "apiKey" && s.In == "cookie":
		if _, err := r.Cookie(s.Name); err != nil {
			return errors.New("no " + s.Name + " cookie")
		}
	default:
		return fmt.Errorf("scheme %s/%s: not checked", s.Type, s.Scheme)
	}
	return nil
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

func (c *Checker) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failures = append(c.failures, fmt.Sprintf(format, args...))
}

// Failures are the mismatches seen so far, in order.
func (c *Checker) Failures() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.failures)
}

// Seen is how many requests each operation got.
func (c *Checker) Seen() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.seen))
	for k, v := range c.seen {
		m[k] = v
	}
	return m
}

// Operations are the document's operationIds, sorted.
func (c *Checker) Operations() []string {
	var ids []string
	for _, item := range c.doc.Paths.Map() {
		for _, o := range item.Operations() {
			ids = append(ids, o.OperationID)
		}
	}
	slices.Sort(ids)
	return ids
}

// Finish ends a test binary's run (TestMain): it prints which operations
// the tests exercised and which they did not, and every mismatch; the
// exit code is 1 when there was one, else code.
func (c *Checker) Finish(w io.Writer, code int) int {
	seen := c.Seen()
	var missed []string
	for _, id := range c.Operations() {
		if seen[id] == 0 {
			missed = append(missed, id)
		}
	}
	fmt.Fprintf(w, "contract: %d of %d documented operations exercised; not exercised here: %s\n",
		len(seen), len(c.Operations()), strings.Join(missed, " "))
	if f := c.Failures(); len(f) > 0 {
		fmt.Fprintf(w, "contract: %d requests or responses do not match api/openapi.json:\n", len(f))
		for _, s := range f {
			fmt.Fprintln(w, "  "+s)
		}
		return 1
	}
	return code
}

// recorder passes a response through and keeps its status and the
// first bodyLimit bytes of its body.
type recorder struct {
	http.ResponseWriter
	code           int
	wroteHeader    bool
	partialRequest bool // the handler did not read the request's body to its end
	body           bytes.Buffer
	over           bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wroteHeader = true
	if r.body.Len()+len(b) <= bodyLimit {
		r.body.Write(b)
	} else {
		r.over = true
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush and set deadlines.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Compare holds a server's patterns (net/http ServeMux syntax) to the
// document: the patterns no operation documents, and the operations
// (METHOD /path) none of the patterns serves. A pattern without a method
// serves every method; one that ends in "/" a subtree.
func (c *Checker) Compare(patterns []string) (undocumented, unserved []string) {
	type operation struct{ method, path string }
	var ops []operation
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			ops = append(ops, operation{method, path})
		}
	}
	served := map[operation]bool{}
	for _, p := range patterns {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			method, path = "", p
		}
		path, exact := strings.CutSuffix(path, "{$}")
		subtree := !exact && strings.HasSuffix(path, "/")
		found := false
		for _, o := range ops {
			if method != "" && method != o.method {
				continue
			}
			if o.path == path || subtree && strings.HasPrefix(o.path, path) {
				served[o], found = true, true
			}
		}
		if !found {
			undocumented = append(undocumented, p)
		}
	}
	for _, o := range ops {
		if !served[o] {
			unserved = append(unserved, o.method+" "+o.path)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(unserved)
	return undocumented, unserved
}

// teeBody keeps what is read of a request's body, and whether it was
// read to its end.
type teeBody struct {
	io.ReadCloser
	buf bytes.Buffer
	eof bool
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if t.buf.Len() < bodyLimit {
		t.buf.Write(p[:n])
	}
	if err == io.EOF {
		t.eof = true
	}
	return n, err
}

// Main is a package's TestMain with the contract check: use puts the
// Checker where the package's servers take their middleware, the tests
// run, and Finish gives the exit code.
func Main(m *testing.M, use func(*Checker)) {
	c, err := New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	use(c)
	os.Exit(c.Finish(os.Stdout, m.Run()))
}

package http

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/bootops/bootops/trust"
)

// Role is what an operator's credential allows on the daemon's API.
type Role uint8

// Roles, each allowing what the one before does and more.
const (
	// RoleNone: the boot paths only (scripts, artifacts, the agents' API
	// with their own credentials).
	RoleNone Role = iota
	// RoleRead: status, timelines, inventory, the delivery record, power
	// as last polled, the dashboard's stream.
	RoleRead
	// RoleOperate: also fetch now, power actions, boot device.
	RoleOperate
)

func (r Role) String() string {
	switch r {
	case RoleRead:
		return "read"
	case RoleOperate:
		return "operate"
	}
	return "none"
}

// TokenCookie is the dashboard's cookie: the operator's token, set by
// POST /api/v1/login and taken for reads (GET) only, so a page elsewhere
// cannot act with it.
const TokenCookie = "bootops-token"

// Operators are the operators' credentials: tokens, each with a role. A
// token is kept as its SHA-256 and compared in constant time against every
// one, so neither its value nor which entry matched shows in the time of
// an answer.
type Operators struct {
	tokens []operator
	// revoked are operator certificates' serial numbers (hex, lower
	// case) no longer taken.
	revoked map[string]bool
}

type operator struct {
	name string
	role Role
	hash [sha256.Size]byte
}

// MinTokenLen is the shortest token an operators file may hold.
const MinTokenLen = 16

// ParseOperators reads an operators file: one operator a line, "ROLE
// TOKEN [NAME]" (ROLE read or operate), or "revoked SERIAL [NAME]" for an
// operator certificate no longer taken (its serial number in hex, as
// `bootops ca operator` prints it); '#' comments and blank lines skipped.
// name is the file's, for errors ("file:line: …").
func ParseOperators(name, text string) (*Operators, error) {
	o := &Operators{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		var role Role
		switch f[0] {
		case "revoked":
			sn := ""
			if len(f) >= 2 {
				sn = strings.ToLower(strings.TrimPrefix(strings.ReplaceAll(f[1], ":", ""), "0x"))
			}
			if len(f) > 3 || sn == "" || strings.Trim(sn, "0123456789abcdef") != "" {
				return nil, fmt.Errorf("%s:%d: want revoked SERIAL [NAME], SERIAL a certificate's serial number in hex", name, line)
			}
			if o.revoked == nil {
				o.revoked = map[string]bool{}
			}
			o.revoked[strings.TrimLeft(sn, "0")] = true
			continue
		case "read":
			role = RoleRead
		case "operate":
			role = RoleOperate
		default:
			return nil, fmt.Errorf("%s:%d: role %q: want read or operate (a line is ROLE TOKEN [NAME])", name, line, f[0])
		}
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("%s:%d: want ROLE TOKEN [NAME], got %d fields", name, line, len(f))
		}
		if len(f[1]) < MinTokenLen {
			return nil, fmt.Errorf("%s:%d: the token is %d characters, at least %d (openssl rand -hex 24 makes one)", name, line, len(f[1]), MinTokenLen)
		}
		op := operator{role: role, hash: sha256.Sum256([]byte(f[1])), name: fmt.Sprintf("%s:%d", name, line)}
		if len(f) == 3 {
			op.name = f[2]
		}
		o.tokens = append(o.tokens, op)
	}
	return o, sc.Err()
}

// Add adds one token with a role (the dashboard token, the state folder's
// operator token); an empty token adds nothing.
func (o *Operators) Add(name, token string, role Role) {
	if token != "" {
		o.tokens = append(o.tokens, operator{name: name, role: role, hash: sha256.Sum256([]byte(token))})
	}
}

// Len is how many tokens there are.
func (o *Operators) Len() int { return len(o.tokens) }

// RoleOf is the role the request's credential gives, and who it is: its
// operator certificate of the site CA (verified by the TLS handshake,
// not revoked), its bearer token, or for a GET the dashboard's cookie.
// Every token is compared, whichever matches.
func (o *Operators) RoleOf(r *http.Request) (Role, string) {
	if role, who := o.certRole(r); role != RoleNone {
		return role, who
	}
	tok := bearer(r)
	if tok == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		if c, err := r.Cookie(TokenCookie); err == nil {
			tok = c.Value
		}
	}
	if o == nil || tok == "" {
		return RoleNone, ""
	}
	h := sha256.Sum256([]byte(tok))
	role, who := RoleNone, ""
	for _, op := range o.tokens {
		if subtle.ConstantTimeCompare(h[:], op.hash[:]) == 1 && op.role > role {
			role, who = op.role, op.name
		}
	}
	return role, who
}

// certRole is the role of the request's operator certificate: RoleNone
// without one (a machine's handshake, plain HTTP), or when revoked.
func (o *Operators) certRole(r *http.Request) (Role, string) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
		return RoleNone, ""
	}
	role, name, sn, ok := trust.Operator(r.TLS.PeerCertificates[0])
	if !ok || o != nil && o.revoked[strings.TrimLeft(sn, "0")] {
		return RoleNone, ""
	}
	switch role {
	case "read":
		return RoleRead, "certificate " + name
	case "operate":
		return RoleOperate, "certificate " + name
	}
	return RoleNone, ""
}

// Authorized checks the request's bearer token against want, in constant
// time; an empty want authorizes nothing.
func Authorized(r *http.Request, want string) bool {
	got := bearer(r)
	return got != "" && want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// bearer is the request's bearer credential ("" without the "Bearer "
// scheme).
func bearer(r *http.Request) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return tok
}

// Needs wraps h: a request whose credential gives less than role gets 401
// (403 when it has a credential of a lesser role), before h runs. The
// daemon wraps the routes it adds (power, the dashboard's stream) too.
func (s *Server) Needs(role Role, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Authorize == nil || s.Authorize(r, role) {
			h.ServeHTTP(w, r)
			return
		}
		Refuse(w, r, role)
	})
}

// Refuse answers a request that lacks role: 403 when it carried a
// credential (of a lesser role, or an unknown one), 401 when none.
func Refuse(w http.ResponseWriter, r *http.Request, role Role) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="bootops"`)
	msg := fmt.Sprintf("this needs an operator credential with the %s role: Authorization: Bearer <token> (bootops --token-file F or BOOTOPS_TOKEN; serve --operators-file)", role)
	if _, err := r.Cookie(TokenCookie); bearer(r) != "" || err == nil {
		http.Error(w, "the credential does not give the "+role.String()+" role: "+msg, http.StatusForbidden)
		return
	}
	http.Error(w, msg, http.StatusUnauthorized)
}

// login is POST /api/v1/login: the dashboard presents a token once, with
// the bearer header, and keeps it as an HttpOnly, SameSite=Strict cookie
// for its reads.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.Authorize != nil && !s.Authorize(r, RoleRead) || bearer(r) == "" {
		Refuse(w, r, RoleRead)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: bearer(r), Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	w.WriteHeader(http.StatusNoContent)
}

package guard

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rscoord/rsc/commands"
)

// A --ha follower authenticates a request itself and forwards it to the
// leader without the caller's Authorization header: it sends instead a
// principal assertion, signed with the cluster's secret, that says who the
// caller proved to be (user, roles, scope), from which address, and binds
// the request it vouches for (method, request URI, a digest of the body) for
// a few seconds (ForwardAssertionTTL). The leader accepts a forwarded request
// only with a valid signature, an unexpired assertion and a request that is
// the one bound in; it then takes the principal and the client address from
// the assertion (failed logins are the follower's to count, against the real
// client). Whoever gets to read a forwarded request (a fake leader URL
// written into the lease hash) holds no password, no token, and an
// assertion good only for that very request, for seconds.

const (
	// headerAssertion carries the assertion.
	headerAssertion = "X-Rsc-Principal-Assertion"
	// assertionVersion is the payload's "v".
	assertionVersion = 1
)

// ForwardAssertionTTL is how long an assertion is valid after the follower
// signed it; the leader also refuses one that claims a longer life than
// ForwardAssertionTTL plus maxAssertionSkew (replicas' clocks must agree to
// within that; run NTP).
const (
	ForwardAssertionTTL = 5 * time.Second
	maxAssertionSkew    = 2 * time.Second
)

// assertion is the signed payload.
type assertion struct {
	V        int      `json:"v"`
	User     string   `json:"u,omitempty"` // "" for an anonymous request (public heartbeats)
	Roles    []string `json:"r,omitempty"`
	Prefixes []string `json:"p"`           // null: every prefix
	Groups   []string `json:"g,omitempty"` // null: every group
	Client   string   `json:"a"`
	Expires  int64    `json:"e"` // unix ms
	Method   string   `json:"m"`
	URI      string   `json:"t"` // the request URI the leader receives
	Body     string   `json:"b"` // hex SHA-256 of the body
	By       string   `json:"f"` // the forwarding replica's id, for logs
}

// errForwardRefused: a request that says it was forwarded but whose assertion
// is missing, forged, expired or for another request.
var errForwardRefused = &commands.Error{Kind: commands.KindForbidden, Code: "FORWARDED_REQUEST_REFUSED",
	Message: "A forwarded request must carry a valid, unexpired principal assertion for this very request (replicas need the same cluster secret and clocks within a second or two)"}

// assertionKey is the HMAC key of assertions: derived from the cluster
// secret, so that no assertion can pass for a bearer token or the other way.
func (a *authenticator) assertionKey() []byte {
	if a.cfg.ClusterSecret == "" {
		return nil
	}
	mac := hmac.New(sha256.New, []byte(a.cfg.ClusterSecret))
	mac.Write([]byte("rsc forwarded principal assertion v1"))
	return mac.Sum(nil)
}

// signAssertion encodes and signs as.
func (a *authenticator) signAssertion(as assertion) (string, error) {
	key := a.assertionKey()
	if key == nil {
		return "", errors.New("no cluster secret: cannot forward")
	}
	payload, err := json.Marshal(as)
	if err != nil {
		return "", err
	}
	p64 := b64(payload)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(p64))
	return p64 + "." + b64(mac.Sum(nil)), nil
}

// verifyAssertion checks the assertion of a forwarded request r whose body is
// body, and returns what it asserts.
func (a *authenticator) verifyAssertion(r *http.Request, body []byte) (*assertion, error) {
	key := a.assertionKey()
	tok := r.Header.Get(headerAssertion)
	p64, sig64, ok := strings.Cut(tok, ".")
	if key == nil || !ok {
		return nil, errors.New("no assertion, or no cluster secret to check one")
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(p64))
	sig, err := base64.RawURLEncoding.DecodeString(sig64)
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, errors.New("bad signature")
	}
	raw, err := base64.RawURLEncoding.DecodeString(p64)
	if err != nil {
		return nil, errors.New("bad encoding")
	}
	var as assertion
	if err := json.Unmarshal(raw, &as); err != nil || as.V != assertionVersion {
		return nil, errors.New("bad payload")
	}
	now := a.now()
	exp := time.UnixMilli(as.Expires)
	switch {
	case !now.Before(exp):
		return nil, errors.New("expired")
	case exp.Sub(now) > ForwardAssertionTTL+maxAssertionSkew:
		return nil, errors.New("expires too late")
	case as.Method != r.Method || as.URI != r.RequestURI:
		return nil, errors.New("signed for another request")
	case as.Body != bodyDigest(body):
		return nil, errors.New("signed for another body")
	}
	as.Roles = knownRoles(as.Roles)
	return &as, nil
}

func bodyDigest(body []byte) string {
	d := sha256.Sum256(body)
	return hex.EncodeToString(d[:])
}

// forwarded reports whether r says it was forwarded by a replica.
func forwarded(r *http.Request) bool {
	return r.Header.Get(headerAssertion) != "" || r.Header.Get(headerForwardedBy) != ""
}

// readBody reads r's body (bounded by the server's MaxBytesReader) and puts
// it back for the handler. Beyond the bound the error is the
// *http.MaxBytesError (the server's error table answers it 413).
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, commands.ErrInvalid.WithMessage("cannot read request body")
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	return data, nil
}

// acceptForwarded verifies a forwarded request on the replica it reached:
// false means it answered (413/400 for its body, 403 for its assertion).
// Otherwise it returns the principal asserted (nil for an anonymous
// request), and r's Request holds the client's address.
func (g *Guard) acceptForwarded(w http.ResponseWriter, r *http.Request) (*Principal, bool) {
	body, err := readBody(r)
	if err != nil {
		g.writeError(w, r, err)
		return nil, false
	}
	as, err := g.auth.verifyAssertion(r, body)
	if err != nil {
		if g.refusals.allow("forward|"+err.Error(), time.Now()) {
			log := g.logFor(r)
			log.Warn().Str("reason", err.Error()).Str("remote", r.RemoteAddr).Str("forwardedBy", r.Header.Get(headerForwardedBy)).
				Msg("forwarded request refused (logged at most once a second per reason)")
		}
		g.writeError(w, r, errForwardRefused)
		return nil, false
	}
	Of(r).Client = as.Client
	if as.User == "" {
		return nil, true
	}
	return &Principal{Username: as.User, Roles: as.Roles, Prefixes: as.Prefixes, Groups: as.Groups}, true
}

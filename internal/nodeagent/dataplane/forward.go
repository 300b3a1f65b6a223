package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// Forwarded identity: the aggregated API server (workbench-apiserver) calls the data plane
// over mutual TLS with its own client certificate and names the end user in these headers
// (the requestheader convention of kube-apiserver's front proxy). The data plane honours
// them ONLY from a client certificate that chains to Config.Forwarding.ClientCA and whose
// subject common name is one of Config.Forwarding.AllowedNames; the end user is then
// authorized with SubjectAccessReview exactly as a bearer-token caller is. Identity headers
// from any other peer are refused, never ignored.
const (
	HeaderRemoteUser        = "X-Remote-User"
	HeaderRemoteUID         = "X-Remote-Uid"
	HeaderRemoteGroup       = "X-Remote-Group"
	HeaderRemoteExtraPrefix = "X-Remote-Extra-"
)

// MaxForwardedGroups and MaxForwardedExtra bound the forwarded identity.
const (
	MaxForwardedGroups = 256
	MaxForwardedExtra  = 64
)

// Forwarding configures which client certificates may forward an end user's identity.
type Forwarding struct {
	// ClientCA verifies the forwarding client's certificate (nil: forwarding disabled).
	ClientCA *x509.CertPool
	// AllowedNames are the accepted subject common names (empty: any name the CA signed).
	AllowedNames []string
}

// LoadForwarding reads a PEM CA bundle; an empty path disables forwarding.
func LoadForwarding(caPEM []byte, names []string) (Forwarding, error) {
	if len(caPEM) == 0 {
		return Forwarding{}, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Forwarding{}, errors.New("data plane: the forwarding client CA bundle holds no certificate")
	}
	return Forwarding{ClientCA: pool, AllowedNames: slices.Clone(names)}, nil
}

func (f Forwarding) enabled() bool { return f.ClientCA != nil }

// applyTLS asks clients for a certificate (verified against ClientCA when given); bearer
// token callers present none and are unaffected.
func (f Forwarding) applyTLS(tc *tls.Config) {
	if !f.enabled() {
		return
	}
	tc.ClientCAs = f.ClientCA
	tc.ClientAuth = tls.VerifyClientCertIfGiven
}

// hasIdentityHeaders reports whether r carries any forwarded-identity header.
func hasIdentityHeaders(r *http.Request) bool {
	for k := range r.Header {
		ck := http.CanonicalHeaderKey(k)
		if ck == HeaderRemoteUser || ck == HeaderRemoteGroup || ck == HeaderRemoteUID || strings.HasPrefix(ck, HeaderRemoteExtraPrefix) {
			return true
		}
	}
	return false
}

// trustedForwarder reports whether the TLS peer is an allowed forwarding client.
func (f Forwarding) trustedForwarder(r *http.Request) (string, bool) {
	if !f.enabled() || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false
	}
	cn := r.TLS.VerifiedChains[0][0].Subject.CommonName
	if len(f.AllowedNames) > 0 && !slices.Contains(f.AllowedNames, cn) {
		return cn, false
	}
	return cn, true
}

// forwardedUser reads the end user from the identity headers.
func forwardedUser(r *http.Request) (*authenticationv1.UserInfo, error) {
	users := r.Header.Values(HeaderRemoteUser)
	if len(users) != 1 || users[0] == "" {
		return nil, fmt.Errorf("exactly one %s header is required, got %d", HeaderRemoteUser, len(users))
	}
	u := &authenticationv1.UserInfo{Username: users[0], Groups: r.Header.Values(HeaderRemoteGroup)}
	if uid := r.Header.Values(HeaderRemoteUID); len(uid) == 1 {
		u.UID = uid[0]
	}
	if len(u.Groups) > MaxForwardedGroups {
		return nil, fmt.Errorf("%d forwarded groups exceed %d", len(u.Groups), MaxForwardedGroups)
	}
	for k, v := range r.Header {
		ck := http.CanonicalHeaderKey(k)
		if !strings.HasPrefix(ck, HeaderRemoteExtraPrefix) {
			continue
		}
		key, err := url.PathUnescape(strings.ToLower(k[len(HeaderRemoteExtraPrefix):]))
		if err != nil || key == "" {
			return nil, fmt.Errorf("forwarded extra header %q is malformed", k)
		}
		if u.Extra == nil {
			u.Extra = map[string]authenticationv1.ExtraValue{}
		}
		if len(u.Extra) >= MaxForwardedExtra {
			return nil, fmt.Errorf("more than %d forwarded extra keys", MaxForwardedExtra)
		}
		u.Extra[key] = append(u.Extra[key], v...)
	}
	return u, nil
}

// SetForwardedUser writes u as identity headers on h (the aggregated server's side).
func SetForwardedUser(h http.Header, user, uid string, groups []string, extra map[string][]string) {
	for k := range h {
		ck := http.CanonicalHeaderKey(k)
		if ck == HeaderRemoteUser || ck == HeaderRemoteGroup || ck == HeaderRemoteUID || strings.HasPrefix(ck, HeaderRemoteExtraPrefix) {
			h.Del(k)
		}
	}
	h.Set(HeaderRemoteUser, user)
	if uid != "" {
		h.Set(HeaderRemoteUID, uid)
	}
	for _, g := range groups {
		h.Add(HeaderRemoteGroup, g)
	}
	for k, vs := range extra {
		for _, v := range vs {
			h.Add(HeaderRemoteExtraPrefix+url.PathEscape(k), v)
		}
	}
}

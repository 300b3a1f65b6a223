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

	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
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
		if ck == protocol.HeaderRemoteUser || ck == protocol.HeaderRemoteGroup || ck == protocol.HeaderRemoteUID || strings.HasPrefix(ck, protocol.HeaderRemoteExtraPrefix) {
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
	users := r.Header.Values(protocol.HeaderRemoteUser)
	if len(users) != 1 || users[0] == "" {
		return nil, fmt.Errorf("exactly one %s header is required, got %d", protocol.HeaderRemoteUser, len(users))
	}
	u := &authenticationv1.UserInfo{Username: users[0], Groups: r.Header.Values(protocol.HeaderRemoteGroup)}
	if uid := r.Header.Values(protocol.HeaderRemoteUID); len(uid) == 1 {
		u.UID = uid[0]
	}
	if len(u.Groups) > protocol.MaxForwardedGroups {
		return nil, fmt.Errorf("%d forwarded groups exceed %d", len(u.Groups), protocol.MaxForwardedGroups)
	}
	for k, v := range r.Header {
		ck := http.CanonicalHeaderKey(k)
		if !strings.HasPrefix(ck, protocol.HeaderRemoteExtraPrefix) {
			continue
		}
		key, err := url.PathUnescape(strings.ToLower(k[len(protocol.HeaderRemoteExtraPrefix):]))
		if err != nil || key == "" {
			return nil, fmt.Errorf("forwarded extra header %q is malformed", k)
		}
		if u.Extra == nil {
			u.Extra = map[string]authenticationv1.ExtraValue{}
		}
		if len(u.Extra) >= protocol.MaxForwardedExtra {
			return nil, fmt.Errorf("more than %d forwarded extra keys", protocol.MaxForwardedExtra)
		}
		u.Extra[key] = append(u.Extra[key], v...)
	}
	return u, nil
}

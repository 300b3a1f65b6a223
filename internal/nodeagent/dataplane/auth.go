package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// MaxTokenBytes bounds a bearer token; longer ones are refused without a
// TokenReview.
const MaxTokenBytes = 8 << 10

// DefaultAuthorizationCacheTTL is how long an allowed SubjectAccessReview is
// reused by default (denials are never cached).
const DefaultAuthorizationCacheTTL = 5 * time.Second

// ErrUnauthenticated is returned (wrapped) by an Authenticator for a token the
// API server does not accept; the data plane answers 401. Any other error is
// treated as "cannot decide now" (503).
var ErrUnauthenticated = errors.New("token not authenticated")

// Authenticator authenticates a bearer token.
type Authenticator interface {
	AuthenticateToken(ctx context.Context, token string) (*authenticationv1.UserInfo, error)
}

// Attributes name one virtual subresource access in group
// workbench.sensorium.dev, e.g. {create, ns, terminalsessions, input, name}.
type Attributes struct {
	// Group is the API group ("" means workbench.sensorium.dev).
	Group       string
	Verb        string
	Namespace   string
	Resource    string
	Subresource string
	Name        string
}

func (a Attributes) String() string {
	return fmt.Sprintf("%s %s/%s %s/%s", a.Verb, a.Resource, a.Subresource, a.Namespace, a.Name)
}

// Decision is an authorization answer; Reason is the authorizer's
// explanation, if any.
type Decision struct {
	Allowed bool
	Reason  string
}

// Authorizer decides whether user may perform a.
type Authorizer interface {
	Authorize(ctx context.Context, user *authenticationv1.UserInfo, a Attributes) (Decision, error)
}

// CacheOptions bound a decision cache.
type CacheOptions struct {
	// TTL of a positive result: 0 selects the default, negative disables the
	// cache, values above MaxCacheTTL are refused.
	TTL time.Duration
	// Size caps the entries: 0 selects MaxCacheEntries, values above it are
	// refused.
	Size int
	// Now is the clock (tests); defaults to time.Now.
	Now func() time.Time
}

func (o CacheOptions) build(defTTL time.Duration) (time.Duration, int, error) {
	ttl, size := o.TTL, o.Size
	switch {
	case ttl == 0:
		ttl = defTTL
	case ttl < 0:
		ttl = 0
	case ttl > MaxCacheTTL:
		return 0, 0, fmt.Errorf("cache TTL %s exceeds %s", ttl, MaxCacheTTL)
	}
	switch {
	case size == 0:
		size = MaxCacheEntries
	case size < 0 || size > MaxCacheEntries:
		return 0, 0, fmt.Errorf("cache size %d outside 1..%d", size, MaxCacheEntries)
	}
	return ttl, size, nil
}

// TokenReviewAuthenticator authenticates tokens with the API server's
// TokenReview (authentication.k8s.io/v1) and caches positive results in a
// bounded LRU for at most MaxCacheTTL. Negative results are not cached.
type TokenReviewAuthenticator struct {
	c         client.Client
	audiences []string
	cache     *ttlLRU[*authenticationv1.UserInfo]
}

// TokenReviewOptions configure a TokenReviewAuthenticator.
type TokenReviewOptions struct {
	// Audiences, when set, are requested in the TokenReview and at least one
	// must be confirmed by the API server.
	Audiences []string
	// Cache: default TTL MaxCacheTTL (10 s), default size MaxCacheEntries.
	Cache CacheOptions
}

// NewTokenReviewAuthenticator returns an Authenticator that creates
// TokenReviews through c (the node agent's identity needs create on
// tokenreviews).
func NewTokenReviewAuthenticator(c client.Client, o TokenReviewOptions) (*TokenReviewAuthenticator, error) {
	if c == nil {
		return nil, errors.New("token review authenticator: nil client")
	}
	ttl, size, err := o.Cache.build(MaxCacheTTL)
	if err != nil {
		return nil, fmt.Errorf("token review authenticator: %w", err)
	}
	return &TokenReviewAuthenticator{
		c:         c,
		audiences: slices.Clone(o.Audiences),
		cache:     newTTLLRU[*authenticationv1.UserInfo](size, ttl, o.Cache.Now),
	}, nil
}

// AuthenticateToken implements Authenticator. The returned UserInfo is shared
// with the cache and must not be modified.
func (a *TokenReviewAuthenticator) AuthenticateToken(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	if token == "" || len(token) > MaxTokenBytes {
		return nil, fmt.Errorf("token of %d bytes outside 1..%d: %w", len(token), MaxTokenBytes, ErrUnauthenticated)
	}
	key := keyOf("token", token)
	if u, ok := a.cache.get(key); ok {
		return u, nil
	}
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.audiences}}
	if err := a.c.Create(ctx, tr); err != nil {
		return nil, fmt.Errorf("creating TokenReview: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		// st.Error is the API server's reason; it stays in the log chain.
		return nil, fmt.Errorf("%w: %s", ErrUnauthenticated, st.Error)
	}
	if len(a.audiences) > 0 && !slices.ContainsFunc(st.Audiences, func(s string) bool { return slices.Contains(a.audiences, s) }) {
		return nil, fmt.Errorf("%w: token audiences %v do not include any of %v", ErrUnauthenticated, st.Audiences, a.audiences)
	}
	u := st.User.DeepCopy()
	a.cache.add(key, u)
	return u, nil
}

// SubjectAccessReviewAuthorizer authorizes with SubjectAccessReview
// (authorization.k8s.io/v1) on group workbench.sensorium.dev and caches
// allowed decisions briefly (denials are never cached).
type SubjectAccessReviewAuthorizer struct {
	c     client.Client
	cache *ttlLRU[Decision]
}

// NewSubjectAccessReviewAuthorizer returns an Authorizer that creates
// SubjectAccessReviews through c (the node agent's identity needs create on
// subjectaccessreviews). o.TTL 0 selects DefaultAuthorizationCacheTTL.
func NewSubjectAccessReviewAuthorizer(c client.Client, o CacheOptions) (*SubjectAccessReviewAuthorizer, error) {
	if c == nil {
		return nil, errors.New("subject access review authorizer: nil client")
	}
	ttl, size, err := o.build(DefaultAuthorizationCacheTTL)
	if err != nil {
		return nil, fmt.Errorf("subject access review authorizer: %w", err)
	}
	return &SubjectAccessReviewAuthorizer{c: c, cache: newTTLLRU[Decision](size, ttl, o.Now)}, nil
}

// Authorize implements Authorizer.
func (z *SubjectAccessReviewAuthorizer) Authorize(ctx context.Context, u *authenticationv1.UserInfo, a Attributes) (Decision, error) {
	key := decisionKey(u, a)
	if d, ok := z.cache.get(key); ok {
		return d, nil
	}
	var extra map[string]authorizationv1.ExtraValue
	if len(u.Extra) > 0 {
		extra = make(map[string]authorizationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			extra[k] = authorizationv1.ExtraValue(slices.Clone(v))
		}
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   u.Username,
		UID:    u.UID,
		Groups: slices.Clone(u.Groups),
		Extra:  extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace:   a.Namespace,
			Verb:        a.Verb,
			Group:       cmp.Or(a.Group, wbv1.GroupVersion.Group),
			Resource:    a.Resource,
			Subresource: a.Subresource,
			Name:        a.Name,
		},
	}}
	if err := z.c.Create(ctx, sar); err != nil {
		return Decision{}, fmt.Errorf("creating SubjectAccessReview for %q (%s): %w", u.Username, a, err)
	}
	d := Decision{Allowed: sar.Status.Allowed && !sar.Status.Denied, Reason: sar.Status.Reason}
	if d.Allowed {
		z.cache.add(key, d)
	}
	return d, nil
}

// decisionKey covers everything the SubjectAccessReview is computed from.
func decisionKey(u *authenticationv1.UserInfo, a Attributes) cacheKey {
	groups := slices.Clone(u.Groups)
	sort.Strings(groups)
	parts := []string{"sar", u.Username, u.UID, a.Group, a.Verb, a.Namespace, a.Resource, a.Subresource, a.Name,
		strconv.Itoa(len(groups))}
	parts = append(parts, groups...)
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k, strconv.Itoa(len(u.Extra[k])))
		parts = append(parts, u.Extra[k]...)
	}
	return keyOf(parts...)
}

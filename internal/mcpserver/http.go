package mcpserver

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbclient "sensorium.dev/workbench/pkg/client"
)

// NamespaceHeader selects the namespace of an HTTP caller's tool calls (default: the
// server's --namespace).
const NamespaceHeader = "X-Workbench-Namespace"

const tokenKey = "token"

// HTTPHandler serves the tools over streamable HTTP. Every request must carry the caller's
// Kubernetes bearer token: it is checked with a SelfSubjectReview made with that token
// (so it needs no privilege of the server's), and each tool call builds a rest.Config from
// base's address and CA with only that token. The server's own credentials in base are
// never used.
func HTTPHandler(base *rest.Config, defaultNamespace string) http.Handler {
	anon := rest.AnonymousClientConfig(base)
	server := New(func(ctx context.Context, req *mcp.CallToolRequest) (*wbclient.Client, error) {
		ti := req.Extra.TokenInfo
		if ti == nil {
			return nil, &wbclient.Error{Class: wbclient.ClassForbidden, Message: "no bearer token"}
		}
		token, _ := ti.Extra[tokenKey].(string)
		ns := defaultNamespace
		if h := req.Extra.Header.Get(NamespaceHeader); h != "" {
			if errs := validation.IsDNS1123Label(h); len(errs) > 0 {
				return nil, wbclient.Usage("%s: %v", NamespaceHeader, errs)
			}
			ns = h
		}
		return wbclient.New(wbclient.ForToken(anon, token), ns)
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute})
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		user, err := whoAmI(ctx, wbclient.ForToken(anon, token))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
		}
		// UserID binds an MCP session to one Kubernetes user: another user's token cannot
		// continue it. The token itself travels with each call (it may be rotated).
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour), Extra: map[string]any{tokenKey: token}}, nil
	}
	return auth.RequireBearerToken(verify, nil)(h)
}

// whoAmI asks the API server who cfg's token is (authentication.k8s.io SelfSubjectReview,
// allowed to every authenticated user).
func whoAmI(ctx context.Context, cfg *rest.Config) (string, error) {
	c, err := ctrlclient.New(cfg, ctrlclient.Options{Scheme: wbclient.Scheme})
	if err != nil {
		return "", err
	}
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, r); err != nil {
		return "", err
	}
	if r.Status.UserInfo.Username == "" {
		return "", fmt.Errorf("the API server did not authenticate the token")
	}
	return r.Status.UserInfo.Username, nil
}

package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kube-openapi/pkg/validation/spec"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	protocol "sensorium.dev/workbench/internal/dataplane/protocol/v2"
)

func statusCodeOf(t *testing.T, err error) (int32, string) {
	t.Helper()
	var se apierrors.APIStatus
	if err == nil {
		return 0, "no error"
	}
	if !errors.As(err, &se) {
		return 0, fmt.Sprintf("error %v (%T) carries no Status", err, err)
	}
	st := se.Status()
	return st.Code, protocol.CodeOfStatus(&st)
}

// TestStorageServesEverySubresource: the storage map has a parent (rest.Getter) for every
// kind whose subresources are served and a rest.Connecter for every subresource with exactly
// its methods; every parent names a Workbench kind the Forwarder can read, and every
// long-running subresource is one that is served (a rename on one side fails here).
func TestStorageServesEverySubresource(t *testing.T) {
	fwd, _ := newForwarder(t)
	m := storages(fwd)
	served := map[string]bool{}
	for _, s := range Subresources {
		st, ok := m[s.Resource+"/"+s.Name].(rest.Connecter)
		if !ok {
			t.Fatalf("%s/%s: no connecter in the storage map", s.Resource, s.Name)
		}
		if got := st.ConnectMethods(); !slices.Equal(got, s.Methods) {
			t.Errorf("%s/%s connects %v, want %v", s.Resource, s.Name, got, s.Methods)
		}
		if _, ok := m[s.Resource].(rest.Getter); !ok {
			t.Errorf("%s: no parent storage", s.Resource)
		}
		if _, ok := crdKinds[s.Resource]; !ok {
			t.Errorf("%s: the Forwarder reads no Workbench kind for it", s.Resource)
		}
		if _, ok := parentKinds[s.Resource]; !ok {
			t.Errorf("%s: no parent kind", s.Resource)
		}
		served[s.Name] = true
	}
	if len(m) != len(Subresources)+len(parentKinds) {
		t.Errorf("the storage map has %d entries, want %d subresources and %d parents", len(m), len(Subresources), len(parentKinds))
	}
	for _, lr := range LongRunningSubresources.List() {
		if !served[lr] {
			t.Errorf("long-running subresource %q is not served", lr)
		}
	}
	// Every parent is a kind of the served group version (discovery, the type converter).
	for r, k := range parentKinds {
		gvks, _, err := Scheme.ObjectKinds(k.newObj())
		if err != nil || len(gvks) == 0 {
			t.Errorf("parent %s: %v", r, err)
		}
	}
}

// TestParentGetReturnsOnlyMetadata: GET of a parent returns the Workbench object's name,
// namespace, uid and labels and nothing of its spec or status; a missing object is refused
// 404 not-found, an unserved resource too.
func TestParentGetReturnsOnlyMetadata(t *testing.T) {
	ctx := context.Background()
	fwd, _ := newForwarder(t)
	ns := fixture(t, "node-parent", "", nil, true)
	var art wbv1.Artifact
	must(t, env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "a"}, &art))
	p := storages(fwd)["artifacts"].(rest.Getter)
	obj, err := p.Get(callerContext(ns), "a", &metav1.GetOptions{})
	must(t, err)
	a, ok := obj.(*Artifact)
	if !ok {
		t.Fatalf("parent GET returned %T", obj)
	}
	if a.Name != "a" || a.Namespace != ns || a.UID != art.UID || a.Labels[wbv1.NodeLabel] != "node-parent" {
		t.Fatalf("parent metadata %+v, want the artifact's", a.ObjectMeta)
	}
	if a.ResourceVersion != "" || len(a.ManagedFields) != 0 || len(a.Annotations) != 0 || len(a.Finalizers) != 0 {
		t.Fatalf("parent GET returned more than the naming metadata: %+v", a.ObjectMeta)
	}
	// The type has no room for anything else: a field added to it would be served.
	if n := reflect.TypeOf(Artifact{}).NumField(); n != 2 {
		t.Fatalf("Artifact has %d fields, want TypeMeta and ObjectMeta only", n)
	}
	_, err = p.Get(callerContext(ns), "nope", &metav1.GetOptions{})
	if code, c := statusCodeOf(t, err); code != http.StatusNotFound || c != string(actuation.CodeNotFound) {
		t.Fatalf("GET of a missing parent: %d %q, want 404 %s", code, c, actuation.CodeNotFound)
	}
	_, err = fwd.metadata(ctx, "pods", ns, "a")
	if !apierrors.IsNotFound(err) {
		t.Fatalf("metadata of an unserved resource: %v, want not found", err)
	}
}

// TestHandlerRefusesWhatItCannotForward: a request without a namespace is refused 400; a
// node publishing a data plane endpoint that is not https, or a CA bundle with no
// certificate, is refused 503 node-unreachable before anything is sent.
func TestHandlerRefusesWhatItCannotForward(t *testing.T) {
	fwd, clientCA := newForwarder(t)
	_, err := fwd.Handler(genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"}), "artifacts", "a", "download")
	if code, _ := statusCodeOf(t, err); code != http.StatusBadRequest {
		t.Fatalf("no namespace: %d, want 400 (%v)", code, err)
	}
	n := startNode(t, clientCA)
	for name, c := range map[string]struct {
		endpoint string
		ca       []byte
	}{
		"node-plain-http": {"http://127.0.0.1:1", n.ca.CertPEM},
		"node-no-host":    {"https://", n.ca.CertPEM},
		"node-bad-ca":     {n.srv.URL, []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")},
	} {
		ns := fixture(t, name, c.endpoint, c.ca, true)
		_, err := fwd.Handler(callerContext(ns), "artifacts", "a", "download")
		if code, cd := statusCodeOf(t, err); code != http.StatusServiceUnavailable || cd != string(actuation.CodeNodeUnreachable) {
			t.Errorf("%s: %d %q (%v), want 503 %s", name, code, cd, err, actuation.CodeNodeUnreachable)
		}
	}
	select {
	case r := <-n.got:
		t.Fatalf("a refused request reached the node: %s", r.URL)
	default:
	}
}

// TestTransportsAreBounded: one transport per data plane endpoint and CA, reused; never
// more than MaxTransports cached however many nodes come and go.
func TestTransportsAreBounded(t *testing.T) {
	fwd, clientCA := newForwarder(t)
	n := startNode(t, clientCA)
	dp := &wbv1.DataPlane{Endpoint: n.srv.URL, CABundle: string(n.ca.CertPEM)}
	t1, err := fwd.transport(dp)
	must(t, err)
	t2, err := fwd.transport(&wbv1.DataPlane{Endpoint: n.srv.URL, CABundle: string(n.ca.CertPEM)})
	must(t, err)
	if t1 != t2 {
		t.Fatal("the same data plane got a second transport")
	}
	for i := range MaxTransports + 10 {
		if _, err := fwd.transport(&wbv1.DataPlane{Endpoint: fmt.Sprintf("https://node-%d.example:9443", i), CABundle: dp.CABundle}); err != nil {
			t.Fatal(err)
		}
	}
	fwd.mu.Lock()
	cached := len(fwd.transports)
	fwd.mu.Unlock()
	if cached > MaxTransports {
		t.Fatalf("%d transports cached, bound %d", cached, MaxTransports)
	}
}

// TestOpenAPIDefinesEveryParent: the OpenAPI definitions name every parent kind, with only
// apiVersion, kind and metadata (the type converter needs them; nothing else is served).
func TestOpenAPIDefinesEveryParent(t *testing.T) {
	defs := openAPIDefinitions(func(path string) spec.Ref { return spec.MustCreateRef("#/definitions/" + path) })
	for r, k := range parentKinds {
		typ := reflect.TypeOf(k.newObj()).Elem()
		d, ok := defs[typ.PkgPath()+"."+typ.Name()]
		if !ok {
			t.Errorf("%s: no OpenAPI definition for %s", r, typ.Name())
			continue
		}
		var props []string
		for p := range d.Schema.Properties {
			props = append(props, p)
		}
		slices.Sort(props)
		if !slices.Equal(props, []string{"apiVersion", "kind", "metadata"}) {
			t.Errorf("%s: properties %v", typ.Name(), props)
		}
		for _, dep := range d.Dependencies {
			if _, ok := defs[dep]; !ok {
				t.Errorf("%s: dependency %s has no definition", typ.Name(), dep)
			}
		}
	}
}

// TestNewRequiresTheNodeClientCertificate: the server does not start without its own client
// certificate for the node data planes, nor with one that does not load.
func TestNewRequiresTheNodeClientCertificate(t *testing.T) {
	if _, err := New(NewOptions(), env.Config); err == nil {
		t.Fatal("New without a node client certificate succeeded")
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "c.pem")
	must(t, os.WriteFile(bad, []byte("not a certificate"), 0o600))
	o := NewOptions()
	o.NodeClientCertFile, o.NodeClientKeyFile = bad, bad
	if _, err := New(o, env.Config); err == nil {
		t.Fatal("New with an unreadable node client certificate succeeded")
	}
}

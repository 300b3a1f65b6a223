package apiserver

import (
	"context"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Group and version served.
const (
	GroupName = "subresources.workbench.sensorium.dev"
	Version   = "v1alpha1"
)

// GroupVersion is the served group version.
var GroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// Scheme and Codecs of the server.
var (
	Scheme = runtime.NewScheme()
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	for _, gv := range []schema.GroupVersion{GroupVersion, {Group: GroupName, Version: runtime.APIVersionInternal}} {
		Scheme.AddKnownTypes(gv, &TerminalSession{}, &TerminalCommand{}, &Environment{}, &Artifact{})
	}
	metav1.AddToGroupVersion(Scheme, GroupVersion)
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
	utilruntime.Must(Scheme.SetVersionPriority(GroupVersion))
}

// Subresource is one served subresource: its parent resource, name and HTTP methods.
type Subresource struct {
	Resource, Name string
	Methods        []string
}

// Subresources is the served API (docs/api-subresources.md).
var Subresources = []Subresource{
	{"terminalsessions", "attach", []string{http.MethodGet}},
	{"terminalsessions", "screen", []string{http.MethodGet}},
	{"terminalsessions", "events", []string{http.MethodGet}},
	{"terminalsessions", "resize", []string{http.MethodPost}},
	{"terminalsessions", "signal", []string{http.MethodPost}},
	{"terminalcommands", "output", []string{http.MethodGet}},
	{"terminalcommands", "cancel", []string{http.MethodPost}},
	{"environments", "files", []string{http.MethodGet}},
	{"artifacts", "download", []string{http.MethodGet}},
	{"artifacts", "upload", []string{http.MethodPut, http.MethodPost}},
}

// parentStorage names a parent resource in discovery; it serves no verb of its own.
type parentStorage struct {
	newObj   func() runtime.Object
	singular string
}

var (
	_ rest.Storage              = parentStorage{}
	_ rest.Scoper               = parentStorage{}
	_ rest.SingularNameProvider = parentStorage{}
)

func (p parentStorage) New() runtime.Object         { return p.newObj() }
func (parentStorage) Destroy()                      {}
func (parentStorage) NamespaceScoped() bool         { return true }
func (p parentStorage) GetSingularName() string     { return p.singular }
func newParent(n func() runtime.Object, s string) parentStorage { return parentStorage{newObj: n, singular: s} }

var parents = map[string]parentStorage{
	"terminalsessions": newParent(func() runtime.Object { return &TerminalSession{} }, "terminalsession"),
	"terminalcommands": newParent(func() runtime.Object { return &TerminalCommand{} }, "terminalcommand"),
	"environments":     newParent(func() runtime.Object { return &Environment{} }, "environment"),
	"artifacts":        newParent(func() runtime.Object { return &Artifact{} }, "artifact"),
}

// connectStorage serves one subresource with rest.Connecter (as pods/exec and pods/attach
// do): Connect resolves the object's node and returns a handler forwarding to its data
// plane.
type connectStorage struct {
	parentStorage
	resource, sub string
	methods       []string
	fwd           *Forwarder
}

var _ rest.Connecter = (*connectStorage)(nil)

func (c *connectStorage) ConnectMethods() []string { return c.methods }

func (c *connectStorage) NewConnectOptions() (runtime.Object, bool, string) { return nil, false, "" }

func (c *connectStorage) Connect(ctx context.Context, name string, _ runtime.Object, _ rest.Responder) (http.Handler, error) {
	return c.fwd.Handler(ctx, c.resource, name, c.sub)
}

// storages builds the version's storage map.
func storages(fwd *Forwarder) map[string]rest.Storage {
	m := map[string]rest.Storage{}
	for r, p := range parents {
		m[r] = p
	}
	for _, s := range Subresources {
		m[s.Resource+"/"+s.Name] = &connectStorage{parentStorage: parents[s.Resource], resource: s.Resource, sub: s.Name, methods: s.Methods, fwd: fwd}
	}
	return m
}

package apiserver

import (
	"context"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
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
		Scheme.AddKnownTypes(gv, &TerminalSession{}, &TerminalCommand{}, &Environment{}, &Artifact{}, &TerminalView{})
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
	// the latest-state screen of a TerminalView (docs/shared-views.md); long-running here,
	// but kube-apiserver cuts it at its --request-timeout: clients reconnect (cursor-free).
	{"terminalviews", "stream", []string{http.MethodGet}},
}

// parentStorage names a parent resource in discovery. Its only verb, get, returns the
// Workbench object's metadata (name, namespace, uid, labels: what names the subresources'
// parent), so discovery advertises the resource and `kubectl api-resources` lists it.
type parentStorage struct {
	newObj   func() runtime.Object
	singular string
	resource string
	fwd      *Forwarder
}

var _ rest.Getter = parentStorage{}

func (p parentStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	meta, err := p.fwd.metadata(ctx, p.resource, ns, name)
	if err != nil {
		return nil, err
	}
	obj := p.newObj()
	m := obj.(metav1.Object)
	m.SetName(meta.Name)
	m.SetNamespace(meta.Namespace)
	m.SetUID(meta.UID)
	m.SetLabels(meta.Labels)
	m.SetCreationTimestamp(meta.CreationTimestamp)
	return obj, nil
}

var (
	_ rest.Storage              = parentStorage{}
	_ rest.Scoper               = parentStorage{}
	_ rest.SingularNameProvider = parentStorage{}
)

func (p parentStorage) New() runtime.Object     { return p.newObj() }
func (parentStorage) Destroy()                  {}
func (parentStorage) NamespaceScoped() bool     { return true }
func (p parentStorage) GetSingularName() string { return p.singular }

var parentKinds = map[string]struct {
	newObj   func() runtime.Object
	singular string
}{
	"terminalsessions": {func() runtime.Object { return &TerminalSession{} }, "terminalsession"},
	"terminalcommands": {func() runtime.Object { return &TerminalCommand{} }, "terminalcommand"},
	"environments":     {func() runtime.Object { return &Environment{} }, "environment"},
	"artifacts":        {func() runtime.Object { return &Artifact{} }, "artifact"},
	"terminalviews":    {func() runtime.Object { return &TerminalView{} }, "terminalview"},
}

// connectStorage serves one subresource with rest.Connecter (as pods/exec and pods/attach
// do): Connect resolves the object's node and returns a handler forwarding to its data
// plane.
type connectStorage struct {
	// newObj names the parent kind; the storage must not embed parentStorage, whose Get
	// would take the subresource's GET route.
	newObj        func() runtime.Object
	resource, sub string
	methods       []string
	fwd           *Forwarder
}

var (
	_ rest.Connecter = (*connectStorage)(nil)
	_ rest.Scoper    = (*connectStorage)(nil)
)

func (c *connectStorage) New() runtime.Object   { return c.newObj() }
func (c *connectStorage) Destroy()              {}
func (c *connectStorage) NamespaceScoped() bool { return true }

func (c *connectStorage) ConnectMethods() []string { return c.methods }

func (c *connectStorage) NewConnectOptions() (runtime.Object, bool, string) { return nil, false, "" }

func (c *connectStorage) Connect(ctx context.Context, name string, _ runtime.Object, _ rest.Responder) (http.Handler, error) {
	return c.fwd.Handler(ctx, c.resource, name, c.sub)
}

// storages builds the version's storage map.
func storages(fwd *Forwarder) map[string]rest.Storage {
	m := map[string]rest.Storage{}
	parents := map[string]parentStorage{}
	for r, k := range parentKinds {
		parents[r] = parentStorage{newObj: k.newObj, singular: k.singular, resource: r, fwd: fwd}
		m[r] = parents[r]
	}
	for _, s := range Subresources {
		m[s.Resource+"/"+s.Name] = &connectStorage{newObj: parents[s.Resource].newObj, resource: s.Resource, sub: s.Name, methods: s.Methods, fwd: fwd}
	}
	return m
}

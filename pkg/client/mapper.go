package client

import (
	"net/http"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// clusterScopedKinds are the workbench kinds whose CRD has scope Cluster; every other
// workbench kind is namespaced. TestStaticMapperMatchesCRDs checks this against the CRDs.
var clusterScopedKinds = map[string]bool{
	"ActionSigner": true, "BackendCapability": true, "BundleSigner": true,
	"ImageManifest": true, "WorkbenchNode": true, "WorkbenchPolicy": true,
}

// staticWorkbenchMapper maps every workbench kind of Scheme to its resource without asking
// the API server: the kinds, their plurals and scopes are fixed by this build (the CRDs
// are generated from the same types), so discovery would only repeat what is compiled in.
func staticWorkbenchMapper() meta.RESTMapper {
	gv := wbv1.GroupVersion
	m := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
	for kind := range Scheme.KnownTypes(gv) {
		if len(kind) > 4 && kind[len(kind)-4:] == "List" {
			continue
		}
		scope := meta.RESTScopeNamespace
		if clusterScopedKinds[kind] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gv.WithKind(kind), scope)
	}
	return m
}

// newMapper is the client's REST mapper: the workbench kinds from the build (no request),
// then, only for a kind outside the group (RBAC bindings when the CLI names approvers), the
// lazy discovery mapper, which asks the API server on its first use and not before.
func newMapper(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
	dynamic, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, err
	}
	return meta.FirstHitRESTMapper{MultiRESTMapper: meta.MultiRESTMapper{staticWorkbenchMapper(), dynamic}}, nil
}

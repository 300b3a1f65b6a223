package client

import (
	"net/http"
	"strings"

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
		if strings.HasSuffix(kind, "List") {
			continue
		}
		scope := meta.RESTScopeNamespace
		if clusterScopedKinds[kind] {
			scope = meta.RESTScopeRoot
		}
		lower := strings.ToLower(kind)
		m.AddSpecific(gv.WithKind(kind), gv.WithResource(plural(lower)), gv.WithResource(lower), scope)
	}
	return m
}

// plural is the resource name the CRD generator gives a lower-cased kind: "es" after s, x,
// ch and sh, "ies" for a consonant before a final y, else "s".
func plural(kind string) string {
	switch {
	case strings.HasSuffix(kind, "s"), strings.HasSuffix(kind, "x"), strings.HasSuffix(kind, "ch"), strings.HasSuffix(kind, "sh"):
		return kind + "es"
	case strings.HasSuffix(kind, "y") && len(kind) > 1 && !strings.ContainsRune("aeiou", rune(kind[len(kind)-2])):
		return kind[:len(kind)-1] + "ies"
	}
	return kind + "s"
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

package apiserver

import (
	"reflect"

	extopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// openAPIDefinitions describes the parent kinds (which carry only metadata) and, for the
// types they reference, reuses the generated definitions of the metav1 types shipped with
// apiextensions-apiserver. The API server needs them for its type converter; no object of
// these kinds is ever served.
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := extopenapi.GetOpenAPIDefinitions(ref)
	objectMeta := metav1.ObjectMeta{}.OpenAPIModelName()
	for _, obj := range []any{TerminalSession{}, TerminalCommand{}, Environment{}, Artifact{}, TerminalView{}} {
		t := reflect.TypeOf(obj)
		defs[t.PkgPath()+"."+t.Name()] = common.OpenAPIDefinition{
			Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Description: t.Name() + " names the parent of the " + t.Name() + " subresources; the object itself lives in workbench.sensorium.dev.",
				Type:        []string{"object"},
				Properties: map[string]spec.Schema{
					"apiVersion": {SchemaProps: spec.SchemaProps{Type: []string{"string"}}},
					"kind":       {SchemaProps: spec.SchemaProps{Type: []string{"string"}}},
					"metadata":   {SchemaProps: spec.SchemaProps{Default: map[string]any{}, Ref: ref(objectMeta)}},
				},
			}},
			Dependencies: []string{objectMeta},
		}
	}
	return defs
}

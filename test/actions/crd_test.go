package actions

import (
	"context"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestCRDShapes stores one object of each new kind and reads the catalog back with its
// signature outside spec; a policy not named default is refused by the CRD.
func TestCRDShapes(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	cat := &wbv1.ActionCatalog{
		ObjectMeta: metav1.ObjectMeta{Name: "shape", Namespace: ns},
		Spec: wbv1.ActionCatalogSpec{Actions: []wbv1.ActionDeclaration{{
			ID: "node.echo", Class: wbv1.ActionClassReadOnlySpawn,
			Executable:            wbv1.ActionExecutable{Kind: wbv1.ExecutableBinary, Path: "/bin/echo"},
			ArgvTemplate:          []string{"echo", "{{msg}}"},
			ParametersSchema:      &apiextensionsv1.JSON{Raw: []byte(`{"type":"object","properties":{"msg":{"type":"string"}}}`)},
			DefaultTimeoutSeconds: 10, MaxTimeoutSeconds: 60,
			OutputLimits:   wbv1.OutputLimits{StdoutBytes: 4096, StderrBytes: 4096},
			ResultContract: wbv1.ResultContract{StdoutFormat: wbv1.StdoutText},
		}}},
	}
	if err := env.Client.Create(ctx, cat); err != nil {
		t.Fatalf("creating catalog: %v", err)
	}
	var got wbv1.ActionCatalog
	if err := env.Client.Get(ctx, keyOf(cat), &got); err != nil {
		t.Fatal(err)
	}
	if string(got.Spec.Actions[0].ParametersSchema.Raw) == "" {
		t.Fatalf("parametersSchema was pruned")
	}
	bad := &wbv1.WorkbenchPolicy{ObjectMeta: metav1.ObjectMeta{Name: "other"}}
	if err := env.Client.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "policy-invalid") {
		t.Fatalf("a policy not named default: got %v, want a policy-invalid refusal", err)
	}
}

package main

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"
)

// generated is a webhook manifest as controller-gen writes it: one mutating and two
// validating webhooks.
var generated = "---\n" + webhookConfiguration("Mutating", "mutating",
	webhookYAML("/mutate-workbench-sensorium-dev-v1alpha1-consentgrant", "mconsentgrant", "consentgrants", "CREATE")) +
	"---\n" + webhookConfiguration("Validating", "validating",
	webhookYAML("/validate-workbench-sensorium-dev-v1alpha1-environment", "venvironment", "environments", "CREATE", "UPDATE"),
	webhookYAML("/validate-workbench-sensorium-dev-v1alpha1-wait", "vwait", "waits", "CREATE"))

// webhookConfiguration is a <Kind>WebhookConfiguration named <name>-webhook-configuration
// holding webhooks.
func webhookConfiguration(kind, name string, webhooks ...string) string {
	return "apiVersion: admissionregistration.k8s.io/v1\nkind: " + kind + "WebhookConfiguration\nmetadata:\n  name: " + name +
		"-webhook-configuration\nwebhooks:\n" + strings.Join(webhooks, "")
}

// webhookYAML is one webhook entry as controller-gen writes it: a service at path, the
// name <short>.workbench.sensorium.dev, one resource of the API group and its operations.
func webhookYAML(path, short, resource string, operations ...string) string {
	ops := ""
	for _, op := range operations {
		ops += "    - " + op + "\n"
	}
	return `- admissionReviewVersions:
  - v1
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: ` + path + `
  failurePolicy: Fail
  name: ` + short + `.workbench.sensorium.dev
  rules:
  - apiGroups:
    - workbench.sensorium.dev
    apiVersions:
    - v1alpha1
    operations:
` + ops + `    resources:
    - ` + resource + `
  sideEffects: None
`
}

const testCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func TestRenderReplacesServiceWithURLAndKeepsPath(t *testing.T) {
	out, err := render([]byte(generated), "https://127.0.0.1:9443", []byte(testCA), "workbench-")
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	docs := strings.Split(strings.TrimPrefix(string(out), "---\n"), "---\n")
	if len(docs) != 2 {
		t.Fatalf("got %d documents, want 2:\n%s", len(docs), out)
	}

	var m admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &m); err != nil {
		t.Fatalf("decoding mutating configuration: %v", err)
	}
	if m.Name != "workbench-mutating-webhook-configuration" {
		t.Errorf("mutating name = %q", m.Name)
	}
	checkClientConfig(t, m.Webhooks[0].ClientConfig, "https://127.0.0.1:9443/mutate-workbench-sensorium-dev-v1alpha1-consentgrant")
	if m.Webhooks[0].FailurePolicy == nil || *m.Webhooks[0].FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy not kept: %v", m.Webhooks[0].FailurePolicy)
	}

	var v admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &v); err != nil {
		t.Fatalf("decoding validating configuration: %v", err)
	}
	if v.Name != "workbench-validating-webhook-configuration" {
		t.Errorf("validating name = %q", v.Name)
	}
	if len(v.Webhooks) != 2 {
		t.Fatalf("got %d validating webhooks, want 2", len(v.Webhooks))
	}
	checkClientConfig(t, v.Webhooks[0].ClientConfig, "https://127.0.0.1:9443/validate-workbench-sensorium-dev-v1alpha1-environment")
	checkClientConfig(t, v.Webhooks[1].ClientConfig, "https://127.0.0.1:9443/validate-workbench-sensorium-dev-v1alpha1-wait")
	if got := v.Webhooks[0].Rules[0].Resources; len(got) != 1 || got[0] != "environments" {
		t.Errorf("rules not kept: %v", got)
	}
}

func checkClientConfig(t *testing.T, cc admissionregistrationv1.WebhookClientConfig, wantURL string) {
	t.Helper()
	if cc.Service != nil {
		t.Errorf("service still set: %+v", cc.Service)
	}
	if cc.URL == nil || *cc.URL != wantURL {
		t.Errorf("url = %v, want %s", cc.URL, wantURL)
	}
	if string(cc.CABundle) != testCA {
		t.Errorf("caBundle = %q", cc.CABundle)
	}
}

func TestRenderRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		src, url, ca string
		want         string
	}{
		"no webhooks":       {src: "", url: "https://127.0.0.1:9443", ca: testCA, want: "no webhooks found"},
		"other kind":        {src: "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n", url: "https://127.0.0.1:9443", ca: testCA, want: `unexpected document of kind "Service"`},
		"plain http":        {src: generated, url: "http://127.0.0.1:9443", ca: testCA, want: "must be https"},
		"url with path":     {src: generated, url: "https://127.0.0.1:9443/x", ca: testCA, want: "without a path"},
		"not a certificate": {src: generated, url: "https://127.0.0.1:9443", ca: "junk", want: "no PEM certificate"},
		"url already set": {
			src:  strings.Replace(generated, "    service:\n      name: webhook-service\n      namespace: system\n      path: /mutate-workbench-sensorium-dev-v1alpha1-consentgrant", "    url: https://example.invalid/x", 1),
			url:  "https://127.0.0.1:9443",
			ca:   testCA,
			want: "has no service to replace",
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := render([]byte(tc.src), tc.url, []byte(tc.ca), "workbench-")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sensorium.dev/workbench/internal/test/testkit"
)

// TestCertRotationIssuesAndInjects runs the manager's certificate rotation against a real
// API server: it must write a CA and a serving certificate for the webhook Service into
// the (empty) Secret, report ready once the files are in the cert dir (written here as the
// kubelet would from the mounted Secret) and the caBundle is injected, and put the CA back
// when someone overwrites the caBundle.
func TestCertRotationIssuesAndInjects(t *testing.T) {
	cfg := startAPIServer(t)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const ns, secretName, svc, whName = "wb-certs", "wb-webhook-server-cert", "wb-webhook-service", "wb-validating"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns}}))
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Ignore
	must(t, c.Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: whName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "v.example.sensorium.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc, Path: ptr.To("/validate")},
			},
			SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"example.sensorium.dev"}, APIVersions: []string{"v1"}, Resources: []string{"things"}},
			}},
		}},
	}))

	certDir := t.TempDir()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	rot := certRotation{enabled: true, namespace: ns, secretName: secretName, serviceName: svc,
		validatingWebhooks: whName, caName: "test-ca", caOrganization: "test"}
	ready, err := rot.start(mgr, certDir)
	if err != nil {
		t.Fatal(err)
	}
	runManager(ctx, t, mgr)

	// The kubelet's part: project the Secret's keys into the cert dir once they exist.
	sec := waitSecret(ctx, t, c, ns, secretName, func(s *corev1.Secret) bool { return len(s.Data["tls.crt"]) > 0 })
	for k, v := range sec.Data {
		must(t, os.WriteFile(filepath.Join(certDir, k), v, 0o600))
	}
	select {
	case <-ready:
	case <-ctx.Done():
		t.Fatalf("the rotator never reported ready: %v", ctx.Err())
	}

	caPEM := sec.Data["ca.crt"]
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.crt in the Secret is not a PEM certificate")
	}
	block, _ := pem.Decode(sec.Data["tls.crt"])
	if block == nil {
		t.Fatalf("tls.crt in the Secret is not PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("serving certificate does not verify for %s against the Secret's CA: %v", name, err)
		}
	}

	wh := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	must(t, c.Get(ctx, client.ObjectKey{Name: whName}, wh))
	if !bytes.Equal(wh.Webhooks[0].ClientConfig.CABundle, caPEM) {
		t.Fatalf("caBundle of %s is not the Secret's CA", whName)
	}

	// Someone overwrites the caBundle: the rotator's watch puts the CA back.
	wh.Webhooks[0].ClientConfig.CABundle = []byte("not a CA")
	must(t, c.Update(ctx, wh))
	w, err := c.Watch(ctx, &admissionregistrationv1.ValidatingWebhookConfigurationList{},
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", whName)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watch error: %v", ev.Object)
		}
		if got, ok := ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok &&
			bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, caPEM) {
			return
		}
	}
	t.Fatalf("the caBundle was not re-injected before the watch ended: %v", ctx.Err())
}

func waitSecret(ctx context.Context, t *testing.T, c client.WithWatch, ns, name string, ok func(*corev1.Secret) bool) *corev1.Secret {
	t.Helper()
	w, err := c.Watch(ctx, &corev1.SecretList{}, client.InNamespace(ns),
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", name)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if s, isSecret := ev.Object.(*corev1.Secret); isSecret && ok(s) {
			return s
		}
	}
	t.Fatalf("Secret %s/%s never got its certificate: %v", ns, name, ctx.Err())
	return nil
}

var must = testkit.Must

// TestAPIServerCertRotation: the manager's rotators for workbench-apiserver (as
// config/default runs them) write its serving certificate for the Service and inject that
// CA into the APIService's caBundle, and write its client certificate for the node data
// planes (common name workbench-apiserver, client auth only) with its own CA.
func TestAPIServerCertRotation(t *testing.T) {
	cfg := startAPIServer(t)
	scheme := runtime.NewScheme()
	must(t, clientgoscheme.AddToScheme(scheme))
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const ns, serving, nodeClient, svc, apiService = "wb-apiserver-certs", "wb-apiserver-serving", "wb-apiserver-node-client", "wb-apiserver", "v1alpha1.subresources.workbench.sensorium.dev"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	for _, n := range []string{serving, nodeClient} {
		must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}}))
	}
	as := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": apiService},
		"spec": map[string]any{"group": "subresources.workbench.sensorium.dev", "version": "v1alpha1",
			"service":              map[string]any{"namespace": ns, "name": svc, "port": int64(443)},
			"groupPriorityMinimum": int64(100), "versionPriority": int64(15)},
	}}
	must(t, c.Create(ctx, as))

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	must(t, err)
	servingDir, clientDir := t.TempDir(), t.TempDir()
	for _, r := range []struct {
		rot certRotation
		dir string
	}{
		{certRotation{enabled: true, namespace: ns, secretName: serving, serviceName: svc, apiServices: apiService,
			caName: "apiserver-ca", caOrganization: "test", controllerName: "apiserver-serving-cert-rotator"}, servingDir},
		{certRotation{enabled: true, namespace: ns, secretName: nodeClient, serviceName: "workbench-apiserver",
			caName: "node-client-ca", caOrganization: "test", controllerName: "apiserver-node-client-cert-rotator", clientAuth: true}, clientDir},
	} {
		_, err := r.rot.start(mgr, r.dir)
		must(t, err)
	}
	runManager(ctx, t, mgr)

	leafOf := func(sec *corev1.Secret) (*x509.Certificate, *x509.CertPool) {
		t.Helper()
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(sec.Data["ca.crt"]) {
			t.Fatalf("ca.crt of %s is not a PEM certificate", sec.Name)
		}
		block, _ := pem.Decode(sec.Data["tls.crt"])
		if block == nil {
			t.Fatalf("tls.crt of %s is not PEM", sec.Name)
		}
		leaf, err := x509.ParseCertificate(block.Bytes)
		must(t, err)
		return leaf, pool
	}
	hasCert := func(s *corev1.Secret) bool { return len(s.Data["tls.crt"]) > 0 }
	servSec := waitSecret(ctx, t, c, ns, serving, hasCert)
	clientSec := waitSecret(ctx, t, c, ns, nodeClient, hasCert)
	// The kubelet's part: project the Secrets where the manager mounts them.
	for dir, sec := range map[string]*corev1.Secret{servingDir: servSec, clientDir: clientSec} {
		for k, v := range sec.Data {
			must(t, os.WriteFile(filepath.Join(dir, k), v, 0o600))
		}
	}
	leaf, pool := leafOf(servSec)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: svc + "." + ns + ".svc", Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("the serving certificate does not verify for the Service: %v", err)
	}
	cl, clPool := leafOf(clientSec)
	if cl.Subject.CommonName != "workbench-apiserver" {
		t.Fatalf("client certificate common name %q", cl.Subject.CommonName)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: clPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("the client certificate does not verify for client auth against its CA: %v", err)
	}
	if _, err := cl.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Fatal("the client certificate verifies against the serving CA: the two must be separate authorities")
	}

	// The APIService's caBundle becomes the serving CA.
	w, err := c.Watch(ctx, &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIServiceList"}},
		client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", apiService)})
	must(t, err)
	defer w.Stop()
	want := base64.StdEncoding.EncodeToString(servSec.Data["ca.crt"])
	for ev := range w.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok {
			if got, _, _ := unstructured.NestedString(u.Object, "spec", "caBundle"); got == want {
				return
			}
		}
	}
	t.Fatalf("the APIService's caBundle was not injected before the watch ended: %v", ctx.Err())
}

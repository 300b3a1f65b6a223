package envtest

import (
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// FrontProxyClientName is the common name of kube-apiserver's front-proxy client
// certificate (--requestheader-allowed-names).
const FrontProxyClientName = "front-proxy-client"

// Aggregation is the front-proxy (requestheader) setup of a control plane that can serve
// aggregated APIs, and its audit log.
type Aggregation struct {
	Dir string
	// FrontProxyCA signs kube-apiserver's proxy client certificate; aggregated servers
	// trust it (read from kube-system/extension-apiserver-authentication).
	FrontProxyCA *CA
	// AuditLog is kube-apiserver's audit log (JSON lines) under AuditPolicy.
	AuditLog string
}

// AuditPolicy logs every request on the Workbench groups at level Metadata.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
rules:
- level: Metadata
  resources:
  - group: workbench.sensorium.dev
  - group: subresources.workbench.sensorium.dev
- level: None
`

// configureAggregation writes the front-proxy PKI and the audit policy, and sets
// kube-apiserver's requestheader, proxy-client, aggregator-routing and audit flags.
func configureAggregation(te *envtest.Environment, requestTimeout time.Duration) (*Aggregation, error) {
	dir, err := os.MkdirTemp("", "wb-aggregation-")
	if err != nil {
		return nil, err
	}
	ca, err := NewCA("workbench-test-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "front-proxy-ca.crt")
	if err := os.WriteFile(caFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	certFile, keyFile, err := ca.IssueFiles(dir, "front-proxy-client", FrontProxyClientName)
	if err != nil {
		return nil, err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(AuditPolicy), 0o600); err != nil {
		return nil, err
	}
	a := &Aggregation{Dir: dir, FrontProxyCA: ca, AuditLog: filepath.Join(dir, "audit.log")}
	args := te.ControlPlane.GetAPIServer().Configure()
	for k, v := range map[string]string{
		"requestheader-client-ca-file":       caFile,
		"requestheader-allowed-names":        FrontProxyClientName,
		"requestheader-username-headers":     "X-Remote-User",
		"requestheader-uid-headers":          "X-Remote-Uid",
		"requestheader-group-headers":        "X-Remote-Group",
		"requestheader-extra-headers-prefix": "X-Remote-Extra-",
		"proxy-client-cert-file":             certFile,
		"proxy-client-key-file":              keyFile,
		"enable-aggregator-routing":          "true",
		"audit-policy-file":                  policy,
		"audit-log-path":                     a.AuditLog,
		"audit-log-mode":                     "blocking",
	} {
		args.Set(k, v)
	}
	if requestTimeout > 0 {
		args.Set("request-timeout", requestTimeout.String())
	}
	return a, nil
}

func (a *Aggregation) cleanup() {
	if a != nil {
		_ = os.RemoveAll(a.Dir)
	}
}

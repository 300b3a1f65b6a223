package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/cert-controller/pkg/rotator"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// certRotation is the manager's own serving-certificate authority for clusters without
// cert-manager: it keeps a CA and a serving certificate for the webhook Service in a
// Secret (which the Deployment mounts at --webhook-cert-dir), renews them before they
// expire, and writes the CA into the caBundle of the named webhook configurations (and
// APIServices, for an aggregated API server).
type certRotation struct {
	enabled                bool
	namespace              string
	secretName             string
	serviceName            string
	validatingWebhooks     string
	mutatingWebhooks       string
	apiServices            string
	caName, caOrganization string
	// controllerName names the rotator's controller ("" = cert-controller's default); each
	// rotator of one manager needs its own.
	controllerName string
	// clientAuth issues a client certificate with common name serviceName (the aggregated
	// API server's identity towards node data planes) instead of a serving certificate.
	clientAuth bool
}

// webhookInfos lists the objects whose caBundle the rotator injects.
func (c certRotation) webhookInfos() []rotator.WebhookInfo {
	var out []rotator.WebhookInfo
	add := func(list string, t rotator.WebhookType) {
		for _, n := range strings.Split(list, ",") {
			if n = strings.TrimSpace(n); n != "" {
				out = append(out, rotator.WebhookInfo{Name: n, Type: t})
			}
		}
	}
	add(c.validatingWebhooks, rotator.Validating)
	add(c.mutatingWebhooks, rotator.Mutating)
	add(c.apiServices, rotator.APIService)
	return out
}

// start adds the rotator to mgr. ready is closed once the certificate files are in certDir
// and every caBundle is injected; only then may the webhook server start (it reads the
// files when it starts).
func (c certRotation) start(mgr ctrl.Manager, certDir string) (ready <-chan struct{}, err error) {
	if c.namespace == "" {
		return nil, errors.New("certificate rotation needs --cert-namespace (or the POD_NAMESPACE environment variable)")
	}
	if c.secretName == "" || c.serviceName == "" {
		return nil, errors.New("certificate rotation needs --cert-secret-name and --cert-service-name")
	}
	if certDir == "" {
		return nil, errors.New("certificate rotation needs --webhook-cert-dir (where the Secret is mounted)")
	}
	isReady := make(chan struct{})
	dns := fmt.Sprintf("%s.%s.svc", c.serviceName, c.namespace)
	extra := []string{dns + ".cluster.local", c.serviceName + "." + c.namespace, c.serviceName}
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	if c.clientAuth {
		dns, extra, usages = c.serviceName, nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	err = rotator.AddRotator(mgr, &rotator.CertRotator{
		SecretKey:      types.NamespacedName{Namespace: c.namespace, Name: c.secretName},
		CertDir:        certDir,
		CAName:         c.caName,
		CAOrganization: c.caOrganization,
		DNSName:        dns,
		ExtraDNSNames:  extra,
		ExtKeyUsages:   &usages,
		IsReady:        isReady,
		Webhooks:       c.webhookInfos(),
		FieldOwner:     "workbench-manager",
		ControllerName: c.controllerName,
		// Every replica serves webhooks, so every replica needs the files; the Secret is
		// the single source, written with optimistic concurrency.
		RequireLeaderElection: false,
	})
	if err != nil {
		return nil, fmt.Errorf("adding the certificate rotator for Secret %s/%s: %w", c.namespace, c.secretName, err)
	}
	return isReady, nil
}

// gatedChecker reports "not ready" until set is called with the real checker.
type gatedChecker struct {
	reason string
	check  atomic.Pointer[healthz.Checker]
}

func (g *gatedChecker) set(c healthz.Checker) { g.check.Store(&c) }

func (g *gatedChecker) Check(req *http.Request) error {
	c := g.check.Load()
	if c == nil {
		return errors.New(g.reason)
	}
	return (*c)(req)
}

// afterReady runs fn once ready is closed, unless ctx ends first.
func afterReady(ctx context.Context, ready <-chan struct{}, fn func()) {
	go func() {
		select {
		case <-ready:
			fn()
		case <-ctx.Done():
		}
	}()
}

package main

import (
	"crypto/tls"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// metricsOptions serves the manager's /metrics over HTTPS with authentication and
// authorization, as the kubebuilder scaffold does: every request's bearer token is checked
// with a TokenReview (401 when it does not authenticate) and its right to get the
// non-resource URL /metrics with a SubjectAccessReview (403 without it; the
// workbench-metrics-reader ClusterRole grants it). Without a certificate directory the
// server uses a self-signed certificate. The manager's own RBAC for the reviews is
// config/rbac/metrics_auth_role.yaml.
func metricsOptions(bindAddress string, tlsOpts []func(*tls.Config)) metricsserver.Options {
	return metricsserver.Options{
		BindAddress:    bindAddress,
		SecureServing:  true,
		FilterProvider: filters.WithAuthenticationAndAuthorization,
		TLSOpts:        tlsOpts,
	}
}

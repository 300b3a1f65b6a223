// Command manager runs the Sensorium Workbench cluster controllers and admission webhooks.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/webhooks"
)

func main() {
	var metricsAddr, probeAddr, webhookHost, certDir string
	var webhookPort int
	var leaderElect, enableHTTP2 bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "Address the HTTPS metrics endpoint binds to (authenticated and authorized: callers need the workbench-metrics-reader ClusterRole); 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health probes bind to.")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the webhook server binds to.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the webhook server listens on.")
	flag.StringVar(&certDir, "webhook-cert-dir", "", "Directory with the webhook serving tls.crt and tls.key.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Enable leader election so only one manager is active.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false, "Serve HTTP/2 on the webhook and metrics servers.")
	certs := certRotation{caName: "workbench-ca", caOrganization: "sensorium-workbench"}
	flag.BoolVar(&certs.enabled, "cert-rotation", false, "Generate, rotate and inject the webhook serving certificate (no cert-manager needed): keeps it in --cert-secret-name, mounted at --webhook-cert-dir.")
	flag.StringVar(&certs.namespace, "cert-namespace", os.Getenv("POD_NAMESPACE"), "Namespace of the certificate Secret and the webhook Service (default: $POD_NAMESPACE).")
	flag.StringVar(&certs.secretName, "cert-secret-name", "workbench-webhook-server-cert", "Secret holding the CA and the serving certificate.")
	flag.StringVar(&certs.serviceName, "cert-service-name", "workbench-webhook-service", "Service the serving certificate is issued for (<name>.<namespace>.svc).")
	flag.StringVar(&certs.validatingWebhooks, "cert-validating-webhooks", "workbench-validating-webhook-configuration", "Comma-separated ValidatingWebhookConfigurations whose caBundle is injected.")
	flag.StringVar(&certs.mutatingWebhooks, "cert-mutating-webhooks", "workbench-mutating-webhook-configuration", "Comma-separated MutatingWebhookConfigurations whose caBundle is injected.")
	flag.StringVar(&certs.apiServices, "cert-apiservices", "", "Comma-separated APIServices whose caBundle is injected (an aggregated API server serving with the same certificate).")
	// workbench-apiserver's certificates (config/default): its serving certificate, whose CA
	// goes into its APIService's caBundle, and its client certificate towards the node data
	// planes, whose CA the node agents trust for identity forwarding. Each Secret is mounted
	// into the manager too (the rotator checks that the files arrive).
	apiserverCerts := certRotation{caName: "workbench-apiserver-ca", caOrganization: "sensorium-workbench", controllerName: "apiserver-serving-cert-rotator"}
	var apiserverCertDir, nodeClientCertDir string
	flag.StringVar(&apiserverCerts.secretName, "apiserver-cert-secret-name", "", "With --cert-rotation: Secret holding workbench-apiserver's CA and serving certificate (empty: not managed).")
	flag.StringVar(&apiserverCerts.serviceName, "apiserver-cert-service-name", "workbench-apiserver", "Service of workbench-apiserver (<name>.<namespace>.svc).")
	flag.StringVar(&apiserverCerts.apiServices, "apiserver-cert-apiservices", "v1alpha1.subresources.workbench.sensorium.dev", "Comma-separated APIServices whose caBundle is workbench-apiserver's serving CA.")
	flag.StringVar(&apiserverCertDir, "apiserver-cert-dir", "", "Where the manager mounts --apiserver-cert-secret-name.")
	nodeClientCerts := certRotation{caName: "workbench-apiserver-node-client-ca", caOrganization: "sensorium-workbench", controllerName: "apiserver-node-client-cert-rotator", clientAuth: true}
	flag.StringVar(&nodeClientCerts.secretName, "apiserver-node-client-secret-name", "", "With --cert-rotation: Secret holding workbench-apiserver's client certificate for node data planes and its CA (empty: not managed).")
	flag.StringVar(&nodeClientCerts.serviceName, "apiserver-node-client-name", "workbench-apiserver", "Common name of that client certificate (the node agents' dataPlaneForwardingNames).")
	flag.StringVar(&nodeClientCertDir, "apiserver-node-client-cert-dir", "", "Where the manager mounts --apiserver-node-client-secret-name.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(wbv1.AddToScheme(scheme))

	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  controllers.CacheOptions(),
		Metrics:                metricsOptions(metricsAddr, tlsOpts),
		WebhookServer:          webhooks.Instrument(webhook.NewServer(webhook.Options{Host: webhookHost, Port: webhookPort, CertDir: certDir, TLSOpts: tlsOpts})),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "manager.workbench.sensorium.dev",
	})
	if err != nil {
		log.Error(err, "Creating manager")
		os.Exit(1)
	}
	if err := controllers.SetupWithManager(mgr, controllers.Config{}); err != nil {
		log.Error(err, "Setting up controllers")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Adding health check")
		os.Exit(1)
	}
	if !certs.enabled {
		if err := webhooks.SetupWithManager(mgr); err != nil {
			log.Error(err, "Setting up webhooks")
			os.Exit(1)
		}
		if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
			log.Error(err, "Adding ready check")
			os.Exit(1)
		}
	} else {
		// The webhook server reads its certificate files when it starts: it is added to the
		// manager (by the first GetWebhookServer) only once the rotator has written the
		// Secret, the kubelet has mounted it and every caBundle is injected.
		ready, err := certs.start(mgr, certDir)
		if err != nil {
			log.Error(err, "Setting up certificate rotation")
			os.Exit(1)
		}
		for _, extra := range []struct {
			rot certRotation
			dir string
		}{{apiserverCerts, apiserverCertDir}, {nodeClientCerts, nodeClientCertDir}} {
			if extra.rot.secretName == "" {
				continue
			}
			extra.rot.enabled, extra.rot.namespace = true, certs.namespace
			if _, err := extra.rot.start(mgr, extra.dir); err != nil {
				log.Error(err, "Setting up certificate rotation", "secret", extra.rot.secretName)
				os.Exit(1)
			}
		}
		gate := &gatedChecker{reason: "webhook serving certificate not ready yet"}
		if err := mgr.AddReadyzCheck("readyz", gate.Check); err != nil {
			log.Error(err, "Adding ready check")
			os.Exit(1)
		}
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
		afterReady(ctx, ready, func() {
			log.Info("Webhook serving certificate ready; starting the webhook server", "secret", certs.namespace+"/"+certs.secretName)
			if err := webhooks.SetupWithManager(mgr); err != nil {
				cancel(fmt.Errorf("setting up webhooks: %w", err))
				return
			}
			gate.set(mgr.GetWebhookServer().StartedChecker())
		})
	}
	log.Info("Starting manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Running manager")
		os.Exit(1)
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		log.Error(cause, "Manager stopped")
		os.Exit(1)
	}
}

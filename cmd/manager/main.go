// Command manager runs the Sensorium Workbench cluster controllers and admission webhooks.
package main

import (
	"crypto/tls"
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/webhooks"
)

func main() {
	var metricsAddr, probeAddr, webhookHost, certDir string
	var webhookPort int
	var leaderElect, enableHTTP2 bool
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "Address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health probes bind to.")
	flag.StringVar(&webhookHost, "webhook-host", "", "Address the webhook server binds to.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the webhook server listens on.")
	flag.StringVar(&certDir, "webhook-cert-dir", "", "Directory with the webhook serving tls.crt and tls.key.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Enable leader election so only one manager is active.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false, "Serve HTTP/2 on the webhook and metrics servers.")
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
		Metrics:                metricsserver.Options{BindAddress: metricsAddr, TLSOpts: tlsOpts},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: webhookHost, Port: webhookPort, CertDir: certDir, TLSOpts: tlsOpts}),
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
	if err := webhooks.SetupWithManager(mgr); err != nil {
		log.Error(err, "Setting up webhooks")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Adding health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		log.Error(err, "Adding ready check")
		os.Exit(1)
	}
	log.Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Running manager")
		os.Exit(1)
	}
}

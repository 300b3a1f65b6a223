// Command workbench-apiserver is the aggregated API server of group
// subresources.workbench.sensorium.dev (see internal/apiserver and docs/api-subresources.md).
package main

import (
	"os"

	"github.com/spf13/pflag"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/logs"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"sensorium.dev/workbench/internal/apiserver"
)

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()
	o := apiserver.NewOptions()
	fs := pflag.NewFlagSet("workbench-apiserver", pflag.ExitOnError)
	o.AddFlags(fs)
	_ = fs.Parse(os.Args[1:])
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("workbench-apiserver")
	restCfg, err := o.RestConfig()
	if err != nil {
		log.Error(err, "Reaching kube-apiserver")
		os.Exit(1)
	}
	srv, err := apiserver.New(o, restCfg)
	if err != nil {
		log.Error(err, "Configuring the server")
		os.Exit(1)
	}
	ctx := ctrl.LoggerInto(genericapiserver.SetupSignalContext(), log)
	if err := srv.Run(ctx); err != nil {
		log.Error(err, "Serving")
		os.Exit(1)
	}
}

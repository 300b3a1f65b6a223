// Command node-agent runs the Sensorium Workbench node agent: one per node, privileged, it
// reconciles the environments, sessions, commands, waits, probes, patches and artifacts
// bound to its node.
package main

import (
	"flag"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"sensorium.dev/workbench/internal/backends/guestenv"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/platform/procexec"
)

func main() {
	// The sandbox helper and the guest PTY relay re-execute this binary; they must run
	// before anything else.
	procexec.MaybeRunHelper()
	guestenv.MaybeRunRelay()

	var configPath string
	flag.StringVar(&configPath, "config", "/etc/workbench/node-agent.yaml", "Path to the node agent's configuration file.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("node-agent")

	if err := prepareHost(); err != nil {
		log.Error(err, "Becoming a child subreaper")
		os.Exit(1)
	}
	cfg, err := agent.LoadConfig(configPath)
	if err != nil {
		log.Error(err, "Loading configuration")
		os.Exit(1)
	}
	a, err := agent.New(cfg, agent.Options{})
	if err != nil {
		log.Error(err, "Starting node agent")
		os.Exit(1)
	}
	ctx := ctrl.LoggerInto(ctrl.SetupSignalHandler(), log)
	if err := a.Run(ctx, ctrl.GetConfigOrDie()); err != nil {
		log.Error(err, "Running node agent")
		os.Exit(1)
	}
}

// Package cli is the command tree of kubectl-workbench. Every command is a thin layer over
// pkg/client: it parses flags, calls one client function and prints the result (a table
// for people, -o json|yaml for programs).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/rest"

	"sensorium.dev/workbench/internal/termsafe"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// Options are the global flags and streams of one invocation.
type Options struct {
	// started is set once arguments and flags have parsed: an error before that is usage.
	started bool
	Config  *genericclioptions.ConfigFlags
	Output  string
	IO      genericiooptions.IOStreams
}

// Client builds the workbench client for the flags' kubeconfig, context, namespace and
// impersonation.
func (o *Options) Client() (*wbclient.Client, error) {
	cfg, err := o.Config.ToRESTConfig()
	if err != nil {
		return nil, wbclient.Usage("loading kubeconfig: %v", err)
	}
	ns, _, err := o.Config.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return nil, wbclient.Usage("resolving namespace: %v", err)
	}
	return wbclient.New(cfg, ns)
}

// withClient is the RunE of a command that needs the workbench client: it builds the
// client (a usage error when the kubeconfig cannot be loaded) before run sees the args.
func (o *Options) withClient(run func(cmd *cobra.Command, args []string, cl *wbclient.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		cl, err := o.Client()
		if err != nil {
			return err
		}
		return run(cmd, args, cl)
	}
}

// structured reports whether -o asks for json or yaml.
func (o *Options) structured() bool { return o.Output == "json" || o.Output == "yaml" }

// NewCommand is the root command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	return newCommand(&Options{IO: streams})
}

func newCommand(o *Options) *cobra.Command {
	streams := o.IO
	*o = Options{Config: genericclioptions.NewConfigFlags(true), IO: streams}
	root := &cobra.Command{
		Use:           "kubectl-workbench",
		Short:         "Run, attach, read, wait and approve on Sensorium Workbench",
		Long:          "kubectl workbench drives Sensorium Workbench through the Kubernetes API as your identity: environments, structured commands with live output, sessions, files, patches, waits, probes and consent.\nExit codes per refusal class: docs/cli.md.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			o.started = true
			switch o.Output {
			case "", "json", "yaml", "name":
				return nil
			}
			return wbclient.Usage("-o must be json, yaml or name, not %q", o.Output)
		},
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	o.Config.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVarP(&o.Output, "output", "o", "", "output format: json, yaml or name")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return wbclient.Usage("%v", err) })
	root.AddCommand(envCommand(o), runCommand(o), attachCommand(o), screenCommand(o), eventsCommand(o),
		waitCommand(o), probeCommand(o), lsCommand(o), catCommand(o), cpCommand(o), patchCommand(o),
		consentCommand(o), cancelCommand(o), mcpCommand(o), viewCommand(o),
		catalogCommand(o), actionCommand(o), recordCommand(o), skillCommand(o), exportCommand(o))
	return root
}

// Main runs the command line and returns the process exit code.
func Main(args []string, streams genericiooptions.IOStreams) int {
	return MainWrapped(args, streams, nil)
}

// MainWrapped is Main with wrap applied to the REST config every client of the invocation
// is built from (nil: none); tests count the requests of one invocation through it.
func MainWrapped(args []string, streams genericiooptions.IOStreams, wrap func(*rest.Config) *rest.Config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := &Options{IO: streams}
	root := newCommand(o)
	o.Config.WrapConfigFn = wrap
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var we *wbclient.Error
	if !o.started && !errors.As(err, &we) {
		err = wbclient.Usage("%v", err) // cobra's argument and command checks
	}
	code := wbclient.ExitCodeOf(err)
	var exit *wbclient.ExitError
	var probe *wbclient.ProbeFailed
	if errors.As(err, &exit) || errors.As(err, &probe) {
		return code // the command's own exit status: nothing to add
	}
	printError(streams.ErrOut, err)
	return code
}

// printError writes "error: ..." with the refusal code and class.
func printError(w io.Writer, err error) {
	var e *wbclient.Error
	if errors.As(err, &e) {
		if e.Code != "" {
			fmt.Fprintf(w, "error [%s, %s]: %s\n", termsafe.Line(e.Code), e.Class, termsafe.Text(e.Error()))
			return
		}
		fmt.Fprintf(w, "error [%s]: %s\n", e.Class, termsafe.Text(e.Error()))
		return
	}
	fmt.Fprintf(w, "error: %s\n", termsafe.Text(err.Error()))
}

// print writes v as -o asks (json or yaml), else calls human. Nothing it prints can drive
// the reader's terminal: JSON goes through termsafe.JSON (the encoder leaves C1 controls and
// format characters raw), YAML refuses control characters itself, and human printers write
// through termsafe.Writer.
func (o *Options) print(v any, human func(io.Writer)) error {
	switch o.Output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = o.IO.Out.Write(append(termsafe.JSON(b), '\n'))
		return err
	case "yaml":
		b, err := marshalYAML(v)
		if err != nil {
			return err
		}
		_, err = o.IO.Out.Write(b)
		return err
	}
	human(termsafe.Writer{W: o.IO.Out})
	return nil
}

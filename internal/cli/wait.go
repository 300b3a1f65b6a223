package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func conditionFlags(c *cobra.Command, r *wbclient.ConditionRequest, timeoutHelp string) {
	f := c.Flags()
	f.StringVar(&r.Kind, "for", "", "condition kind (terminal.command.done, terminal.output.matches, terminal.quiescent, file.exists, environment.ready, …)")
	f.StringVar(&r.Session, "session", "", "scope: a TerminalSession")
	f.StringVar(&r.Command, "command", "", "scope: a TerminalCommand")
	f.StringVarP(&r.Environment, "environment", "e", "", "scope: an Environment (with --root and --path: a file)")
	f.StringVar(&r.Root, "root", "", "file scope: root")
	f.StringVar(&r.Path, "path", "", "file scope: path beneath the root")
	f.StringVar(&r.Artifact, "artifact", "", "scope: an Artifact")
	f.StringVar(&r.Operation, "operation", "", "scope: Kind/name of a Wait, Probe, FilePatch or TerminalCommand")
	f.StringVar(&r.Pattern, "pattern", "", "RE2 pattern (terminal.output.matches)")
	f.Int64Var(&r.SinceSeq, "since", 0, "event cursor (terminal.output.*)")
	f.Int32Var(&r.QuietSeconds, "quiet", 0, "silence window in seconds (terminal.quiescent, terminal.no-progress)")
	f.StringVar(&r.Digest, "digest", "", "previous digest (file.digest.changed)")
	f.Int32Var(&r.TimeoutSeconds, "timeout", 0, timeoutHelp)
	_ = c.MarkFlagRequired("for")
}

func waitCommand(o *Options) *cobra.Command {
	var r wbclient.ConditionRequest
	c := &cobra.Command{
		Use:     "wait --for KIND SCOPE",
		Short:   "Wait for a condition (a Wait object): exit 0 when satisfied, 124 when its deadline passes",
		Example: "  kubectl workbench wait --for terminal.command.done --command run-make-x7k2\n  kubectl workbench wait --for terminal.output.matches --session s --pattern 'PASS|FAIL' --timeout 600",
		Args:    cobra.NoArgs,
		RunE: o.withClient(func(cmd *cobra.Command, _ []string, cl *wbclient.Client) error {
			w, werr := cl.Wait(cmd.Context(), r)
			if w == nil {
				return werr
			}
			if err := o.printObject(w, func(out io.Writer) {
				fmt.Fprintf(out, "wait/%s %s", w.Name, wbv1.WaitSummary(w).Phase)
				if len(w.Status.Diagnostics) > 0 {
					fmt.Fprintf(out, " %v", w.Status.Diagnostics)
				}
				fmt.Fprintln(out)
			}); err != nil {
				return err
			}
			return werr
		}),
	}
	conditionFlags(c, &r, "deadline in seconds (default 60, at most 3600)")
	return c
}

func probeCommand(o *Options) *cobra.Command {
	var r wbclient.ConditionRequest
	c := &cobra.Command{
		Use:   "probe --for KIND SCOPE",
		Short: "Check a condition now (a Probe object): exit 0 on Pass, 1 on Fail",
		Args:  cobra.NoArgs,
		RunE: o.withClient(func(cmd *cobra.Command, _ []string, cl *wbclient.Client) error {
			p, perr := cl.Probe(cmd.Context(), r)
			if p == nil {
				return perr
			}
			if err := o.printObject(p, func(out io.Writer) {
				fmt.Fprintf(out, "probe/%s %s %v\n", p.Name, wbv1.ProbeSummary(p).Phase, p.Status.Diagnostics)
			}); err != nil {
				return err
			}
			return perr
		}),
	}
	conditionFlags(c, &r, "probe timeout in seconds")
	return c
}

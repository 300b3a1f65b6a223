package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/termsafe"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// MaxCapturedOutput bounds the output `run -o json|yaml` holds in memory.
const MaxCapturedOutput = 4 << 20

func runCommand(o *Options) *cobra.Command {
	var req wbclient.RunRequest
	var detach bool
	c := &cobra.Command{
		Use:   "run [-e ENV] [-p PROFILE] -- ARGV...",
		Short: "Run a structured command, stream its output and exit with its exit code",
		Long: `run creates a TerminalCommand (argv as data, never a shell string), streams its combined
output from the first byte, and exits with the command's exit code. argv[0] may be the base name
of a CommandProfile's executable: it is replaced by the executable and the profile's fixed
arguments are inserted when argv does not start with them. When the argv needs an operator's
consent, run prints the request and who may approve it, and waits.`,
		Example: "  kubectl workbench run -e demo -- git status\n  kubectl workbench run -p git-diff -- /usr/bin/git --no-pager diff",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Argv = args
			cl, err := o.Client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if detach {
				tc, err := cl.PrepareCommand(ctx, req)
				if err != nil {
					return err
				}
				if err := cl.CreateCommand(ctx, tc); err != nil {
					return err
				}
				return o.printObject(tc, func(w io.Writer) { fmt.Fprintf(w, "terminalcommand/%s created\n", tc.Name) })
			}
			opts := wbclient.RunOptions{
				OnConsent: func(t *wbv1.TerminalCommand, info *wbclient.ConsentInfo) { printConsentWait(o.IO.ErrOut, t, info) },
				OnOutputUnavailable: func(err error) {
					fmt.Fprintf(o.IO.ErrOut, "warning: the output of this command cannot be read: %v\n", err)
				},
			}
			var captured *wbclient.CappedBuffer
			if o.structured() {
				captured = &wbclient.CappedBuffer{Cap: MaxCapturedOutput}
				opts.Output = captured
			} else {
				opts.Output = o.IO.Out
				opts.OnCreated = func(t *wbv1.TerminalCommand) {
					fmt.Fprintf(o.IO.ErrOut, "terminalcommand/%s created (correlation id %s)\n", t.Name, termsafe.Line(t.Labels[wbv1.CorrelationLabel]))
				}
			}
			final, runErr := cl.Run(ctx, req, opts)
			if final == nil {
				return runErr
			}
			if o.structured() {
				if err := o.print(wbclient.ResultOf(final, captured), nil); err != nil {
					return err
				}
			}
			return runErr
		},
	}
	c.Flags().StringVarP(&req.Environment, "environment", "e", "", "environment (default: the only Ready one)")
	c.Flags().StringVarP(&req.Profile, "profile", "p", "", "CommandProfile (default: the one whose executable matches argv[0])")
	c.Flags().StringVar(&req.Session, "session", "", "TerminalSession (default: an open structured session of the environment, created if needed)")
	c.Flags().StringVar(&req.Root, "root", "", "root of the working directory")
	c.Flags().StringVar(&req.Path, "cwd", "", "working directory beneath the root")
	c.Flags().Int64Var(&req.TimeoutSeconds, "timeout", 0, "timeout in seconds (at most the profile's maximum)")
	c.Flags().Int64Var(&req.OutputBytes, "output-bytes", 0, "output cap in bytes (at most the profile's maximum)")
	c.Flags().StringVar(&req.CorrelationID, "correlation-id", "", "correlation id labelling the command, its consent request, waits and probes (generated when empty)")
	c.Flags().BoolVar(&detach, "detach", false, "create the command and return without waiting")
	return c
}

// printConsentWait tells the caller what is waiting and who may approve it. Every string
// from the request goes through termsafe: argv atom by atom, the rest as one line.
func printConsentWait(w io.Writer, t *wbv1.TerminalCommand, info *wbclient.ConsentInfo) {
	if info == nil {
		fmt.Fprintf(w, "terminalcommand/%s is waiting for an operator's consent\n", termsafe.Line(t.Name))
		return
	}
	fmt.Fprintf(w, "terminalcommand/%s needs an operator's consent: consentrequest/%s\n", termsafe.Line(t.Name), termsafe.Line(info.Request))
	fmt.Fprintf(w, "  argv:    %s\n", termsafe.Argv(info.Argv))
	if info.Reason != "" {
		fmt.Fprintf(w, "  reason:  %s\n", termsafe.Line(info.Reason))
	}
	if len(info.Options) > 0 {
		fmt.Fprintf(w, "  options: %s\n", termsafe.Line(strings.Join(info.Options, ", ")))
	}
	if info.ExpiresAt != "" {
		fmt.Fprintf(w, "  expires: %s (then denied)\n", termsafe.Line(info.ExpiresAt))
	}
	if len(info.Approvers) > 0 {
		fmt.Fprintf(w, "  may approve (bound to %s): %s\n", wbclient.OperatorRole, termsafe.Line(strings.Join(info.Approvers, ", ")))
	} else {
		fmt.Fprintf(w, "  may approve: any subject bound to the ClusterRole %s\n", wbclient.OperatorRole)
	}
	fmt.Fprintf(w, "  an operator runs: %s\n", termsafe.Line(info.ApproveCommand))
	fmt.Fprintln(w, "waiting…")
}

func cancelCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "cancel COMMAND", Short: "Cancel a running command", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			if err := cl.CancelCommand(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(o.IO.Out, "terminalcommand/%s cancelled\n", args[0])
			return nil
		}),
	}
}

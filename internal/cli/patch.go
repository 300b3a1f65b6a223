package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func patchCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "patch", Short: "Propose, approve and reject file patches"}
	var req wbclient.PatchRequest
	var file string
	propose := &cobra.Command{
		Use: "propose -e ENV --root ROOT -f DIFF|-", Short: "Propose a unified diff (a FilePatch awaiting approval)", Args: cobra.NoArgs,
		RunE: o.withClient(func(cmd *cobra.Command, _ []string, cl *wbclient.Client) error {
			var b []byte
			var err error
			if file == "-" {
				b, err = io.ReadAll(io.LimitReader(o.IO.In, 1<<20+1))
			} else {
				b, err = os.ReadFile(file)
			}
			if err != nil {
				return wbclient.Usage("reading the diff: %v", err)
			}
			req.Diff = string(b)
			p, err := cl.ProposePatch(cmd.Context(), req)
			if err != nil {
				return err
			}
			return o.printObject(p, func(w io.Writer) { fmt.Fprintf(w, "filepatch/%s proposed (awaiting approval)\n", p.Name) })
		}),
	}
	propose.Flags().StringVarP(&req.Environment, "environment", "e", "", "environment")
	propose.Flags().StringVar(&req.Root, "root", "", "root the diff's paths are relative to")
	propose.Flags().StringVarP(&file, "filename", "f", "-", "the diff (- for stdin)")
	propose.Flags().BoolVar(&req.AllowCreate, "allow-create", false, "allow the patch to create files")
	propose.Flags().StringVar(&req.Name, "name", "", "FilePatch name (default: generated)")
	c.AddCommand(propose, decidePatchCommand(o, true), decidePatchCommand(o, false))
	return c
}

func decidePatchCommand(o *Options, approve bool) *cobra.Command {
	verb, short := "reject", "Reject a proposed patch"
	if approve {
		verb, short = "approve", "Approve a proposed patch and wait until the node applied it"
	}
	var wait bool
	c := &cobra.Command{
		Use: verb + " PATCH", Short: short, Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			p, perr := cl.DecidePatch(cmd.Context(), args[0], approve, wait)
			if p == nil {
				return perr
			}
			if err := o.printObject(p, func(w io.Writer) {
				fmt.Fprintf(w, "filepatch/%s %s", p.Name, p.Spec.Approval)
				if s, _ := wbv1.SummaryOf(p); len(p.Status.Conditions) > 0 {
					fmt.Fprintf(w, " (%s, %d files changed)", s.Phase, len(p.Status.ChangedFiles))
				}
				fmt.Fprintln(w)
			}); err != nil {
				return err
			}
			return perr
		}),
	}
	c.Flags().BoolVar(&wait, "wait", true, "wait for the node's outcome")
	return c
}

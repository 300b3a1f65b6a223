package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/termsafe"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func consentCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "consent", Short: "List, approve, deny and revoke consent requests"}
	var all bool
	ls := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List consent requests (pending ones unless --all)", Args: cobra.NoArgs,
		RunE: o.withClient(func(cmd *cobra.Command, _ []string, cl *wbclient.Client) error {
			items, err := cl.ListConsentRequests(cmd.Context(), !all)
			if err != nil {
				return err
			}
			return o.print(listOf(items, func(r *wbv1.ConsentRequest) runtime.Object { return r }), func(w io.Writer) {
				rows := [][]string{}
				for _, s := range cl.ConsentSummaries(items) {
					rows = append(rows, []string{s.Request, s.Command, s.Decision, termsafe.Argv(s.Argv), orNone(s.ExpiresAt)})
				}
				table(w, "NAME\tCOMMAND\tDECISION\tARGV\tEXPIRES", rows)
			})
		}),
	}
	ls.Flags().BoolVar(&all, "all", false, "include decided requests")
	c.AddCommand(ls, decideCommand(o, "approve"), decideCommand(o, "deny"), revokeCommand(o))
	return c
}

func decideCommand(o *Options, verb string) *cobra.Command {
	d := wbclient.DecideRequest{}
	short := "Deny a consent request"
	if verb == "approve" {
		short = "Approve a consent request (allow-once unless --scope)"
	}
	c := &cobra.Command{
		Use: verb + " REQUEST", Short: short, Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			d.Request = args[0]
			if verb == "deny" {
				d.Scope = string(wbv1.ConsentDeny)
			}
			g, err := cl.Decide(cmd.Context(), d)
			if err != nil {
				return err
			}
			return o.printObject(g, func(w io.Writer) {
				fmt.Fprintf(w, "consentgrant/%s created: %s on consentrequest/%s\n", g.Name, g.Spec.Scope, d.Request)
			})
		}),
	}
	c.Flags().StringVar(&d.Reason, "reason", "", "a note for the record")
	if verb == "approve" {
		c.Flags().StringVar(&d.Scope, "scope", string(wbv1.ConsentAllowOnce), "allow-once, remember-exact-argv, remember-argv-prefix, or add-to-catalog (C7 action runs: propose an unsigned catalog)")
		c.Flags().Int32Var(&d.PrefixLength, "prefix-length", 0, "remember-argv-prefix: leading argv atoms remembered")
		c.Flags().StringArrayVar(&d.Variable, "variable-prefix", nil, "remember-argv-prefix: admitted prefixes of the atoms after it")
	}
	return c
}

func revokeCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "revoke GRANT|REQUEST", Short: "Revoke a consent grant (named directly or by its request)", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			g, err := cl.Revoke(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.printObject(g, func(w io.Writer) { fmt.Fprintf(w, "consentgrant/%s revoked\n", g.Name) })
		}),
	}
}

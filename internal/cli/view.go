package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/termsafe"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// viewCommand shares a session's visible screen read-only (docs/shared-views.md).
func viewCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "view", Short: "Share a session's screen read-only: create a view, grant, revoke, watch"}
	c.AddCommand(viewCreateCommand(o), viewGrantCommand(o), viewRevokeCommand(o), viewWatchCommand(o))
	return c
}

func viewCreateCommand(o *Options) *cobra.Command {
	r := wbclient.ViewRequest{}
	c := &cobra.Command{
		Use: "create NAME --session SESSION --ceiling CLASS", Short: "Publish a session's visible screen as a TerminalView", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if r.Session == "" || r.Ceiling == "" {
				return wbclient.Usage("--session and --ceiling are required")
			}
			cl, err := o.Client()
			if err != nil {
				return err
			}
			r.Name = args[0]
			v, err := cl.CreateView(cmd.Context(), r)
			if err != nil {
				return err
			}
			return o.printObject(v, func(w io.Writer) {
				ctx := "?"
				if b := v.Spec.Binding; b != nil {
					ctx = fmt.Sprintf("%s (environment %s generation %d)", b.OperationalContext, b.EnvironmentRef, b.SourceGeneration)
				}
				fmt.Fprintf(w, "terminalview/%s created: session %s, context %s\n", v.Name, r.Session, ctx)
			})
		},
	}
	c.Flags().StringVar(&r.Session, "session", "", "the TerminalSession whose screen is published")
	c.Flags().StringVar(&r.Ceiling, "ceiling", "", "classification ceiling: experimental, research, test, production or critical")
	c.Flags().Int32Var(&r.FreshnessSeconds, "freshness", 0, "heartbeat interval in seconds when the screen does not change (default 10)")
	return c
}

func viewGrantCommand(o *Options) *cobra.Command {
	r := wbclient.GrantRequest{}
	var user, group, sa string
	c := &cobra.Command{
		Use:   "grant VIEW (--user U | --group G | --service-account NS/NAME) [--ttl 1h]",
		Short: "Admit exactly one subject to a view until it expires (at most 24h) or is revoked", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			for _, s := range []string{user, group, sa} {
				if s != "" {
					n++
				}
			}
			if n != 1 {
				return wbclient.Usage("exactly one of --user, --group, --service-account is required")
			}
			switch {
			case user != "":
				r.SubjectKind, r.Subject = string(wbv1.ViewSubjectUser), user
			case group != "":
				r.SubjectKind, r.Subject = string(wbv1.ViewSubjectGroup), group
			default:
				ns, name, ok := strings.Cut(sa, "/")
				if !ok || ns == "" || name == "" {
					return wbclient.Usage("--service-account must be NAMESPACE/NAME")
				}
				r.SubjectKind, r.SubjectNamespace, r.Subject = string(wbv1.ViewSubjectServiceAccount), ns, name
			}
			cl, err := o.Client()
			if err != nil {
				return err
			}
			r.View = args[0]
			g, err := cl.GrantView(cmd.Context(), r)
			if err != nil {
				return err
			}
			return o.printObject(g, func(w io.Writer) {
				fmt.Fprintf(w, "viewgrant/%s created: %s %s may watch terminalview/%s until %s\n", g.Name, g.Spec.Subject.Kind, g.Spec.Subject.Name,
					r.View, g.Spec.ExpiresAt.UTC().Format(time.RFC3339))
			})
		},
	}
	c.Flags().StringVar(&r.Name, "name", "", "grant name (default: generated from the view's)")
	c.Flags().StringVar(&user, "user", "", "a user name")
	c.Flags().StringVar(&group, "group", "", "a group name")
	c.Flags().StringVar(&sa, "service-account", "", "a ServiceAccount as NAMESPACE/NAME")
	c.Flags().DurationVar(&r.TTL, "ttl", time.Hour, "lifetime of the grant (at most 24h)")
	c.Flags().StringVar(&r.Reason, "reason", "", "a note for the record")
	return c
}

func viewRevokeCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "revoke GRANT", Short: "Revoke a view grant: the subject's streams close within a second", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			g, err := cl.RevokeViewGrant(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.printObject(g, func(w io.Writer) { fmt.Fprintf(w, "viewgrant/%s revoked\n", g.Name) })
		}),
	}
}

func viewWatchCommand(o *Options) *cobra.Command {
	var frames int
	c := &cobra.Command{
		Use: "watch VIEW", Short: "Follow a view's latest screen (read-only; reconnects across request timeouts and node restarts)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if frames < 0 {
				return wbclient.Usage("--frames must be 0 (follow) or more")
			}
			cl, err := o.Client()
			if err != nil {
				return err
			}
			// --frames N: stop after the N-th screen frame (WatchView returns nil once its
			// context ends).
			ctx, stop := context.WithCancel(cmd.Context())
			defer stop()
			seen := 0
			w := o.IO.Out
			return cl.WatchView(ctx, args[0], func(f wbclient.ViewFrame) error {
				if f.Type == "frame" {
					seen++
					if frames > 0 && seen >= frames {
						defer stop()
					}
				}
				if o.structured() {
					raw, err := json.Marshal(f)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(w, "%s\n", termsafe.JSON(raw))
					return err
				}
				if f.Type != "frame" {
					return nil
				}
				fmt.Fprintf(w, "--- frame %d %s context=%s generation=%d %s\n", f.Seq, termsafe.Line(f.Digest), termsafe.Line(f.OperationalContext), f.EnvironmentGeneration, f.Time.Format(time.RFC3339))
				for _, l := range f.Lines {
					fmt.Fprintln(w, termsafe.Line(l))
				}
				if f.Truncated {
					fmt.Fprintln(w, "[truncated at the view's byte bound]")
				}
				return nil
			})
		},
	}
	c.Flags().IntVar(&frames, "frames", 0, "exit after this many screen frames (0: follow until interrupted or refused)")
	return c
}

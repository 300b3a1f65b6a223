package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/tools/remotecommand"

	"sensorium.dev/workbench/internal/termsafe"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func attachCommand(o *Options) *cobra.Command {
	var stdin, tty bool
	c := &cobra.Command{
		Use:   "attach SESSION",
		Short: "Attach to a session's terminal (read-only unless --stdin)",
		Long: `attach joins a TerminalSession over the WebSocket protocol of kubectl exec. Without --stdin it
only shows the terminal (RBAC get on terminalsessions/attach suffices); with --stdin keystrokes
go to the PTY, which needs create on terminalsessions/attach and the session's
spec.rawInput: OperatorOnly. Detach with Ctrl-] .`,
		Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			opts := wbclient.AttachOptions{Stdout: o.IO.Out, TTY: tty}
			if stdin {
				in := o.IO.In
				if f, ok := in.(*os.File); ok && tty && term.IsTerminal(int(f.Fd())) {
					old, err := term.MakeRaw(int(f.Fd()))
					if err == nil {
						defer term.Restore(int(f.Fd()), old) //nolint:errcheck // best effort on exit
					}
					if w, h, err := term.GetSize(int(f.Fd())); err == nil {
						opts.Sizes = &fixedSize{size: &remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}}
					}
				}
				opts.Stdin = in
			}
			return cl.Attach(cmd.Context(), args[0], opts)
		}),
	}
	c.Flags().BoolVarP(&stdin, "stdin", "i", false, "send keystrokes to the session (operators, sessions with rawInput: OperatorOnly)")
	c.Flags().BoolVarP(&tty, "tty", "t", true, "the session is a terminal")
	return c
}

// fixedSize reports one terminal size, then ends.
type fixedSize struct{ size *remotecommand.TerminalSize }

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	s := f.size
	f.size = nil
	return s
}

func screenCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "screen SESSION", Short: "Print a session's current screen", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			s, err := cl.Screen(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return o.print(s, func(w io.Writer) {
				for _, l := range s.Lines {
					fmt.Fprintln(w, termsafe.Line(l))
				}
			})
		}),
	}
}

func eventsCommand(o *Options) *cobra.Command {
	var opts wbclient.EventsOptions
	c := &cobra.Command{
		Use: "events SESSION [-f]", Short: "Print a session's events (output, input, resize, exit, gaps)", Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			return cl.Events(cmd.Context(), args[0], opts, func(ev wbclient.Event) error {
				switch o.Output {
				case "json":
					_, err := o.IO.Out.Write(append(termsafe.JSON(ev.Raw), '\n'))
					return err
				case "yaml":
					var v any
					_ = json.Unmarshal(ev.Raw, &v)
					b, err := marshalYAML(v)
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(o.IO.Out, "---\n%s", b)
					return err
				}
				// The events are a record, not the terminal (attach is): output prints
				// through termsafe.Text, so what a program sent to its PTY — or a command
				// into the session — never drives the reader's terminal.
				switch ev.Type {
				case "output":
					if ev.Text != "" {
						_, err := io.WriteString(o.IO.Out, termsafe.Text(ev.Text))
						return err
					}
					fmt.Fprintf(o.IO.Out, "[%d output %d bytes base64]\n", ev.Seq, len(ev.DataBase64)*3/4)
				case "gap":
					fmt.Fprintf(o.IO.Out, "\n[gap: events %d..%d were evicted]\n", ev.From, ev.To)
				default:
					fmt.Fprintf(o.IO.Out, "\n[%d %s %s]\n", ev.Seq, termsafe.Line(ev.Type), termsafe.Line(ev.Text))
				}
				return nil
			})
		}),
	}
	c.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep streaming new events")
	c.Flags().Int64Var(&opts.Since, "since", 0, "only events after this sequence number")
	c.Flags().IntVar(&opts.Limit, "limit", 0, "at most this many events")
	return c
}

package cli

import (
	"github.com/spf13/cobra"

	"sensorium.dev/workbench/internal/mcpserver"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func mcpCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the workbench MCP tools over stdio, as your identity",
		Long: `mcp runs a Model Context Protocol server on stdin/stdout for an MCP host. Every tool call
runs as the identity of your kubeconfig (--kubeconfig, --context, -n, --as apply), through the
same admission as the CLI. It offers no raw terminal input and no approvals.`,
		Args: cobra.NoArgs,
		RunE: o.withClient(func(cmd *cobra.Command, _ []string, cl *wbclient.Client) error {
			return mcpserver.ServeStdio(cmd.Context(), cl, o.IO.In, o.IO.Out)
		}),
	}
}

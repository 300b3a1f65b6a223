package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	wbclient "sensorium.dev/workbench/pkg/client"
)

// fileAddress parses [ENV:]ROOT[/PATH]; without ENV the only Ready environment is used.
func fileAddress(ctx context.Context, cl *wbclient.Client, s string) (wbclient.FileRequest, error) {
	var r wbclient.FileRequest
	env, rest, hasEnv := strings.Cut(s, ":")
	if !hasEnv {
		rest = s
		var err error
		if env, err = cl.DefaultEnvironment(ctx); err != nil {
			return r, err
		}
	}
	r.Environment = env
	r.Root, r.Path, _ = strings.Cut(rest, "/")
	if r.Root == "" {
		return r, wbclient.Usage("address %q names no root: write ENV:ROOT[/PATH]", s)
	}
	return r, nil
}

// fileRequest connects and resolves the file address arg ([ENV:]ROOT[/PATH]) in one step,
// as every file command starts.
func (o *Options) fileRequest(ctx context.Context, arg string) (*wbclient.Client, wbclient.FileRequest, error) {
	cl, err := o.Client()
	if err != nil {
		return nil, wbclient.FileRequest{}, err
	}
	r, err := fileAddress(ctx, cl, arg)
	return cl, r, err
}

func lsCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "ls [ENV:]ROOT[/PATH]", Short: "List files with sizes and digests (a snapshot)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, r, err := o.fileRequest(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			s, err := cl.Snapshot(cmd.Context(), r)
			if err != nil {
				return err
			}
			return o.print(s, func(w io.Writer) {
				rows := [][]string{}
				for _, e := range s.Entries {
					rows = append(rows, []string{e.Type, fmt.Sprint(e.Size), orNone(e.Digest), e.Path})
				}
				table(w, "TYPE\tSIZE\tDIGEST\tPATH", rows)
				if s.Truncated {
					fmt.Fprintf(w, "(truncated: %s)\n", strings.Join(s.TruncatedBy, ", "))
				}
			})
		},
	}
}

func catCommand(o *Options) *cobra.Command {
	var offset, limit int64
	c := &cobra.Command{
		Use: "cat [ENV:]ROOT/PATH", Short: "Print a file (a bounded read)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, r, err := o.fileRequest(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			r.Offset, r.Limit = offset, limit
			fc, err := cl.ReadFile(cmd.Context(), r)
			if err != nil {
				return err
			}
			type catResult struct {
				wbclient.FileContent
				Content string `json:"content"`
			}
			return o.print(catResult{*fc, string(fc.Data)}, func(w io.Writer) {
				_, _ = w.Write(fc.Data)
				if fc.Truncated {
					fmt.Fprintf(o.IO.ErrOut, "(truncated: %d of %d bytes shown)\n", len(fc.Data), fc.Size)
				}
			})
		},
	}
	c.Flags().Int64Var(&offset, "offset", 0, "byte offset")
	c.Flags().Int64Var(&limit, "limit", 0, "at most this many bytes")
	return c
}

func cpCommand(o *Options) *cobra.Command {
	var uploadEnv, name string
	c := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy out of an environment (export artifact) or an artifact, or upload a file as an artifact",
		Example: `  kubectl workbench cp demo:repo/src ./src.tar      # export root/path as a tar artifact, then download it
  kubectl workbench cp artifact/demo-export-x2k ./out.tar
  kubectl workbench cp ./input.bin demo:            # upload as an Artifact (source: upload) of environment demo
  kubectl workbench cp ./input.bin artifact/in-1    # upload into an existing upload Artifact`,
		Args: cobra.ExactArgs(2),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			ctx := cmd.Context()
			src, dst := args[0], args[1]
			if target, ok := strings.CutPrefix(dst, "artifact/"); ok { // upload into an existing Artifact
				f, err := os.Open(src)
				if err != nil {
					return wbclient.Usage("opening %s: %v", src, err)
				}
				defer func() { _ = f.Close() }()
				if err := cl.UploadTo(ctx, target, f); err != nil {
					return err
				}
				a, err := cl.GetArtifact(ctx, target)
				if err != nil {
					return err
				}
				return o.printObject(a, func(w io.Writer) {
					fmt.Fprintf(w, "artifact/%s uploaded (%d bytes, %s)\n", a.Name, a.Status.Size, a.Status.Digest)
				})
			}
			if strings.HasSuffix(dst, ":") || uploadEnv != "" { // upload
				env := strings.TrimSuffix(dst, ":")
				if uploadEnv != "" {
					env = uploadEnv
				}
				f, err := os.Open(src)
				if err != nil {
					return wbclient.Usage("opening %s: %v", src, err)
				}
				defer func() { _ = f.Close() }()
				a, err := cl.Upload(ctx, env, name, f)
				if err != nil {
					return err
				}
				return o.printObject(a, func(w io.Writer) {
					fmt.Fprintf(w, "artifact/%s uploaded (%d bytes, %s)\n", a.Name, a.Status.Size, a.Status.Digest)
				})
			}
			artifact, isArtifact := strings.CutPrefix(src, "artifact/")
			if !isArtifact {
				r, err := fileAddress(ctx, cl, src)
				if err != nil {
					return err
				}
				a, err := cl.Export(ctx, r.Environment, r.Root, r.Path)
				if err != nil {
					return err
				}
				artifact = a.Name
			}
			digest, n, err := o.downloadTo(ctx, cl, artifact, dst)
			if err != nil {
				return err
			}
			if dst != "-" {
				res := struct {
					Artifact string `json:"artifact"`
					Digest   string `json:"digest"`
					Size     int64  `json:"size"`
					Path     string `json:"path"`
				}{artifact, digest, n, dst}
				return o.print(res, func(w io.Writer) { fmt.Fprintf(w, "artifact/%s -> %s (%d bytes, %s)\n", artifact, dst, n, digest) })
			}
			return nil
		}),
	}
	c.Flags().StringVar(&uploadEnv, "upload-to", "", "upload SRC as an artifact of this environment (same as DST ENV:)")
	c.Flags().StringVar(&name, "name", "", "name of the uploaded Artifact (default: generated)")
	return c
}

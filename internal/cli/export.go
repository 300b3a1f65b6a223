package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// Results out (issue 28): `export patch ENV` and `export archive ENV:ROOT/PATH` create an
// export Artifact, wait until the node stored it (content-addressed) and download it,
// checking its digest.

// namespaceOrDefault is the flags' namespace without building a client (dry runs).
func (o *Options) namespaceOrDefault() string {
	ns, _, err := o.Config.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

func exportCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "export", Short: "Export an environment's changes as a git patch, or a subtree as a tar.gz archive"}
	c.AddCommand(exportPatchCommand(o), exportArchiveCommand(o))
	return c
}

func exportPatchCommand(o *Options) *cobra.Command {
	var root, filePatch, out string
	c := &cobra.Command{
		Use:   "patch ENV [--root ROOT] [--file-patch NAME] [--out FILE]",
		Short: "Export a root's changes as a git-format patch against its source commit (apply with git am or git apply)",
		Example: `  kubectl workbench export patch demo --out demo.patch
  kubectl workbench export patch demo --file-patch fix-readme   # only the files FilePatch fix-readme changed`,
		Args: cobra.ExactArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			env := args[0]
			if root == "" {
				e, err := cl.GetEnvironment(cmd.Context(), env)
				if err != nil {
					return err
				}
				if root = wbclient.SourcedRoot(e); root == "" {
					return wbclient.Usage("environment %s has several roots; name one with --root", env)
				}
			}
			a, err := cl.ExportAs(cmd.Context(), wbclient.RootExportRequest{Environment: env, Root: root, Format: wbv1.ExportFormatGitPatch, FilePatch: filePatch})
			if err != nil {
				return err
			}
			return o.download(cmd, cl, a, out)
		}),
	}
	c.Flags().StringVar(&root, "root", "", "root to export (default: the environment's sourced root, or its only root)")
	c.Flags().StringVar(&filePatch, "file-patch", "", "restrict the patch to the files this applied FilePatch changed")
	c.Flags().StringVar(&out, "out", "-", "file to write (- for standard output)")
	return c
}

func exportArchiveCommand(o *Options) *cobra.Command {
	var out string
	var plainTar bool
	c := &cobra.Command{
		Use:   "archive ENV:ROOT[/PATH] [--out FILE]",
		Short: "Export a root or a subtree as a tar+gzip archive Artifact and download it",
		Example: `  kubectl workbench export archive demo:repo --out repo.tar.gz
  kubectl workbench export archive demo:repo/build/out --out out.tar.gz`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, r, err := o.fileRequest(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			format := wbv1.ExportFormatTarGzip
			if plainTar {
				format = wbv1.ExportFormatTar
			}
			a, err := cl.ExportAs(cmd.Context(), wbclient.RootExportRequest{Environment: r.Environment, Root: r.Root, Path: r.Path, Format: format})
			if err != nil {
				return err
			}
			return o.download(cmd, cl, a, out)
		},
	}
	c.Flags().StringVar(&out, "out", "-", "file to write (- for standard output)")
	c.Flags().BoolVar(&plainTar, "tar", false, "an uncompressed tar instead of tar+gzip")
	return c
}

// downloadTo writes artifact name's blob to out ("-": standard output), checked against its
// digest by the client, and closes the file it created (a close error fails the download).
func (o *Options) downloadTo(ctx context.Context, cl *wbclient.Client, name, out string) (string, int64, error) {
	if out == "-" {
		return cl.Download(ctx, name, o.IO.Out)
	}
	f, err := os.Create(out)
	if err != nil {
		return "", 0, wbclient.Usage("creating %s: %v", out, err)
	}
	digest, n, err := cl.Download(ctx, name, f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("writing %s: %w", out, cerr)
	}
	return digest, n, err
}

// download writes artifact a's blob to out ("-": standard output), checked against its
// digest, and reports it (on standard error when the blob went to standard output).
func (o *Options) download(cmd *cobra.Command, cl *wbclient.Client, a *wbv1.Artifact, out string) error {
	digest, n, err := o.downloadTo(cmd.Context(), cl, a.Name, out)
	if err != nil {
		return err
	}
	base := ""
	if a.Status.Base != "" {
		base = fmt.Sprintf(", %d files against %s", a.Status.Files, a.Status.Base)
	}
	if out == "-" {
		fmt.Fprintf(o.IO.ErrOut, "artifact/%s (%d bytes, %s%s)\n", a.Name, n, digest, base)
		return nil
	}
	res := struct {
		Artifact string `json:"artifact"`
		Digest   string `json:"digest"`
		Size     int64  `json:"size"`
		Path     string `json:"path"`
		Base     string `json:"base,omitempty"`
		Files    int32  `json:"files,omitempty"`
	}{a.Name, digest, n, out, a.Status.Base, a.Status.Files}
	return o.print(res, func(w io.Writer) {
		fmt.Fprintf(w, "artifact/%s -> %s (%d bytes, %s%s)\n", a.Name, out, n, digest, base)
	})
}

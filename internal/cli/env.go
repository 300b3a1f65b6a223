package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	wbclient "sensorium.dev/workbench/pkg/client"
)

func envCommand(o *Options) *cobra.Command {
	c := &cobra.Command{Use: "env", Short: "Create, list and remove environments"}
	c.AddCommand(envCreateCommand(o), envLsCommand(o), envRmCommand(o))
	return c
}

func envCreateCommand(o *Options) *cobra.Command {
	var req wbclient.EnvironmentRequest
	var roots []string
	var noWait, dryRun bool
	var archiveFile, node string
	c := &cobra.Command{
		Use:   "create NAME (--root NAME=DIR | --git URL@COMMIT | --archive FILE | --oci REF) [--backend B] [--image IMAGE]",
		Short: "Create an environment and wait until it is Ready, showing progress",
		Example: `  kubectl workbench env create demo --root repo=/var/lib/workbench/workspaces/demo
  kubectl workbench env create demo --git https://git.example.com/app.git@3f2c9e1d4b5a69788796a5b4c3d2e1f0a9b8c7d6
  kubectl workbench env create demo --git https://git.example.com/app.git --git-ref main --sparse src --git-secret app-token
  kubectl workbench env create demo --archive ./app.tar.gz      # uploads the file as an Artifact, pinned by digest
  kubectl workbench env create demo --oci registry.example.com/app/src@sha256:<digest>
  kubectl workbench env create vm --backend qemu-microvm.v1 --image workbench-guest --root work= --isolation emulated-vm`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			req.Roots = map[string]string{}
			for _, r := range roots {
				name, dir, _ := strings.Cut(r, "=")
				req.Roots[name] = dir
			}
			if archiveFile != "" {
				digest, _, err := wbclient.FileDigest(archiveFile)
				if err != nil {
					return err
				}
				if req.ArchiveFormat == "" {
					req.ArchiveFormat = string(wbclient.ArchiveFormatOf(archiveFile))
				}
				req.Archive, req.ArchiveDigest = wbclient.ArchiveArtifactName(req.Name), digest
			}
			if dryRun {
				e, err := req.Environment(o.namespaceOrDefault())
				if err != nil {
					return err
				}
				e.SetGroupVersionKind(wbv1.GroupVersion.WithKind("Environment"))
				return o.printObject(e, func(w io.Writer) { fmt.Fprintf(w, "environment/%s (dry run)\n", e.Name) })
			}
			cl, err := o.Client()
			if err != nil {
				return err
			}
			e, err := req.Environment(cl.Namespace)
			if err != nil {
				return err
			}
			if archiveFile != "" {
				// The archive is stored on one node and materialized there: upload it first,
				// then pin the environment to that node.
				if node == "" {
					if node, err = cl.SoleNode(cmd.Context()); err != nil {
						return err
					}
				}
				a, err := cl.UploadArchive(cmd.Context(), e.Name, node, archiveFile)
				if err != nil {
					return err
				}
				fmt.Fprintf(o.IO.ErrOut, "artifact/%s uploaded to node %s (%d bytes, %s)\n", a.Name, node, a.Status.Size, a.Status.Digest)
			}
			if node != "" {
				if e.Spec.NodeSelector == nil {
					e.Spec.NodeSelector = map[string]string{}
				}
				e.Spec.NodeSelector[wbv1.NodeLabel] = node
			}
			if err := cl.CreateEnvironment(cmd.Context(), e); err != nil {
				return err
			}
			if !noWait {
				progress, done := environmentProgress(o.IO.ErrOut, e.Name)
				e, err = cl.WaitEnvironmentReady(cmd.Context(), e.Name, progress)
				done(err)
				if err != nil {
					return err
				}
			}
			return o.printObject(e, func(w io.Writer) {
				fmt.Fprintf(w, "environment/%s %s on node %s\n", e.Name, orNone(string(wbv1.EnvironmentPhaseFor(e.Status.Conditions, e.DeletionTimestamp != nil))), orNone(e.Status.NodeName))
			})
		},
	}
	c.Flags().StringVar(&req.Backend, "backend", "", "backend: host-local (default), fixture-copy.v1 (default for a source), qemu-microvm.v1")
	c.Flags().StringArrayVar(&roots, "root", nil, "root as NAME=DIR (hostPath for host-local, source for fixture-copy.v1, NAME= inside a VM); repeatable")
	c.Flags().StringVar(&req.ImageRef, "image", "", "ImageManifest (VM backends)")
	c.Flags().StringVar(&req.IsolationClass, "isolation", "", "required isolation class (e.g. emulated-vm, hardware-vm)")
	c.Flags().Int64Var(&req.TTLSeconds, "ttl", 0, "seconds until the environment expires")
	c.Flags().BoolVar(&noWait, "no-wait", false, "return once created, without waiting for Ready")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "print the Environment that would be created, create nothing")
	c.Flags().StringVar(&req.SourceRoot, "source-root", "", "root the source is materialized into (default "+wbclient.DefaultSourceRoot+")")
	c.Flags().StringVar(&req.Git, "git", "", "git source as URL@COMMIT (full commit id), or the URL alone with --git-ref")
	c.Flags().StringVar(&req.GitRef, "git-ref", "", "branch or tag the node resolves to a commit (node policy must allow refs)")
	c.Flags().StringArrayVar(&req.Sparse, "sparse", nil, "restrict the checkout to this root-relative directory; repeatable")
	c.Flags().Int32Var(&req.Depth, "depth", 0, "history depth fetched (default: the commit alone)")
	c.Flags().StringVar(&req.GitSecret, "git-secret", "", "Secret with token (HTTPS) or ssh-privatekey and known_hosts (SSH)")
	c.Flags().StringVar(&archiveFile, "archive", "", "tar, tar.gz or zip FILE uploaded as an Artifact and materialized into the root")
	c.Flags().StringVar(&req.ArchiveFormat, "archive-format", "", "archive format: tar, tar+gzip or zip (default from the file's extension)")
	c.Flags().StringVar(&node, "node", "", "place the environment on this node (with --archive: the node that stores the upload; default the only node)")
	c.Flags().StringVar(&req.OCI, "oci", "", "OCI artifact as repository@sha256:<digest> (or repository:tag)")
	c.Flags().StringVar(&req.OCISecret, "oci-secret", "", "Secret of type kubernetes.io/dockerconfigjson for the registry")
	return c
}

// environmentProgress shows allocation (and a VM's boot) on w: a progress bar from
// schollz/progressbar on a terminal, one line per step otherwise.
func environmentProgress(w io.Writer, name string) (func(wbclient.EnvironmentProgress), func(error)) {
	start := time.Now()
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(w), progressbar.OptionSpinnerType(14),
			progressbar.OptionSetSpinnerChangeInterval(100*time.Millisecond), progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetDescription("environment/"+name+" Allocating"), progressbar.OptionClearOnFinish())
		return func(p wbclient.EnvironmentProgress) { bar.Describe(describeProgress(name, p)) },
			func(err error) {
				_ = bar.Finish()
				if err == nil {
					fmt.Fprintf(w, "environment/%s Ready in %s\n", name, time.Since(start).Round(100*time.Millisecond))
				}
			}
	}
	return func(p wbclient.EnvironmentProgress) {
		fmt.Fprintf(w, "[%5.1fs] %s\n", time.Since(start).Seconds(), describeProgress(name, p))
	}, func(error) {}
}

func describeProgress(name string, p wbclient.EnvironmentProgress) string {
	s := "environment/" + name + " " + string(p.Phase)
	if p.Node != "" {
		s += " on " + p.Node
	}
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	if p.Message != "" {
		s += " (" + p.Message + ")"
	}
	return s
}

func envLsCommand(o *Options) *cobra.Command {
	return &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "List environments", Args: cobra.NoArgs,
		RunE: o.withClient(func(cmd *cobra.Command, _ []string, cl *wbclient.Client) error {
			envs, err := cl.ListEnvironments(cmd.Context())
			if err != nil {
				return err
			}
			return o.print(listOf(envs, func(e *wbv1.Environment) runtime.Object { return e }), func(w io.Writer) {
				rows := [][]string{}
				for _, e := range envs {
					rows = append(rows, []string{e.Name, string(e.Spec.Backend), orNone(string(wbv1.EnvironmentPhaseFor(e.Status.Conditions, e.DeletionTimestamp != nil))), orNone(e.Status.NodeName), age(e.CreationTimestamp.Time)})
				}
				table(w, "NAME\tBACKEND\tPHASE\tNODE\tAGE", rows)
			})
		}),
	}
}

func envRmCommand(o *Options) *cobra.Command {
	var wait bool
	c := &cobra.Command{
		Use: "rm NAME...", Aliases: []string{"delete"}, Short: "Delete environments (tearing them down)", Args: cobra.MinimumNArgs(1),
		RunE: o.withClient(func(cmd *cobra.Command, args []string, cl *wbclient.Client) error {
			for _, name := range args {
				if err := cl.DeleteEnvironment(cmd.Context(), name, wait); err != nil {
					return err
				}
				fmt.Fprintf(o.IO.Out, "environment/%s deleted\n", name)
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&wait, "wait", true, "wait until the node has torn the environment down")
	return c
}

// printObject prints one object (-o json|yaml|name) or the human line.
func (o *Options) printObject(obj runtime.Object, human func(io.Writer)) error {
	obj = typed(obj)
	if o.Output == "name" {
		gvk := obj.GetObjectKind().GroupVersionKind()
		type named interface{ GetName() string }
		fmt.Fprintf(o.IO.Out, "%s.%s/%s\n", strings.ToLower(gvk.Kind), gvk.Group, obj.(named).GetName())
		return nil
	}
	return o.print(obj, human)
}

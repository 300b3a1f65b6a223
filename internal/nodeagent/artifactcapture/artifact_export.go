package artifactcapture

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/gitexport"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
)

// Results out (issue 28 item 2): an export Artifact in format git-patch holds the root's
// changes against its source commit; tar+gzip is the tar export compressed. Both are
// stored like every other artifact: content-addressed, digest and size in status.

func isPatchExport(art *wbv1.Artifact) bool {
	return art.Spec.Source == artifactExport && art.Spec.Format != nil && *art.Spec.Format == wbv1.ExportFormatGitPatch
}

// gzipIf wraps write's output in gzip (no name, no time in the header: the same tree
// yields the same bytes) when on.
func gzipIf(on bool, write func(io.Writer) error) func(io.Writer) error {
	if !on {
		return write
	}
	return func(w io.Writer) error {
		zw := gzip.NewWriter(w)
		if err := write(zw); err != nil {
			return err
		}
		return zw.Close()
	}
}

// patchBase is the commit a git-patch export of root is taken against: the commit the node
// materialized for a git root (status.roots[].resolved), or "" (the HEAD of the root's own
// repository) for any other root.
func patchBase(env *wbv1.Environment, root string) (string, error) {
	for _, r := range env.Spec.Roots {
		if string(r.Name) != root || r.Git == nil {
			continue
		}
		for _, s := range env.Status.Roots {
			if string(s.Name) == root && s.Kind == "git" && s.Resolved != "" && s.Reason == "" {
				return s.Resolved, nil
			}
		}
		if r.Git.Commit != nil {
			return *r.Git.Commit, nil
		}
		return "", actuation.Refusef(actuation.CodeExportBaseUnknown, "root %s's git ref has no resolved commit in status yet", root)
	}
	return "", nil
}

// exportPatchArtifact stores the git-format patch of an environment root's changes.
func (a *Deps) exportPatchArtifact(ctx context.Context, art *wbv1.Artifact) (string, int64, *gitexport.Result, error) {
	if art.Spec.Root == nil {
		return "", 0, nil, actuation.Refusef(actuation.CodeExportInvalid, "a git-patch export names a root (spec.root)")
	}
	if art.Spec.Path != nil {
		return "", 0, nil, actuation.Refusef(actuation.CodeExportInvalid, "a git-patch export covers a whole root (spec.path is for tar exports; restrict a patch with filePatchRef)")
	}
	root := string(*art.Spec.Root)
	var env wbv1.Environment
	if err := a.Scoped(ctx, types.NamespacedName{Namespace: art.Namespace, Name: string(art.Spec.EnvironmentRef)}, &env); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return "", 0, nil, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s does not exist", art.Spec.EnvironmentRef)
		case errors.Is(err, nodekit.ErrNotYet):
			return "", 0, nil, err
		}
		return "", 0, nil, fmt.Errorf("reading Environment %s: %w", art.Spec.EnvironmentRef, err)
	}
	var paths []string
	if art.Spec.FilePatchRef != nil {
		var err error
		if paths, err = a.filePatchPaths(ctx, art, root); err != nil {
			return "", 0, nil, err
		}
	}
	base, err := patchBase(&env, root)
	if err != nil {
		return "", 0, nil, err
	}
	ra, err := a.Root(ctx, art.Namespace, env.Name, root)
	if err != nil {
		return "", 0, nil, err
	}
	host, err := ra.Files.GitPatchRoot()
	if err != nil {
		return "", 0, nil, err
	}
	scratch := filepath.Join(a.StateDir, "tmp", "exports")
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return "", 0, nil, fmt.Errorf("creating %s: %w", scratch, err)
	}
	subject := fmt.Sprintf("workbench: changes of %s/%s root %s", env.Namespace, env.Name, root)
	if art.Spec.FilePatchRef != nil {
		subject += " (FilePatch " + string(*art.Spec.FilePatchRef) + ")"
	}
	var res *gitexport.Result
	digest, size, err := a.putStream(func(w io.Writer) error {
		var err error
		res, err = gitexport.Patch(ctx, gitexport.Request{
			Root: host, Base: base, Paths: paths, Subject: subject, Date: art.CreationTimestamp.Time,
			ScratchDir: scratch, Limits: gitexport.Limits{MaxPatchBytes: maxArtifactBytes},
		}, w)
		return err
	})
	if err != nil {
		return "", 0, nil, err
	}
	return digest, size, res, nil
}

// filePatchPaths returns the files an applied FilePatch of the same environment and root
// changed.
func (a *Deps) filePatchPaths(ctx context.Context, art *wbv1.Artifact, root string) ([]string, error) {
	var fp wbv1.FilePatch
	key := types.NamespacedName{Namespace: art.Namespace, Name: string(*art.Spec.FilePatchRef)}
	if err := a.Scoped(ctx, key, &fp); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, actuation.Refusef(actuation.CodeExportInvalid, "FilePatch %s does not exist", key)
		case errors.Is(err, nodekit.ErrNotYet):
			return nil, err
		}
		return nil, fmt.Errorf("reading FilePatch %s: %w", key, err)
	}
	if fp.Spec.EnvironmentRef != art.Spec.EnvironmentRef || string(fp.Spec.Root) != root {
		return nil, actuation.Refusef(actuation.CodeExportInvalid, "FilePatch %s patches %s root %s, not %s root %s",
			key, fp.Spec.EnvironmentRef, fp.Spec.Root, art.Spec.EnvironmentRef, root)
	}
	if !wbv1.FilePatchIsFinal(fp.Status.Phase) {
		return nil, nodekit.ErrNotYet // woken by the grace's requeue; refused when it ends
	}
	if fp.Status.Phase != wbv1.FilePatchApplied || len(fp.Status.ChangedFiles) == 0 {
		return nil, actuation.Refusef(actuation.CodeExportInvalid, "FilePatch %s is %s and changed no files", key, fp.Status.Phase)
	}
	paths := make([]string, 0, len(fp.Status.ChangedFiles))
	for _, c := range fp.Status.ChangedFiles {
		paths = append(paths, string(c.Path))
	}
	return paths, nil
}

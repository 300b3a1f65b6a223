package actionruns

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/actionexec"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/artifactout"
	"sensorium.dev/workbench/internal/platform/egress"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/writecap"
)

// The envelope of an admitted run: its store record, its consent re-check and the
// class envelope resolved against the environment's mounted roots.

func recordFor(run *wbv1.ActionRun, d actions.Decision) store.Command {
	return store.Command{UID: string(run.UID), Namespace: run.Namespace, Name: "actionrun/" + run.Name, ArgvDigest: d.ParamsDigest}
}

// consentGranted re-checks a C7 run's consent: the ConsentRequest the manager named must
// be Granted.
func (r *Room) consentGranted(ctx context.Context, run *wbv1.ActionRun) (actuation.Code, string) {
	ref := run.Status.ConsentRequestRef
	if ref == "" {
		return actuation.CodeConsentRequired, "an operator-gated action runs only after consent; the run names no ConsentRequest"
	}
	var cr wbv1.ConsentRequest
	if err := r.d.Reader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: ref}, &cr); err != nil {
		return actuation.CodeConsentRequired, fmt.Sprintf("consent request %s: %v", ref, err)
	}
	switch cr.Status.Decision {
	case wbv1.DecisionGranted:
		return "", ""
	case wbv1.DecisionDenied:
		return actuation.CodeConsentDenied, "consent request " + ref + " was denied"
	case wbv1.DecisionExpired:
		return actuation.CodeConsentExpired, "consent request " + ref + " expired"
	case wbv1.DecisionRevoked:
		return actuation.CodeConsentRevoked, "consent request " + ref + " was revoked"
	}
	return actuation.CodeConsentRequired, "consent request " + ref + " is " + string(cr.Status.Decision)
}

// envelopeFor resolves an authorized action against the environment's mounted roots.
func envelopeFor(act *actions.Action, d actions.Decision, roots []backends.MountedRoot) (actionexec.Envelope, actuation.Code, string) {
	e := actionexec.Envelope{
		Class: string(act.Class), Effects: act.Effects(), Argv: d.Argv,
		Executable:  actionexec.Executable{Kind: act.Executable.Kind, Path: act.Executable.Path, Interpreter: act.Executable.Interpreter, SHA256: act.Executable.SHA256},
		Timeout:     time.Duration(d.TimeoutSeconds) * time.Second,
		StdoutBytes: act.OutputLimits.StdoutBytes, StderrBytes: act.OutputLimits.StderrBytes,
	}
	if !slices.Contains(e.Effects, actionexec.EffectRead) {
		e.Effects = append([]string{actionexec.EffectRead}, e.Effects...)
	}
	if act.Script != nil {
		e.ScriptRoots = act.Script.AllowedRoots
	}
	for _, v := range d.Env {
		e.Env = append(e.Env, v.Name+"="+v.Value)
	}
	for _, r := range roots {
		if r.Path != "" {
			e.ReadableRoots = append(e.ReadableRoots, r.Path)
		}
	}
	if wd := act.WorkingDirectory; wd != nil {
		dir, code, msg := resolveDir(roots, *wd)
		if code != "" {
			return e, code, msg
		}
		e.Dir = dir
	}
	if w := act.FSWrite; w != nil && slices.Contains(e.Effects, actionexec.EffectScopedFSWrite) {
		dir, code, msg := resolveDir(roots, w.WriteRoot)
		if code != "" {
			return e, code, msg
		}
		e.WriteRoot = dir
		e.Write = &writecap.Policy{MaxBytesTotal: w.MaxBytesTotal, MaxBytesPerFile: w.MaxBytesPerFile, PathPattern: w.PathPattern}
	}
	if g := act.Egress; g != nil && slices.Contains(e.Effects, actionexec.EffectEgressNetwork) {
		pol := egress.Policy{MaxBytesTotal: g.MaxBytesTotal, MaxBytesPerConnection: g.MaxBytesPerConnection}
		for _, ep := range g.Endpoints {
			pol.Endpoints = append(pol.Endpoints, egress.Endpoint{Host: ep.Host, Port: int(ep.Port), Protocol: egress.Protocol(ep.Protocol)})
		}
		e.Egress = &pol
	}
	if art := act.Artifact; art != nil && slices.Contains(e.Effects, actionexec.EffectArtifactProduce) {
		e.Artifact = &artifactout.Policy{MaxCount: int(art.MaxCount), MaxBytesPer: art.MaxBytesPer, MaxBytesTotal: art.MaxBytesTotal,
			AllowedMediaTypes: art.AllowedMediaTypes}
	}
	return e, "", ""
}

// resolveDir resolves a root + path to an existing host directory beneath the root, with
// no symlink on the way.
func resolveDir(roots []backends.MountedRoot, at actuation.CwdAddress) (string, actuation.Code, string) {
	i := slices.IndexFunc(roots, func(r backends.MountedRoot) bool { return r.Name == at.Root })
	if i < 0 || roots[i].Path == "" {
		return "", actuation.CodeWorkingDirectoryForbidden, "root " + at.Root + " is not a root of the environment on this node"
	}
	base := roots[i].Path
	if at.Path == "" {
		return base, "", ""
	}
	root, err := fsaccess.OpenRoot(base)
	if err != nil {
		return "", actuation.CodeWorkingDirectoryForbidden, err.Error()
	}
	defer func() { _ = root.Close() }()
	fi, err := root.NoSymlinks().Lstat(at.Path)
	if err != nil {
		return "", actuation.CodeWorkingDirectoryForbidden, fmt.Sprintf("%s/%s: %v", at.Root, at.Path, err)
	}
	if fi.Type != fsaccess.TypeDir {
		return "", actuation.CodeWorkingDirectoryForbidden, fmt.Sprintf("%s/%s is not a directory", at.Root, at.Path)
	}
	return filepath.Join(base, at.Path), "", ""
}

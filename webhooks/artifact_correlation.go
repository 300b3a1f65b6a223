package webhooks

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// +kubebuilder:webhook:path=/mutate-workbench-sensorium-dev-v1alpha1-artifact,mutating=true,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=artifacts,verbs=create,versions=v1alpha1,name=martifact.workbench.sensorium.dev,admissionReviewVersions=v1

// ArtifactStamper gives a new Artifact its correlation id (issue 30 item 5), as the command
// webhook does for a TerminalCommand: an id the creator supplied is kept; otherwise the
// Artifact inherits the id of the source object it names — an owner reference to a
// TerminalCommand, ActionRun, Recording or FilePatch in its namespace (the controller owner
// first), else the FilePatch of a git-patch export (spec.filePatchRef) — when that source
// exists and carries one; otherwise it gets a generated one (NewCorrelationID). The node's
// own Artifacts (a recording's trace, an action's outputs) are created already labelled
// (nodekit.WithCorrelation) and keep theirs. It sets nothing that admits anything.
type ArtifactStamper struct {
	// Reader reads the source objects (the API server: a source created a moment before is
	// seen).
	Reader client.Reader
}

func setupArtifact(mgr ctrl.Manager) error {
	return serve[*wbv1.Artifact](mgr, &wbv1.Artifact{}, ArtifactStamper{Reader: mgr.GetAPIReader()}, ArtifactValidator{})
}

// Default implements admission.Defaulter (on create only, by its marker).
func (s ArtifactStamper) Default(ctx context.Context, a *wbv1.Artifact) error {
	if a.Labels[wbv1.CorrelationLabel] != "" {
		return nil
	}
	id, err := s.sourceCorrelation(ctx, a)
	if err != nil {
		return err
	}
	if id == "" {
		id = NewCorrelationID()
	}
	if a.Labels == nil {
		a.Labels = map[string]string{}
	}
	a.Labels[wbv1.CorrelationLabel] = id
	return nil
}

// correlatedSources are the kinds an Artifact may name as its source, by owner reference.
var correlatedSources = map[string]func() client.Object{
	"TerminalCommand": func() client.Object { return &wbv1.TerminalCommand{} },
	"ActionRun":       func() client.Object { return &wbv1.ActionRun{} },
	"Recording":       func() client.Object { return &wbv1.Recording{} },
	"FilePatch":       func() client.Object { return &wbv1.FilePatch{} },
}

// maxCorrelationSources bounds the source objects read for one Artifact's correlation id.
const maxCorrelationSources = 4

// sourceCorrelation is the correlation id of the first source a names that exists and
// carries one, "" when none does (only the first maxCorrelationSources sources of a kind
// that can carry one are read).
func (s ArtifactStamper) sourceCorrelation(ctx context.Context, a *wbv1.Artifact) (string, error) {
	type source struct {
		kind, name string
	}
	var sources []source
	for pass := range 2 { // the controller owner first
		for _, o := range a.OwnerReferences {
			isController := o.Controller != nil && *o.Controller
			gv, err := schema.ParseGroupVersion(o.APIVersion)
			if err != nil || gv.Group != wbv1.GroupVersion.Group || isController != (pass == 0) {
				continue
			}
			sources = append(sources, source{o.Kind, o.Name})
		}
	}
	if a.Spec.FilePatchRef != nil {
		sources = append(sources, source{"FilePatch", string(*a.Spec.FilePatchRef)})
	}
	reads := 0
	for _, src := range sources {
		newObj, ok := correlatedSources[src.kind]
		if !ok || src.name == "" {
			continue
		}
		if reads++; reads > maxCorrelationSources {
			break // bounded: an Artifact naming hundreds of owners costs at most this many reads
		}
		obj := newObj()
		if err := s.Reader.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: src.name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", fmt.Errorf("reading the %s %s/%s an Artifact names: %w", src.kind, a.Namespace, src.name, err)
		}
		if id := obj.GetLabels()[wbv1.CorrelationLabel]; id != "" {
			return id, nil
		}
	}
	return "", nil
}

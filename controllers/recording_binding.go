package controllers

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=recordings,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=workbench.sensorium.dev,resources=recordings/status,verbs=get;update;patch

// recordingBinder binds a Recording to the node of its environment, so that node's agent
// records the environment's admitted work.
func recordingBinder(c client.Client, now func() time.Time) *BindingReconciler[*wbv1.Recording] {
	return &BindingReconciler[*wbv1.Recording]{
		Client: c, Now: now, Kind: "Recording", NewObj: func() *wbv1.Recording { return &wbv1.Recording{} },
		NewList: func() client.ObjectList { return &wbv1.RecordingList{} },
		EnvOf: func(_ context.Context, _ client.Reader, o *wbv1.Recording) (string, error) {
			return string(o.Spec.EnvironmentRef), nil
		},
		Correlate: recordingCorrelation, // correlation.go
		Final: func(o *wbv1.Recording) bool {
			return o.Status.TraceArtifactRef != "" || o.Status.Phase == wbv1.RecordingPhaseFailed
		},
		Fail: func(ctx context.Context, c client.Client, o *wbv1.Recording, code actuation.Code, msg string) error {
			return applyBinding(ctx, c, o, wbv1.RecordingStatus{Phase: wbv1.RecordingPhaseFailed, Refusal: refusal(code, msg)})
		},
	}
}

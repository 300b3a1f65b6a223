package webhooks

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// SetupWithManager registers every admission webhook with the manager's webhook server.
func SetupWithManager(mgr ctrl.Manager) error {
	for _, setup := range []func(ctrl.Manager) error{
		setupEnvironment,
		validated(&wbv1.CommandProfile{}, CommandProfileValidator{}),
		setupTerminalSession, setupTerminalCommand,
		validated(&wbv1.Wait{}, WaitValidator{}),
		validated(&wbv1.Probe{}, ProbeValidator{}),
		setupFilePatch,
		setupArtifact, // artifact_correlation.go
		validated(&wbv1.ConsentRequest{}, ConsentRequestValidator{}),
		setupConsentGrant,
		validated(&wbv1.BackendCapability{}, BackendCapabilityValidator{}),
		validated(&wbv1.WorkbenchNode{}, WorkbenchNodeValidator{}),
		validated(&wbv1.ImageManifest{}, ImageManifestValidator{}),
		setupTerminalView, setupViewGrant, setupActions,
	} {
		if err := setup(mgr); err != nil {
			return err
		}
	}
	return nil
}

// validated is the setup of a kind admitted by a validating webhook alone, with no reads.
func validated[T client.Object](obj T, v admission.Validator[T]) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error { return serve(mgr, obj, nil, v) }
}

package webhooks

import (
	ctrl "sigs.k8s.io/controller-runtime"
)

// SetupWithManager registers every admission webhook with the manager's webhook server.
func SetupWithManager(mgr ctrl.Manager) error {
	for _, setup := range []func(ctrl.Manager) error{
		setupEnvironment, setupCommandProfile, setupTerminalSession, setupTerminalCommand,
		setupWait, setupProbe, setupFilePatch, setupArtifact, setupConsentRequest, setupConsentGrant,
		setupBackendCapability, setupWorkbenchNode, setupImageManifest,
		setupTerminalView, setupViewGrant, setupActions,
	} {
		if err := setup(mgr); err != nil {
			return err
		}
	}
	return nil
}

package sessions

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// Emitter re-checks, before a command starts, that its creator may write into its
// session (actuation.CheckSessionEmitter): the webhook refuses what it can see at
// admission, but a session created or published after the command, or a binding the
// webhook's cache had not seen, is decided here. The owner's own command costs no read;
// otherwise the node's cache of views is consulted: a view is served only by the node its
// label names, so the views this node holds are the ones that publish its sessions' screens.
func Emitter(ctx context.Context, c client.Reader, cmd *wbv1.TerminalCommand, sess *wbv1.TerminalSession) (*actuation.Refusal, error) {
	if sess.Spec.CreatedBy != "" && sess.Spec.CreatedBy == cmd.Spec.CreatedBy {
		return nil, nil
	}
	use := convert.SessionUse(sess, nil)
	if !use.Personal() {
		var views wbv1.TerminalViewList
		if err := c.List(ctx, &views, client.InNamespace(cmd.Namespace)); err != nil {
			return nil, fmt.Errorf("listing the TerminalViews of %s for command %s: %w", cmd.Namespace, cmd.Name, err)
		}
		use = convert.SessionUse(sess, views.Items)
	}
	return actuation.CheckSessionEmitter(use, cmd.Spec.CreatedBy), nil
}

package agent

import (
	ctrl "sigs.k8s.io/controller-runtime"

	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/nodeagent/terminalviews"
	"sensorium.dev/workbench/internal/views"
)

// The views room (internal/nodeagent/terminalviews) answers the data plane's view
// questions; the resolver hands them on.

// Changes implements dataplane.ViewResolver.
func (r resolver) Changes() (<-chan struct{}, func()) { return r.a.viewHub.Subscribe() }

// Grants implements dataplane.ViewResolver.
func (r resolver) Grants(ns, view string, fresh bool) ([]views.Grant, error) {
	return r.a.views.Grants(ns, view, fresh)
}

// View implements dataplane.ViewResolver.
func (r resolver) View(ns, name string) (dataplane.ViewInfo, error) { return r.a.views.View(ns, name) }

// setupViews builds the views room over the agent's client and sessions and registers it.
func (a *Agent) setupViews(mgr ctrl.Manager) error {
	a.views = terminalviews.New(terminalviews.Deps{Client: a.client, Reader: a.reader, Hub: &a.viewHub,
		Terminal: func(uid string) *session.Session {
			if live := a.sess.Open(uid); live != nil {
				return live.PTY
			}
			return nil
		}})
	return a.views.Setup(a.runCtx, mgr)
}

// Package actuation is the shared actuation core of Sensorium Workbench.
//
// It holds the rules every component applies to a model- or operator-proposed
// effect before anything runs: root-relative path syntax, command profiles and
// argv admission, the curated process environment, consent entries that add
// argv shapes to a profile, canonical digests, the closed vocabularies of
// backend capability admission, and the operational context of an
// environment plan. Webhooks, controllers, the node agent and the guest call
// these functions; nothing re-implements them.
//
// The package is pure: no I/O, no clocks, no Kubernetes imports. Every refusal
// carries a Code from one closed vocabulary (see Codes), so tests, dashboards
// and callers branch on codes, never on message text. The same rules are
// published as golden vectors in test/vectors/*.json for other consumers.
//
// Functions that return a *Refusal return a nil pointer when the input is
// admitted. Do not assign that pointer to an error variable directly (a typed
// nil is a non-nil error); use Refusal.Err instead.
package actuation

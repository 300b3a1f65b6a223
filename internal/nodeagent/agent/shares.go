package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/platform/fairshare"
)

// CapShares share out one node-wide cap (Caps.Sessions, Caps.ConcurrentCommands) by
// identity class: OperatorReserve slots only operators take (default a quarter of the
// cap), PerIdentity is the most one other identity holds at once (default half of the
// rest) — the defaults of the data plane's stream shares (fairshare.Shares.Defaults). A
// creator past its share is refused with share-cap-reached naming the cap.
//
// Opt-in (a configuration without the key shares nothing): the node knows a creator by
// name only (spec.createdBy, stamped at admission), so an operator whose authority comes
// from a group (a cluster admin in system:masters) is not recognized and would be held to
// an agent's share — on by default, the shares would lock such operators out of their own
// node, the very thing they exist to prevent. A node whose operators are bound by name
// (the workbench-operator RoleBinding to a User or ServiceAccount) turns them on.
type CapShares struct {
	OperatorReserve int `json:"operatorReserve,omitempty"`
	PerIdentity     int `json:"perIdentity,omitempty"`
}

// identityShares are the pools of the shared node caps and the classifier of creators.
type identityShares struct {
	sessions, commands *fairshare.Pool

	authzOnce sync.Once
	authz     dataplane.Authorizer // nil until the agent has a client
	authzErr  error
}

// The cap names a share refusal carries (the node-agent configuration's keys).
const (
	sessionCapName = "caps.sessions"
	commandCapName = "caps.concurrentCommands"
)

func newIdentityShares(caps Caps, sess, cmds *CapShares) (*identityShares, error) {
	s := &identityShares{}
	var err error
	if s.sessions, err = capPool("session", caps.Sessions, sess); err != nil {
		return nil, fmt.Errorf("node agent config: sessionShares: %w", err)
	}
	if s.commands, err = capPool("concurrent-command", caps.ConcurrentCommands, cmds); err != nil {
		return nil, fmt.Errorf("node agent config: commandShares: %w", err)
	}
	return s, nil
}

// capPool is the pool of a cap of total slots shared as c (nil: not shared).
func capPool(name string, total int, c *CapShares) (*fairshare.Pool, error) {
	if c == nil {
		return nil, nil
	}
	return fairshare.New(name, fairshare.Shares{Total: total, OperatorReserve: c.OperatorReserve, PerIdentity: c.PerIdentity})
}

// isOperator decides at the node whether creator is an operator of ns: the access only
// the node-operator binding holds (approve consentrequests in the namespace, the data
// plane's test for its stream shares), asked by SubjectAccessReview with positive answers
// cached. The object records its creator's name only (spec.createdBy), so a binding
// through a group does not count; an error or an unknown creator is not an operator
// (the stricter share).
func (a *Agent) isOperator(ctx context.Context, ns, creator string) bool {
	s := a.shares
	s.authzOnce.Do(func() {
		if a.client == nil {
			s.authzErr = errors.New("no API client")
			return
		}
		s.authz, s.authzErr = dataplane.NewSubjectAccessReviewAuthorizer(a.client, dataplane.CacheOptions{})
	})
	if creator == "" || s.authzErr != nil {
		return false
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, err := s.authz.Authorize(actx, &authenticationv1.UserInfo{Username: creator},
		dataplane.Attributes{Verb: "approve", Namespace: ns, Resource: "consentrequests"})
	return err == nil && d.Allowed
}

// acquireShare takes one slot of pool (cap name capName, code full when the whole cap is
// taken) for the object of creator in ns (nil pool: not shared, nothing to take). Every creator first asks as a non-operator;
// only a creator that share refuses is classified, so the common start costs no
// SubjectAccessReview. An operator then takes the reserve (bounded by the cap alone).
func (a *Agent) acquireShare(ctx context.Context, pool *fairshare.Pool, capName string, full actuation.Code, ns, creator string) (release func(), code, msg string) {
	if pool == nil {
		return func() {}, "", "" // the cap is not shared (CapShares)
	}
	release, err := pool.Acquire(fairshare.Agent, creator)
	var ref *actuation.Refusal
	if errors.As(err, &ref) && ref.Code == actuation.CodeShareCapReached && a.isOperator(ctx, ns, creator) {
		release, err = pool.Acquire(fairshare.Operator, creator)
	}
	switch {
	case err == nil:
		return release, "", ""
	case errors.As(err, &ref) && ref.Code == actuation.CodeQueueFull:
		return nil, string(full), "node cap " + capName + ": " + ref.Message
	case errors.As(err, &ref):
		return nil, string(ref.Code), "node cap " + capName + ": " + ref.Message
	}
	return nil, string(full), "node cap " + capName + ": " + err.Error()
}

package dataplane

import (
	"context"
	"errors"
	"net/http"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fairshare"
)

// streamShares are the fair shares of the stream slots.
func (l Limits) streamShares() fairshare.Shares {
	return fairshare.Shares{Total: l.MaxLongPolls, OperatorReserve: l.StreamOperatorReserve, PerIdentity: l.StreamPerIdentity}
}

// operatorAttributes is the access that makes a caller an operator for the stream
// shares: the virtual verb approve on ConsentRequests of the namespace, which only the
// node-operator binding (workbench-operator) holds.
func operatorAttributes(ns string) Attributes {
	return Attributes{Verb: "approve", Namespace: ns, Resource: "consentrequests"}
}

// streamClass classifies the request's user for the stream shares: an operator of ns,
// else an observer for a view stream, else an agent. An authorization failure classifies
// as not an operator (the stricter share).
func (s *Server) streamClass(ctx context.Context, ns string, view bool) (fairshare.Class, string) {
	u := userFrom(ctx)
	if u == nil {
		return fairshare.Agent, ""
	}
	actx, cancel := context.WithTimeout(ctx, s.lim.RequestTimeout)
	d, err := s.authz.Authorize(actx, u, operatorAttributes(ns))
	cancel()
	switch {
	case err == nil && d.Allowed:
		return fairshare.Operator, u.Username
	case view:
		return fairshare.Observer, u.Username
	}
	return fairshare.Agent, u.Username
}

// acquireStream takes a long-lived stream slot (long-poll, follow, attach, view stream)
// for the request's user, within its class's share: 429 queue-full when every slot is
// taken, 429 share-cap-reached when the caller's share is.
func (s *Server) acquireStream(ctx context.Context, ns string, view bool) (func(), error) {
	class, who := s.streamClass(ctx, ns, view)
	release, err := s.streams.Acquire(class, who)
	var ref *actuation.Refusal
	if errors.As(err, &ref) {
		return nil, errorf(http.StatusTooManyRequests, string(ref.Code), ref.Message)
	}
	return release, err
}

package actionruns

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/egress"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/writecap"
)

// ActionClasses is what this node publishes in WorkbenchNode.status.actionClasses: per
// class, whether every primitive of its envelope works here. It is measured once per
// process by using the primitives (a sandbox, a capped tmpfs area, the egress proxy
// attached inside a sandbox's network namespace); a class whose primitive fails is
// Unavailable with the failure's code, and its runs are refused (fail closed). A nil room
// (not set up) publishes nothing.
func (r *Room) ActionClasses() []wbv1.ActionClassSupport {
	if r == nil {
		return nil
	}
	r.supportOnce.Do(func() {
		select {
		case r.probing <- struct{}{}:
			defer func() { <-r.probing }()
			r.support = r.measure()
		default: // the agent is stopping: probe nothing, publish nothing
		}
	})
	return r.support
}

// StopProbing takes the class probe's slot for good (the agent is shutting down): it waits
// for a probe in flight (bounded by ctx), and none starts after. A nil room has none.
func (r *Room) StopProbing(ctx context.Context) {
	if r == nil {
		return
	}
	select {
	case r.probing <- struct{}{}:
	case <-ctx.Done():
	}
}

func (r *Room) classSupport(c actions.Class) wbv1.ActionClassSupport {
	for _, s := range r.ActionClasses() {
		if string(s.Class) == string(c) {
			return s
		}
	}
	return wbv1.ActionClassSupport{Class: wbv1.ActionClass(c), Availability: wbv1.ActionUnavailable, Code: string(actuation.CodeActionClassUnknown)}
}

func (r *Room) measure() []wbv1.ActionClassSupport {
	base := filepath.Join(r.d.StateDir, "tmp")
	failure := func(err error) (string, string) {
		code := string(actuation.CodeOf(err))
		if code == "" {
			code = string(actuation.CodeActionClassUnavailable)
		}
		return code, err.Error()
	}
	sandbox := r.d.SandboxErr
	var writeErr, egressErr error
	if sandbox == nil {
		writeErr = checkWriteArea(base)
		egressErr = checkEgress(r.d.SandboxHelper, base)
	}
	out := make([]wbv1.ActionClassSupport, 0, len(actions.Classes))
	for _, c := range actions.Classes {
		s := wbv1.ActionClassSupport{Class: wbv1.ActionClass(c), Availability: wbv1.ActionAvailable}
		var err error
		switch c {
		case actions.ClassScopedFSWrite, actions.ClassArtifactProducing:
			err = writeErr
		case actions.ClassEgressNetwork:
			err = egressErr
		case actions.ClassComposed:
			err = writeErr
			if err == nil {
				err = egressErr
			}
		}
		if sandbox != nil {
			err = sandbox
		}
		if err != nil {
			s.Availability = wbv1.ActionUnavailable
			s.Code, s.Message = failure(err)
			s.Message = truncateUTF8(s.Message, 1024)
		}
		out = append(out, s)
	}
	return out
}

// checkWriteArea mounts and removes a capped tmpfs area (C3 write roots, C5 artifacts).
func checkWriteArea(base string) error {
	if err := os.MkdirAll(base, 0o700); err != nil {
		return err
	}
	area, err := writecap.Prepare(base, writecap.Policy{MaxBytesTotal: 4096, MaxBytesPerFile: 4096, MaxFiles: 1})
	if err != nil {
		return err
	}
	return area.Close()
}

// checkEgress starts a trivial sandbox with the egress proxy attached in its network
// namespace (C4).
func checkEgress(helper, base string) error {
	px, err := egress.New(egress.Policy{Endpoints: []egress.Endpoint{{Host: "workbench.invalid", Port: 443, Protocol: egress.ProtocolHTTPS}},
		MaxBytesTotal: 1, MaxBytesPerConnection: 1}, egress.Options{})
	if err != nil {
		return err
	}
	defer px.Close()
	if err := procexec.CheckSandbox(procexec.StartOptions{HelperPath: helper, BeforeConfig: px.Attach}, base); err != nil {
		return fmt.Errorf("egress proxy in a sandbox: %w", err)
	}
	return nil
}

package nodereport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/statusapply"
)

// binaryDigest is the digest of the running agent binary, attested in capabilities.
func binaryDigest() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(exe)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, 1<<30)); err != nil {
		return ""
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func hostArch() string {
	if runtime.GOARCH == "arm64" {
		return "arm64"
	}
	return "x86_64"
}

// capabilities describes what this node measured and enforces, honestly: host-local and
// fixture-copy.v1 isolate nothing (isolationClass none); commands run with no network
// (a fresh netns with loopback only), in their own process group, with Landlock.
func (r *Room) capabilities() []wbv1.BackendCapability {
	digest := wbv1.Digest(binaryDigest())
	arch := hostArch()
	base := wbv1.BackendCapabilitySpec{
		NodeName: r.d.NodeName, Provider: "sensorium-workbench", Version: r.d.Version, BinaryDigest: digest, PlatformRef: "linux-" + arch,
		Locality: wbv1.LocalityLocalOnly, HostArchitecture: wbv1.Architecture(arch), GuestArchitecture: wbv1.Architecture(arch), IsolationClass: "none",
		ControlTransport: wbv1.ControlTransportLocalProcess, ControlGuestEndpoint: wbv1.ControlGuestEndpointNone, ControlHostEndpoint: wbv1.ControlHostEndpointNone,
		ControlChannelBinding: wbv1.ControlChannelBindingNone, BootMode: wbv1.BackendBootModeNone, ConsoleMode: wbv1.ConsoleModeNone, NetworkProfiles: []string{"none"}, CredentialInjection: "denied",
		ResourceEnforcement: r.d.HostEnforcement(),
		LifecycleOperations: []string{"allocate", "inspect", "drain", "teardown", "recover"},
	}
	var out []wbv1.BackendCapability
	for _, id := range r.d.Backends.IDs() {
		s := base
		s.BackendID = wbv1.BackendID(id)
		switch wbv1.BackendID(id) {
		case wbv1.BackendHostLocal:
			s.SystemFidelity, s.HostFilesystemSharing = "process-runtime", "read-write"
		case wbv1.BackendFixtureCopy:
			s.SystemFidelity, s.HostFilesystemSharing, s.StorageFormats = "filesystem-view", "denied", []string{"directory-copy"}
			if b, ok := r.d.Backends.Get(id); ok && r.d.EnforcesDisk(b) {
				// Each environment's copies live on a disk of its own (storage.go).
				s.ResourceEnforcement = append(slices.Clone(s.ResourceEnforcement), "host-storage")
			}
		default:
			// VM backends attest their own measured descriptors (the accelerator a probe VM
			// really booted under); one that cannot boot anything publishes nothing.
			b, _ := r.d.Backends.Get(id)
			cr, ok := b.(capabilityReporter)
			if !ok {
				continue
			}
			c, err := cr.Capability()
			if err != nil {
				ctrl.Log.WithName("capabilities").Error(err, "Backend attests no capability on this node", "backend", id)
				continue
			}
			s = capabilitySpec(r.d.NodeName, c)
		}
		out = append(out, wbv1.BackendCapability{
			ObjectMeta: metav1.ObjectMeta{Name: r.d.NodeName + "." + id, Labels: map[string]string{wbv1.NodeLabel: r.d.NodeName}},
			Spec:       s,
		})
	}
	return out
}

// capabilityReporter is a backend that measures its own descriptor (qemu-microvm.v1).
type capabilityReporter interface {
	Capability() (actuation.Capability, error)
}

func capabilitySpec(node string, c actuation.Capability) wbv1.BackendCapabilitySpec {
	return wbv1.BackendCapabilitySpec{
		NodeName: node, BackendID: wbv1.BackendID(c.BackendID), Provider: c.Provider, Version: c.Version, BinaryDigest: wbv1.Digest(c.BinaryDigest),
		PlatformRef: c.PlatformRef, Locality: wbv1.Locality(c.Locality), HostArchitecture: wbv1.Architecture(c.HostArchitecture), GuestArchitecture: wbv1.Architecture(c.GuestArchitecture),
		IsolationClass: wbv1.IsolationClass(c.IsolationClass), SystemFidelity: wbv1.SystemFidelity(c.SystemFidelity),
		ControlTransport: wbv1.ControlTransport(c.ControlTransport), ControlGuestEndpoint: wbv1.ControlGuestEndpoint(c.ControlGuestEndpoint), ControlHostEndpoint: wbv1.ControlHostEndpoint(c.ControlHostEndpoint),
		ControlChannelBinding: wbv1.ControlChannelBinding(c.ControlChannelBinding), BootMode: wbv1.BackendBootMode(c.BootMode), StorageFormats: c.StorageFormats, DeviceClasses: c.DeviceClasses,
		ConsoleMode: wbv1.ConsoleMode(c.ConsoleMode), NetworkProfiles: c.NetworkProfiles, HostFilesystemSharing: wbv1.HostFilesystemSharing(c.HostFilesystemSharing),
		CredentialInjection: wbv1.CredentialInjection(c.CredentialInjection), ResourceEnforcement: c.ResourceEnforcement,
		LifecycleOperations: c.LifecycleOperations,
	}
}

func (r *Room) publishCapabilities(ctx context.Context) error {
	for _, want := range r.capabilities() {
		var have wbv1.BackendCapability
		err := r.d.Client.Get(ctx, client.ObjectKeyFromObject(&want), &have)
		switch {
		case apierrors.IsNotFound(err):
			have = want
			if err := r.d.Client.Create(ctx, &have); err != nil {
				return fmt.Errorf("creating BackendCapability %s: %w", want.Name, err)
			}
		case err != nil:
			return err
		default:
			have.Spec, have.Labels = want.Spec, want.Labels
			if err := r.d.Client.Update(ctx, &have); err != nil {
				return fmt.Errorf("updating BackendCapability %s: %w", want.Name, err)
			}
		}
		now := metav1.Now()
		st := wbv1.BackendCapabilityStatus{AttestedAt: &now, NodeName: r.d.NodeName}
		if id := want.Spec.BackendID; id == wbv1.BackendHostLocal || id == wbv1.BackendFixtureCopy {
			c := r.sandboxCondition(have.Generation)
			c.LastTransitionTime = now
			if old := meta.FindStatusCondition(have.Status.Conditions, c.Type); old != nil && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
			st.Conditions = []metav1.Condition{c}
		}
		if _, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"capability", &have, nil, st); err != nil {
			return err
		}
	}
	return nil
}

// publishNode writes the WorkbenchNode self-report (created when missing).
func (r *Room) publishNode(ctx context.Context) error {
	node := &wbv1.WorkbenchNode{ObjectMeta: metav1.ObjectMeta{Name: r.d.NodeName, Labels: map[string]string{wbv1.NodeLabel: r.d.NodeName}}}
	if err := r.d.Client.Get(ctx, client.ObjectKeyFromObject(node), node); apierrors.IsNotFound(err) {
		if err := r.d.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating WorkbenchNode %s: %w", r.d.NodeName, err)
		}
	} else if err != nil {
		return err
	}
	now := metav1.Now()
	caps := r.d.Caps
	active, _ := r.d.OpenSessions()
	rep := r.d.Report.Snapshot()
	st := wbv1.WorkbenchNodeStatus{
		AgentVersion: r.d.Version, HeartbeatTime: &now,
		Caps: &wbv1.NodeCaps{Sessions: int32(caps.Sessions), SessionsPerEnvironment: int32(caps.SessionsPerEnvironment), ReaderTasks: int32(caps.ReaderTasks),
			InputQueueDepth: int32(caps.InputQueueDepth), EventBufferDepth: int32(caps.EventBufferDepth), PendingWaits: int32(caps.PendingWaits),
			// The ceilings the node's runtimes enforce, advertised (the same as admission's).
			MaxCommandTimeoutSeconds: int64(procexec.MaxTimeout / time.Second), MaxCommandOutputBytes: procexec.MaxOutputBytes,
			MaxSessionDurationSeconds: int64(session.DefaultMaxDurationCeiling / time.Second)},
		ActiveSessions: int32(active), ActiveWaits: int32(rep.Waits), Recovery: rep.Recovery, DataPlane: rep.DataPlane,
		Storage: r.d.Storage(),
	}
	names := make([]string, 0, len(r.d.AdmittedRoots))
	for n := range r.d.AdmittedRoots {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		st.AdmittedRoots = append(st.AdmittedRoots, wbv1.AdmittedRoot{Name: wbv1.RootName(n), Path: r.d.AdmittedRoots[n]})
	}
	degraded := false
	for _, rec := range st.Recovery {
		if rec.Outcome == "failed-retryable" || rec.Outcome == "failed-permanent" {
			degraded = true
		}
	}
	conds := append([]metav1.Condition(nil), node.Status.Conditions...)
	reason := map[bool]string{true: "CleanupFailed", false: "Healthy"}[degraded]
	meta.SetStatusCondition(&conds, statusapply.Cond(wbv1.ConditionReady, true, "Heartbeat", "node agent "+r.d.Version+" serving", 0))
	meta.SetStatusCondition(&conds, statusapply.Cond(wbv1.ConditionDegraded, degraded, reason, "see recovery actions", 0))
	if r.d.Report.Cordoned() {
		meta.SetStatusCondition(&conds, statusapply.Cond(ConditionDraining, true, "NodeCordoned",
			"the node is cordoned (kubectl drain): its environments are drained, new sessions refused with node-draining", 0))
	} else {
		meta.SetStatusCondition(&conds, statusapply.Cond(ConditionDraining, false, "NodeSchedulable", "the node is not cordoned", 0))
	}
	meta.SetStatusCondition(&conds, r.d.StorageCondition())
	st.Conditions = conds
	st.ActionClasses = r.d.ActionClasses()
	_, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"node", node, nil, st)
	return err
}

// ConditionProcessSandbox reports on host-local and fixture-copy.v1 capabilities whether the
// node can establish the process sandbox every command and PTY program runs in. When it is
// False, its message starts with the refusal code every start fails closed with (e.g.
// userns-unavailable, idmap-unavailable, landlock-unavailable, seccomp-unavailable).
const ConditionProcessSandbox = "ProcessSandbox"

// sandboxCondition reports the sandbox check New ran (a trivial program started through it).
func (r *Room) sandboxCondition(gen int64) metav1.Condition {
	if r.d.SandboxErr != nil {
		code := string(actuation.CodeOf(r.d.SandboxErr))
		if code == "" {
			code = string(actuation.CodeSandboxSetupFailed)
		}
		return statusapply.Cond(ConditionProcessSandbox, false, "Unavailable", statusapply.Truncate(code+": "+r.d.SandboxErr.Error(), 1024), gen)
	}
	return statusapply.Cond(ConditionProcessSandbox, true, "Available",
		"own user (root mapped to an unprivileged uid), PID, mount, UTS, IPC, cgroup and network namespaces; no capabilities; "+
			"no_new_privs; Docker-default seccomp; Landlock; idmapped roots", gen)
}

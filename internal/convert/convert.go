// Package convert maps API objects onto the inputs of the actuation core, in one place, so
// that webhooks, controllers and the node agent hand the core exactly the same values.
package convert

import (
	"fmt"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

func str[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// Requirement normalizes an Environment's requirements.
func Requirement(spec *wbv1.EnvironmentSpec) actuation.Requirement {
	r := actuation.Requirement{BackendID: string(spec.Backend)}
	if q := spec.Requirements; q != nil {
		r.IsolationClass = str(q.IsolationClass)
		r.SystemFidelity = str(q.SystemFidelity)
		r.NetworkProfile = str(q.NetworkProfile)
		r.HostFilesystemSharing = str(q.HostFilesystemSharing)
		r.CredentialInjection = str(q.CredentialInjection)
	}
	return r
}

// Capability maps a BackendCapability spec.
func Capability(s *wbv1.BackendCapabilitySpec) actuation.Capability {
	return actuation.Capability{
		BackendID: string(s.BackendID), Provider: s.Provider, Version: s.Version, BinaryDigest: string(s.BinaryDigest), PlatformRef: s.PlatformRef,
		Locality: string(s.Locality), HostArchitecture: string(s.HostArchitecture), GuestArchitecture: string(s.GuestArchitecture),
		IsolationClass: string(s.IsolationClass), SystemFidelity: string(s.SystemFidelity),
		ControlTransport: string(s.ControlTransport), ControlGuestEndpoint: string(s.ControlGuestEndpoint), ControlHostEndpoint: string(s.ControlHostEndpoint),
		ControlChannelBinding: string(s.ControlChannelBinding), BootMode: string(s.BootMode),
		StorageFormats: s.StorageFormats, DeviceClasses: s.DeviceClasses, ConsoleMode: string(s.ConsoleMode), NetworkProfiles: s.NetworkProfiles,
		HostFilesystemSharing: string(s.HostFilesystemSharing), CredentialInjection: string(s.CredentialInjection),
		ResourceEnforcement: s.ResourceEnforcement, LifecycleOperations: s.LifecycleOperations,
	}
}

func envVars(in []wbv1.EnvVar) []actuation.EnvVar {
	out := make([]actuation.EnvVar, 0, len(in))
	for _, e := range in {
		out = append(out, actuation.EnvVar{Name: e.Name, Value: e.Value})
	}
	return out
}

// Profile maps a CommandProfile spec. Defaults the API server applies are applied here too,
// so that a spec read before defaulting means the same.
func Profile(s *wbv1.CommandProfileSpec) actuation.Profile {
	p := actuation.Profile{
		Executable: s.Executable, FixedArgs: s.FixedArgs, AllowedArgPrefixes: s.AllowedArgPrefixes, AllowedRoots: s.AllowedRoots,
		CwdPolicy: actuation.CwdPolicy(s.CwdPolicy),
		Env: actuation.EnvPolicy{
			Mode: actuation.EnvMode(s.Env.Mode), Defaults: envVars(s.Env.Defaults), AllowedOverrides: s.Env.AllowedOverrides,
		},
		Egress: string(s.Egress), Credentials: string(s.Credentials),
		MaxTimeoutSeconds: s.MaxTimeoutSeconds, MaxOutputBytes: s.MaxOutputBytes, PTY: string(s.PTY),
	}
	if s.GitMetadata == wbv1.GitMetadataWritable { // the default (ReadOnly) stays out of the digest
		p.GitMetadata = string(s.GitMetadata)
	}
	if p.CwdPolicy == "" {
		p.CwdPolicy = "BeneathRoot"
	}
	if p.Env.Mode == "" {
		p.Env.Mode = "ProfileDefaultsOnly"
	}
	if p.Egress == "" {
		p.Egress = "Deny"
	}
	if p.Credentials == "" {
		p.Credentials = "Denied"
	}
	if p.MaxTimeoutSeconds == 0 {
		p.MaxTimeoutSeconds = 300
	}
	if p.MaxOutputBytes == 0 {
		p.MaxOutputBytes = 1 << 20
	}
	if p.PTY == "" {
		p.PTY = "Disabled"
	}
	return p
}

// Cwd maps a working-directory address.
func Cwd(c wbv1.CwdAddress) actuation.CwdAddress {
	return actuation.CwdAddress{Root: string(c.Root), Path: string(c.Path)}
}

// Intent maps a TerminalCommand spec.
func Intent(s *wbv1.TerminalCommandSpec) actuation.CommandIntent {
	in := actuation.CommandIntent{
		ProfileRef: string(s.ProfileRef), Argv: s.Argv, Cwd: Cwd(s.Cwd), Env: envVars(s.Env),
		TimeoutSeconds: s.TimeoutSeconds, OutputBytes: s.OutputBytes,
	}
	if in.TimeoutSeconds == 0 {
		in.TimeoutSeconds = 60
	}
	if in.OutputBytes == 0 {
		in.OutputBytes = 65536
	}
	return in
}

// Subject is the bound subject of a command's admission: its reference, its object UID and
// the environment it runs in.
func Subject(cmd *wbv1.TerminalCommand, environment string) actuation.Subject {
	return actuation.Subject{Ref: CommandRef(cmd.Namespace, cmd.Name), UID: string(cmd.UID), Environment: environment}
}

// SubjectIn is Subject with the environment's effective operational context, which a
// remembered grant is held to (actuation.ReviewedContextHolds).
func SubjectIn(cmd *wbv1.TerminalCommand, env *wbv1.Environment) actuation.Subject {
	s := Subject(cmd, env.Name)
	s.EnvironmentUID = string(env.UID)
	s.Context = actuation.ContextClass(env.Status.EffectiveOperationalContext)
	return s
}

// CommandRef is how allow-once grants name a command.
func CommandRef(namespace, name string) string { return fmt.Sprintf("%s/%s", namespace, name) }

// Entries maps the projected consent entries of a profile's status.
func Entries(namespace string, in []wbv1.ConsentEntry) []actuation.ConsentEntry {
	out := make([]actuation.ConsentEntry, 0, len(in))
	for _, e := range in {
		ce := actuation.ConsentEntry{
			Scope: actuation.ConsentScope(e.Scope), GrantRef: string(e.GrantRef),
			Argv: e.Argv, Prefix: e.Prefix, VariablePrefixes: e.VariablePrefixes, Cwd: Cwd(e.Cwd),
			CommandUID: e.CommandUID, ArgvDigest: string(e.ArgvDigest), Environment: string(e.EnvironmentRef),
			EnvironmentUID: e.EnvironmentUID, Context: actuation.ContextClass(e.OperationalContext),
		}
		if e.ExpiresAt != nil {
			ce.ExpiresAt = e.ExpiresAt.Time // the node holds the entry to it (actuation.ConsentEntryLapsed)
		}
		if e.CommandRef != "" {
			ce.CommandRef = CommandRef(namespace, string(e.CommandRef))
		}
		out = append(out, ce)
	}
	return out
}

// Entry builds the consent entry a grant admits, from its request's descriptor.
func Entry(namespace string, grant *wbv1.ConsentGrant, d *wbv1.ConsentDescriptor) actuation.ConsentEntry {
	e := actuation.ConsentEntry{Scope: actuation.ConsentScope(grant.Spec.Scope), GrantRef: grant.Name, Cwd: Cwd(d.Cwd),
		Environment: string(d.EnvironmentRef), Context: actuation.ContextClass(d.OperationalContext)}
	switch grant.Spec.Scope {
	case wbv1.ConsentAllowOnce:
		e.Argv = d.Argv
		e.CommandRef = CommandRef(namespace, string(d.CommandRef))
		e.CommandUID, e.ArgvDigest = string(d.CommandUID), string(d.ArgvDigest)
	case wbv1.ConsentRememberExactArgv:
		e.Argv = d.Argv
	case wbv1.ConsentRememberArgvPrefix:
		n := 0
		if grant.Spec.PrefixLength != nil {
			n = int(*grant.Spec.PrefixLength)
		}
		n = min(n, len(d.Argv)) // the webhook refuses a longer prefix than the reviewed argv
		e.Prefix = d.Argv[:n]
		e.VariablePrefixes = grant.Spec.VariablePrefixes
	}
	return e
}

// Delta builds the consent delta a grant decides: the concrete intent and safety caps,
// never mutable audit fields.
func Delta(namespace string, grant *wbv1.ConsentGrant, d *wbv1.ConsentDescriptor) actuation.ConsentDelta {
	e := Entry(namespace, grant, d)
	return actuation.ConsentDelta{
		Capability: string(d.Capability), OperationDigest: string(d.ArgvDigest),
		Workspace: namespace + "/" + string(d.EnvironmentRef), Roots: d.Roots, Scope: e.Scope,
		Argv: e.Argv, Prefix: e.Prefix, VariablePrefixes: e.VariablePrefixes,
		SafetyCaps: actuation.SafetyCaps{
			TimeoutSeconds: d.SafetyCaps.TimeoutSeconds, OutputBytes: d.SafetyCaps.OutputBytes,
			Egress: string(d.SafetyCaps.Egress), Credentials: string(d.SafetyCaps.Credentials),
		},
	}
}

// EnvironmentPatchPolicy normalizes an Environment's host-owned patch policy (absent fields
// take the API defaults: creates allowed, deletes, git metadata and executable bits refused).
func EnvironmentPatchPolicy(spec *wbv1.EnvironmentSpec) actuation.EnvironmentPatchPolicy {
	var out actuation.EnvironmentPatchPolicy
	p := spec.PatchPolicy
	if p == nil {
		return out
	}
	out.DenyCreate = p.AllowCreate != nil && !*p.AllowCreate
	out.AllowDelete = p.AllowDelete != nil && *p.AllowDelete
	out.AllowGitMetadata = p.GitMetadata != nil && *p.GitMetadata == wbv1.PatchPermissionAllowed
	out.AllowExecutable = p.ExecutableFiles != nil && *p.ExecutableFiles == wbv1.PatchPermissionAllowed
	if p.MaxChangedFiles != nil {
		out.MaxChangedFiles = int(*p.MaxChangedFiles)
	}
	return out
}

// ProposedPatchPolicy normalizes a FilePatch's own spec.policy (API defaults: no create,
// no delete, at most 16 files).
func ProposedPatchPolicy(spec *wbv1.FilePatchSpec) actuation.ProposedPatchPolicy {
	pol := spec.Policy
	out := actuation.ProposedPatchPolicy{
		AllowCreate:     pol.AllowCreate != nil && *pol.AllowCreate,
		AllowDelete:     pol.AllowDelete != nil && *pol.AllowDelete,
		MaxChangedFiles: 16,
	}
	if pol.MaxChangedFiles != nil {
		out.MaxChangedFiles = int(*pol.MaxChangedFiles)
	}
	return out
}

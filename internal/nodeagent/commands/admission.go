package commands

import (
	"fmt"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// admitAtNode re-runs admission with the actuation core immediately before the node starts
// a command, against the effective profile it just read from the API server (the spec plus
// the consent entries projected into its status), so no bug in the manager's gate can
// become execution:
//
//   - the argv shape and the intent's caps, cwd and env against the profile;
//   - the argv digest the manager recorded is the digest of this spec;
//   - the argv is admitted by the profile or by a consent entry bound to this environment;
//     an allow-once entry only when it names this very object (UID) and the argv digest the
//     operator reviewed.
//
// Anything else is refused with argv-not-admitted (or the core's code for a malformed
// intent), and nothing is started.
//
// A remembered or allow-once grant admits only while it holds at the node itself (live,
// grants.go): not past its expiry, not revoked, bound to this environment object; a command
// whose only admitting grant lapsed is refused with consent-expired or consent-revoked.
func admitAtNode(cmd *wbv1.TerminalCommand, prof *wbv1.CommandProfile, env *wbv1.Environment, live grantCheck) *actuation.Refusal {
	intent := convert.Intent(&cmd.Spec)
	entries := convert.Entries(cmd.Namespace, prof.Status.ConsentEntries)
	d := actuation.AdmitCommand(convert.Profile(&prof.Spec), entries, intent, convert.SubjectIn(cmd, env), live)
	if d.Malformed {
		return d.Refusal
	}
	digest := actuation.ArgvDigest(intent.ProfileRef, intent.Argv, intent.Cwd)
	if string(cmd.Status.ArgvDigest) != digest {
		return notAdmitted("the recorded argv digest %q is not the digest of the command's argv, cwd and profile (%s)", cmd.Status.ArgvDigest, digest)
	}
	adm := d.Admission
	if d.Lapsed {
		return d.Refusal // the only admitting grant lapsed at the node
	}
	if d.Verdict != actuation.VerdictAdmitted {
		why := "no entry admits it"
		if d.Refusal != nil {
			why = string(d.Refusal.Code) + ": " + d.Refusal.Message
		}
		return notAdmitted("the effective profile %s does not admit this argv on environment %s at the node (%s)", prof.Name, env.Name, why)
	}
	if adm.Scope == actuation.ScopeAllowOnce {
		for _, e := range entries {
			if e.GrantRef == adm.By && (e.CommandUID != string(cmd.UID) || e.ArgvDigest != digest) {
				return notAdmitted("allow-once grant %s is bound to command uid %q and argv digest %q, not this command (uid %q, %s)",
					e.GrantRef, e.CommandUID, e.ArgvDigest, cmd.UID, digest)
			}
		}
	}
	return nil
}

// fastPathAdmit decides, at the node, whether this node may take a command the manager has
// not decided yet (issue 13, one hop): the same core checks as admitAtNode, against the
// effective profile just read, on an environment that is Ready. It answers who admits it
// ("profile" or a remembered grant bound to this environment) and true only when no operator
// and no manager-side step is needed: allow-once consent (which the manager consumes),
// consent-required, a refusal or a malformed intent all answer false, and the manager's gate
// then records its decision as before.
func fastPathAdmit(cmd *wbv1.TerminalCommand, prof *wbv1.CommandProfile, env *wbv1.Environment, live grantCheck) (string, bool) {
	if !cmd.DeletionTimestamp.IsZero() || cmd.Spec.DesiredState == wbv1.CommandDesiredCancelled ||
		env.Status.Phase != wbv1.EnvironmentReady || cmd.Labels[wbv1.EnvironmentLabel] != env.Name {
		return "", false
	}
	d := actuation.AdmitCommand(convert.Profile(&prof.Spec), convert.Entries(cmd.Namespace, prof.Status.ConsentEntries),
		convert.Intent(&cmd.Spec), convert.SubjectIn(cmd, env), live)
	if d.Verdict != actuation.VerdictAdmitted || d.Scope == actuation.ScopeAllowOnce {
		return "", false
	}
	return d.By, true
}

// argvDigestOf is the digest the manager records (or will record) for cmd.
func argvDigestOf(cmd *wbv1.TerminalCommand) string {
	if cmd.Status.ArgvDigest != "" {
		return string(cmd.Status.ArgvDigest)
	}
	intent := convert.Intent(&cmd.Spec)
	return actuation.ArgvDigest(intent.ProfileRef, intent.Argv, intent.Cwd)
}

func notAdmitted(format string, args ...any) *actuation.Refusal {
	return &actuation.Refusal{Code: actuation.CodeArgvNotAdmitted, Field: "spec.argv", Message: fmt.Sprintf(format, args...)}
}

package actions

import (
	"fmt"
	"regexp"
	"slices"

	"sensorium.dev/workbench/internal/actuation"
)

// Baseline incidental effects of the seed's classes (seed 002, "Baseline incidental effects").
const (
	EffectDiskAccessTimestamp = "disk-access-timestamp-update"
	EffectLocalFSWrite        = "local-filesystem-write"
	EffectNetworkEgress       = "network-egress"
	EffectArtifactLaneWrite   = "artifact-lane-write"
)

// BaselineSensitivity is every class's baseline sensitivity class; an action may raise it,
// never lower it (validateSensitivity refuses override keys).
const BaselineSensitivity = "operational-sensitive"

// MaxDeclaredEffects bounds an action's declared incidental effects; with the four
// baseline effects the observation holds at most MaxObservedEffects.
const (
	MaxDeclaredEffects = 8
	MaxObservedEffects = 16
)

var effectRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// Observation is the seed's observation of one run.
type Observation struct {
	SignalKind        string
	SignalFamily      string
	SensitivityClass  string
	IncidentalEffects []string
}

// Observed is what a run was seen to do (the node's capture).
type Observed struct {
	WroteFiles    bool
	Connected     bool
	ProducedFiles bool
}

// BaselineEffects returns the class baseline: C1/C2 disk-access-timestamp-update, C3 adds
// local-filesystem-write, C4 network-egress, C5 adds artifact-lane-write, C6 the union of
// its named effects' baselines.
func BaselineEffects(a *Action) []string {
	var out []string
	for _, e := range a.Effects() {
		switch e {
		case EffectRead:
			out = append(out, EffectDiskAccessTimestamp)
		case EffectScopedFSWrite:
			out = append(out, EffectDiskAccessTimestamp, EffectLocalFSWrite)
		case EffectEgressNetwork:
			out = append(out, EffectNetworkEgress)
		case EffectArtifactProduce:
			out = append(out, EffectDiskAccessTimestamp, EffectArtifactLaneWrite)
		}
	}
	if len(out) == 0 {
		out = append(out, EffectDiskAccessTimestamp)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ObservationOf is the run's observation: the result contract's signal kind and family, the
// declared sensitivity class (the baseline when none), and the union of the class baseline,
// the declared effects and the observed ones, sorted and capped at MaxObservedEffects.
func ObservationOf(a *Action, seen Observed) Observation {
	o := Observation{SignalKind: a.ResultContract.SignalKind, SignalFamily: a.ResultContract.SignalFamily, SensitivityClass: BaselineSensitivity}
	if c := a.Sensitivity["class"]; c != "" {
		o.SensitivityClass = c
	} else if c := a.Sensitivity["default_class"]; c != "" {
		o.SensitivityClass = c
	}
	eff := BaselineEffects(a)
	for _, e := range a.IncidentalEffects {
		if effectRE.MatchString(e) {
			eff = append(eff, e)
		}
	}
	o.IncidentalEffects = WithObserved(eff, seen)
	return o
}

// WithObserved adds to effects what a run was seen to do (files written:
// local-filesystem-write, connections: network-egress, artifacts: artifact-lane-write),
// never removing any, sorted, without repeats and capped at MaxObservedEffects.
func WithObserved(effects []string, seen Observed) []string {
	eff := slices.Clone(effects)
	if seen.WroteFiles {
		eff = append(eff, EffectLocalFSWrite)
	}
	if seen.Connected {
		eff = append(eff, EffectNetworkEgress)
	}
	if seen.ProducedFiles {
		eff = append(eff, EffectArtifactLaneWrite)
	}
	slices.Sort(eff)
	eff = slices.Compact(eff)
	if len(eff) > MaxObservedEffects {
		eff = eff[:MaxObservedEffects]
	}
	return eff
}

// validateObservationLane checks what the observation reads from a declaration: at most
// MaxDeclaredEffects lowercase effect names, a well-formed signal family, and the signing
// block.
func validateObservationLane(a *Action, f func(string) string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	if len(a.IncidentalEffects) > MaxDeclaredEffects {
		rs = append(rs, actuation.Refuse(actuation.CodeIncidentalEffectInvalid, f("incidentalEffects"), "must list at most %d effects", MaxDeclaredEffects))
	}
	for i, e := range a.IncidentalEffects {
		if !effectRE.MatchString(e) {
			rs = append(rs, actuation.Refuse(actuation.CodeIncidentalEffectInvalid, fmt.Sprintf("%s[%d]", f("incidentalEffects"), i), "must be a lowercase effect name such as %s (got %q)", EffectLocalFSWrite, clip(e)))
		}
	}
	if fam := a.ResultContract.SignalFamily; fam != "" && (len(fam) > 253 || !signalFamilyRE.MatchString(fam)) {
		rs = append(rs, actuation.Refuse(actuation.CodeResultSchemaInvalid, f("resultContract.signalFamily"), "must be a signal family such as os/fetch-result (got %q)", clip(fam)))
	}
	rs = append(rs, validateSigning(a.Signing, f("signing"))...)
	return rs
}

var signalFamilyRE = regexp.MustCompile(`^[a-z][a-z0-9-]*(/[a-z0-9][a-z0-9.-]*)+$`)

package actuation

import "testing"

// TestCapPatchPolicy: the proposer narrows the environment's policy, never widens it.
func TestCapPatchPolicy(t *testing.T) {
	cases := []struct {
		name string
		env  EnvironmentPatchPolicy
		p    ProposedPatchPolicy
		code Code
		want EffectivePatchPolicy
	}{
		{"defaults", EnvironmentPatchPolicy{}, ProposedPatchPolicy{MaxChangedFiles: 16}, "",
			EffectivePatchPolicy{MaxChangedFiles: 16}},
		{"create asked, allowed by default", EnvironmentPatchPolicy{}, ProposedPatchPolicy{AllowCreate: true}, "",
			EffectivePatchPolicy{AllowCreate: true, MaxChangedFiles: MaxPatchChangedFiles}},
		{"create asked, environment denies", EnvironmentPatchPolicy{DenyCreate: true}, ProposedPatchPolicy{AllowCreate: true}, CodePatchPolicyExceedsEnvironment,
			EffectivePatchPolicy{}},
		{"delete asked, environment default denies", EnvironmentPatchPolicy{}, ProposedPatchPolicy{AllowDelete: true}, CodePatchPolicyExceedsEnvironment,
			EffectivePatchPolicy{}},
		{"delete asked and allowed", EnvironmentPatchPolicy{AllowDelete: true}, ProposedPatchPolicy{AllowDelete: true}, "",
			EffectivePatchPolicy{AllowDelete: true, MaxChangedFiles: MaxPatchChangedFiles}},
		{"delete allowed but not asked", EnvironmentPatchPolicy{AllowDelete: true}, ProposedPatchPolicy{}, "",
			EffectivePatchPolicy{MaxChangedFiles: MaxPatchChangedFiles}},
		{"count capped to the environment", EnvironmentPatchPolicy{MaxChangedFiles: 4}, ProposedPatchPolicy{MaxChangedFiles: 16}, "",
			EffectivePatchPolicy{MaxChangedFiles: 4}},
		{"count narrowed by the proposer", EnvironmentPatchPolicy{MaxChangedFiles: 40}, ProposedPatchPolicy{MaxChangedFiles: 2}, "",
			EffectivePatchPolicy{MaxChangedFiles: 2}},
		{"environment count above the hard cap", EnvironmentPatchPolicy{MaxChangedFiles: 10000}, ProposedPatchPolicy{}, "",
			EffectivePatchPolicy{MaxChangedFiles: MaxPatchChangedFiles}},
		{"git and exec come only from the environment", EnvironmentPatchPolicy{AllowGitMetadata: true, AllowExecutable: true}, ProposedPatchPolicy{}, "",
			EffectivePatchPolicy{AllowGitMetadata: true, AllowExecutable: true, MaxChangedFiles: MaxPatchChangedFiles}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, r := CapPatchPolicy(c.env, c.p)
			if codeOf(r) != c.code {
				t.Fatalf("code %q (%v), want %q", codeOf(r), r, c.code)
			}
			if r == nil && got != c.want {
				t.Fatalf("effective %+v, want %+v", got, c.want)
			}
		})
	}
}

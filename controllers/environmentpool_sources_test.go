package controllers

import (
	"strings"
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func gitSpec(url string, commit, ref string, mut ...func(*wbv1.GitRootSource)) *wbv1.EnvironmentSpec {
	g := &wbv1.GitRootSource{URL: url}
	if commit != "" {
		g.Commit = &commit
	}
	if ref != "" {
		g.Ref = &ref
	}
	for _, m := range mut {
		m(g)
	}
	return &wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Git: g}}}
}

func resolved(commit string) []wbv1.RootSourceStatus {
	return []wbv1.RootSourceStatus{{Name: "repo", Kind: "git", Resolved: commit}}
}

// TestPoolMatchesBySourceAndCommit: a claim adopts a member of the same source at the same
// commit (or digest), whether the template pins it or floats and the member materialized
// it; a different commit, repository, option or credential never matches.
func TestPoolMatchesBySourceAndCommit(t *testing.T) {
	a, b := strings.Repeat("a", 40), strings.Repeat("b", 40)
	url := "https://git.example.com/app.git"
	d1, d2 := "sha256:"+strings.Repeat("1", 64), "sha256:"+strings.Repeat("2", 64)
	archive := func(ref, digest string) *wbv1.EnvironmentSpec {
		s := &wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo",
			Archive: &wbv1.ArchiveRootSource{ArtifactRef: wbv1.ObjectName(ref), Format: wbv1.ArchiveFormatTarGzip}}}}
		if digest != "" {
			dg := wbv1.Digest(digest)
			s.Roots[0].Archive.Digest = &dg
		}
		return s
	}
	oci := func(ref string) *wbv1.EnvironmentSpec {
		return &wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", OCI: &wbv1.OCIRootSource{Ref: ref}}}}
	}
	host := &wbv1.EnvironmentSpec{Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Source: &url}}}
	cases := []struct {
		name           string
		claim, member  *wbv1.EnvironmentSpec
		materialized   []wbv1.RootSourceStatus
		template, want bool
	}{
		{"same commit", gitSpec(url, a, ""), gitSpec(url, a, ""), resolved(a), true, true},
		{"same commit, URL spelled differently", gitSpec(url, a, ""), gitSpec("HTTPS://Git.Example.com/app/", a, ""), resolved(a), true, true},
		{"other commit", gitSpec(url, a, ""), gitSpec(url, b, ""), resolved(b), false, false},
		{"other repository", gitSpec(url, a, ""), gitSpec("https://git.example.com/other.git", a, ""), resolved(a), false, false},
		{"floating template, member at the commit", gitSpec(url, a, ""), gitSpec(url, "", "main"), resolved(a), true, true},
		{"floating template, member at another commit", gitSpec(url, a, ""), gitSpec(url, "", "main"), resolved(b), true, false},
		{"floating template, member not materialized", gitSpec(url, a, ""), gitSpec(url, "", "main"), nil, true, false},
		{"same ref", gitSpec(url, "", "main"), gitSpec(url, "", "main"), resolved(b), true, true},
		{"ref claim, pinned member", gitSpec(url, "", "main"), gitSpec(url, a, ""), resolved(a), false, false},
		{"other sparse paths", gitSpec(url, a, "", func(g *wbv1.GitRootSource) { g.SparsePaths = []wbv1.RelativePath{"src"} }), gitSpec(url, a, ""), resolved(a), false, false},
		{"sparse paths in another order", gitSpec(url, a, "", func(g *wbv1.GitRootSource) { g.SparsePaths = []wbv1.RelativePath{"src", "docs"} }),
			gitSpec(url, a, "", func(g *wbv1.GitRootSource) { g.SparsePaths = []wbv1.RelativePath{"docs", "src"} }), resolved(a), true, true},
		{"other credentials", gitSpec(url, a, "", func(g *wbv1.GitRootSource) { g.CredentialsSecretRef = &wbv1.SecretKeyReference{Name: "x"} }), gitSpec(url, a, ""), resolved(a), false, false},
		{"archive by digest, other artifact name", archive("mine", d1), archive("pool-src", d1), nil, true, true},
		{"archive by other digest", archive("mine", d1), archive("pool-src", d2), nil, false, false},
		{"archive by digest, member of a floating template", archive("mine", d1), archive("pool-src", ""), []wbv1.RootSourceStatus{{Name: "repo", Kind: "archive", Resolved: d1}}, true, true},
		{"oci by digest", oci("reg.example.com/app@" + d1), oci("REG.example.com/app@" + d1), nil, true, true},
		{"oci tag template, member at the digest", oci("reg.example.com/app@sha256:" + strings.Repeat("1", 64)), oci("reg.example.com/app:v1"),
			[]wbv1.RootSourceStatus{{Name: "repo", Kind: "oci", Resolved: "sha256:" + strings.Repeat("1", 64)}}, true, true},
		{"oci other repository", oci("reg.example.com/app@" + d1), oci("reg.example.com/other@" + d1), nil, false, false},
		{"sourced claim, host-copy member", gitSpec(url, a, ""), host, nil, false, false},
		{"refused materialization", gitSpec(url, a, ""), gitSpec(url, "", "main"), []wbv1.RootSourceStatus{{Name: "repo", Kind: "git", Resolved: a, Reason: "source-failed"}}, true, false},
	}
	for _, c := range cases {
		tmpl := sameAllocation(c.claim, c.member) && sourceVersionsMatch(c.claim, c.member, nil, false)
		got := sameAllocation(c.member, c.claim) && sourceVersionsMatch(c.claim, c.member, c.materialized, true)
		if tmpl != c.template || got != c.want {
			t.Errorf("%s: template match %v (want %v), member match %v (want %v)", c.name, tmpl, c.template, got, c.want)
		}
	}
}

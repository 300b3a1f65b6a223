package controllers

import (
	"slices"
	"strings"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// Warm pools take sources (issue 28 item 3). A sourced root is the same allocation as
// another when it is the same source (kind, normalized location, options, credentials)
// at the same version. The version is compared apart from the rest, because a pool's
// template may float (a git ref, an OCI tag, an archive by Artifact name) while its
// members are materialized at one resolved commit or digest (status.roots[].resolved):
//   - a claim pinned to a commit or digest adopts a member pinned to the same one, or a
//     member of a floating template whose materialized version is that one;
//   - a floating claim adopts a member of the same floating version (the ref, tag or
//     Artifact the member was materialized from, at its materialization).

// allocationRoots are roots with every source's version removed and its location
// normalized: what must be equal for two roots to be one allocation, version aside.
func allocationRoots(roots []wbv1.EnvironmentRoot) []wbv1.EnvironmentRoot {
	if roots == nil {
		return nil
	}
	out := make([]wbv1.EnvironmentRoot, 0, len(roots))
	for i := range roots {
		r := *roots[i].DeepCopy()
		if g := r.Git; g != nil {
			g.URL = normalizeGitURL(g.URL)
			g.Commit, g.Ref = nil, nil
			slices.Sort(g.SparsePaths)
			if g.Depth != nil && *g.Depth == 1 {
				g.Depth = nil // absent means depth 1
			}
		}
		if a := r.Archive; a != nil {
			a.ArtifactRef, a.Digest = "", nil
		}
		if o := r.OCI; o != nil {
			o.Ref, _ = splitOCIReference(o.Ref)
		}
		out = append(out, r)
	}
	return out
}

// normalizeGitURL drops what does not change the repository a URL names: a trailing "/"
// or ".git", and the scheme's and host's case.
func normalizeGitURL(u string) string {
	u = strings.TrimSuffix(strings.TrimSuffix(u, "/"), ".git")
	if scheme, rest, ok := strings.Cut(u, "://"); ok {
		host, path, _ := strings.Cut(rest, "/")
		return strings.ToLower(scheme) + "://" + strings.ToLower(host) + "/" + path
	}
	return u
}

// splitOCIReference splits repository@sha256:… or repository:tag into the repository and
// its version ("@sha256:…" or ":tag"; "" when neither).
func splitOCIReference(ref string) (string, string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		return strings.ToLower(ref[:i]), ref[i:]
	}
	slash := strings.LastIndex(ref, "/")
	if i := strings.LastIndex(ref, ":"); i > slash {
		return strings.ToLower(ref[:i]), ref[i:]
	}
	return strings.ToLower(ref), ""
}

// rootVersion is a sourced root's declared version: pinned (a commit or digest the content
// is fixed to) or floating (a ref, tag or Artifact name resolved at materialization).
type rootVersion struct {
	pinned, floating string
}

func versionOf(r *wbv1.EnvironmentRoot) (rootVersion, bool) {
	switch {
	case r.Git != nil && r.Git.Commit != nil:
		return rootVersion{pinned: *r.Git.Commit}, true
	case r.Git != nil && r.Git.Ref != nil:
		return rootVersion{floating: "ref:" + *r.Git.Ref}, true
	case r.Archive != nil && r.Archive.Digest != nil:
		return rootVersion{pinned: string(*r.Archive.Digest)}, true
	case r.Archive != nil:
		return rootVersion{floating: "artifact:" + string(r.Archive.ArtifactRef)}, true
	case r.OCI != nil:
		_, v := splitOCIReference(r.OCI.Ref)
		if d, ok := strings.CutPrefix(v, "@"); ok {
			return rootVersion{pinned: d}, true
		}
		return rootVersion{floating: "tag" + v}, true
	}
	return rootVersion{}, false
}

func rootNamed(roots []wbv1.EnvironmentRoot, name wbv1.RootName) *wbv1.EnvironmentRoot {
	for i := range roots {
		if roots[i].Name == name {
			return &roots[i]
		}
	}
	return nil
}

// resolvedVersion is what the node materialized for root name ("" when unknown or refused).
func resolvedVersion(st []wbv1.RootSourceStatus, name wbv1.RootName) string {
	for _, s := range st {
		if s.Name == name && s.Reason == "" {
			return s.Resolved
		}
	}
	return ""
}

// sourceVersionsMatch reports whether every sourced root of claimer is at a version the
// other spec (a template, materialized nil, or a member, materialized its status.roots)
// holds. With materialized nil a floating root of the other spec admits any pinned version
// (the member decides).
func sourceVersionsMatch(claimer, other *wbv1.EnvironmentSpec, materialized []wbv1.RootSourceStatus, member bool) bool {
	for i := range claimer.Roots {
		cv, sourced := versionOf(&claimer.Roots[i])
		if !sourced {
			continue
		}
		or := rootNamed(other.Roots, claimer.Roots[i].Name)
		if or == nil {
			return false
		}
		ov, ok := versionOf(or)
		if !ok {
			return false
		}
		switch {
		case cv.pinned != "" && ov.pinned == cv.pinned:
		case cv.pinned != "" && ov.floating != "" && !member:
		case cv.pinned != "" && ov.floating != "" && resolvedVersion(materialized, or.Name) == cv.pinned:
		case cv.floating != "" && ov.floating == cv.floating:
		default:
			return false
		}
	}
	return true
}

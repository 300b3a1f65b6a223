package webhooks

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/platform/sources"
)

// sourced reports whether a root is materialized from a workspace source (issue 28).
func sourced(r wbv1.EnvironmentRoot) bool { return r.Git != nil || r.Archive != nil || r.OCI != nil }

// validateRootSource checks a sourced root's shape with the node's own rules
// (internal/platform/sources): URL scheme and userinfo, commit shape, ref syntax, sparse
// paths, OCI reference. Policy (hosts, refs allowed) is the node's and is checked there.
func validateRootSource(p *field.Path, r wbv1.EnvironmentRoot) field.ErrorList {
	var errs field.ErrorList
	refuse := func(f *field.Path, v any, err error) {
		errs = append(errs, field.Invalid(f, v, err.Error()))
	}
	if g := r.Git; g != nil {
		src := sources.GitSource{URL: g.URL, Depth: int(ptrInt32(g.Depth))}
		if g.Commit != nil {
			src.Commit = *g.Commit
		}
		if g.Ref != nil {
			src.Ref = *g.Ref
		}
		for _, s := range g.SparsePaths {
			src.SparsePaths = append(src.SparsePaths, string(s))
		}
		if _, err := sources.ValidateGitSource(src); err != nil {
			refuse(p.Child("git"), g.URL, err)
		}
	}
	if o := r.OCI; o != nil {
		if _, _, err := sources.ParseOCIReference(o.Ref); err != nil {
			refuse(p.Child("oci", "ref"), o.Ref, err)
		}
	}
	return errs
}

func ptrInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// sourcesIntoVM reports whether a backend materializes sourced roots into a VM's working
// disk (qemu-microvm.v1's full-system variants; the node refuses a variant without a
// working disk with source-backend-unsupported, docs/workspace-sources.md).
func sourcesIntoVM(b wbv1.BackendID) bool { return b == wbv1.BackendQEMUMicroVM }

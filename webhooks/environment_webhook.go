package webhooks

import (
	"context"
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-environment,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=environments,verbs=create;update,versions=v1alpha1,name=venvironment.workbench.sensorium.dev,admissionReviewVersions=v1

// EnvironmentValidator admits Environments. Reader, when set, lists the Environments a new
// one's host directories are checked against (host-root tenancy, root-in-use); it is the
// API server, not a cache, so an Environment created a moment before is seen.
type EnvironmentValidator struct {
	Reader client.Reader
}

func setupEnvironment(mgr ctrl.Manager) error {
	return serve[*wbv1.Environment](mgr, &wbv1.Environment{}, nil, EnvironmentValidator{Reader: mgr.GetAPIReader()})
}

// ValidateCreate implements admission.Validator.
func (v EnvironmentValidator) ValidateCreate(ctx context.Context, obj *wbv1.Environment) (admission.Warnings, error) {
	return v.validate(ctx, obj.Labels, nil, obj)
}

// ValidateUpdate implements admission.Validator.
func (v EnvironmentValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.Environment) (admission.Warnings, error) {
	return v.validate(ctx, old.Labels, old, obj)
}

// ValidateDelete implements admission.Validator.
func (EnvironmentValidator) ValidateDelete(context.Context, *wbv1.Environment) (admission.Warnings, error) {
	return nil, nil
}

func (v EnvironmentValidator) validate(ctx context.Context, boundLabels map[string]string, old, env *wbv1.Environment) (admission.Warnings, error) {
	req, err := nodeRestrictedRequest(ctx, "Environment", env.Name)
	if err != nil {
		return nil, err
	}
	if isStatus(req) {
		return nil, nil
	}
	errs := validateEnvironmentSpec(&env.Spec)
	if old != nil {
		// The operational context only rises (actuation.CheckContextChange).
		errs = append(errs, refusalErrors(field.NewPath("spec", "operationalContext"),
			one(actuation.CheckContextChange(declaredContext(&old.Spec), declaredContext(&env.Spec))))...)
	} else {
		// A backend no node of this build can run is refused at create, not parked
		// unscheduled (an existing object is not refused on update, so its finalizers and
		// deletion still go through).
		errs = append(errs, refusalErrors(field.NewPath("spec"), one(actuation.CheckBackendOffered(string(env.Spec.Backend))))...)
	}
	if old == nil && len(errs) == 0 {
		// Roots are immutable (CEL): a host directory's tenancy is decided at create.
		tenancy, err := v.hostTenancy(ctx, env)
		if err != nil {
			return nil, err
		}
		errs = append(errs, tenancy...)
	}
	return nil, invalid("Environment", env.Name, errs)
}

// declaredContext is the class an environment spec declares, or "" when it declares none.
func declaredContext(spec *wbv1.EnvironmentSpec) actuation.ContextClass {
	if spec.OperationalContext == nil {
		return ""
	}
	return actuation.ContextClass(spec.OperationalContext.Class)
}

func validateEnvironmentSpec(spec *wbv1.EnvironmentSpec) field.ErrorList {
	var errs field.ErrorList
	rootsPath := field.NewPath("spec", "roots")
	for i, r := range spec.Roots {
		p := rootsPath.Index(i)
		switch spec.Backend {
		case wbv1.BackendHostLocal:
			if r.HostPath == nil {
				errs = append(errs, field.Required(p.Child("hostPath"), string(actuation.CodeRootInvalid)+": a host-local root must name a hostPath"))
			}
		case wbv1.BackendFixtureCopy:
			if r.Source == nil && !sourced(r) {
				errs = append(errs, field.Required(p.Child("source"), string(actuation.CodeRootInvalid)+": a fixture-copy.v1 root must name a source"))
			}
		default:
			if r.HostPath != nil || r.Source != nil || (sourced(r) && !sourcesIntoVM(spec.Backend)) {
				errs = append(errs, field.Forbidden(p, string(actuation.CodeRootInvalid)+": a VM root may not name a host directory (no host sharing)"))
			}
		}
		if sourced(r) && spec.Backend != wbv1.BackendFixtureCopy && !sourcesIntoVM(spec.Backend) {
			errs = append(errs, field.Forbidden(p, string(actuation.CodeSourceBackendUnsupported)+": a git, archive or oci root needs backend "+string(wbv1.BackendFixtureCopy)+" or "+string(wbv1.BackendQEMUMicroVM)+" (full-system variant)"))
		}
		errs = append(errs, validateRootSource(p, r)...)
		for _, hp := range []struct {
			name string
			v    *string
		}{{"hostPath", r.HostPath}, {"source", r.Source}} {
			if hp.v == nil {
				continue
			}
			if !path.IsAbs(*hp.v) || path.Clean(*hp.v) != *hp.v || *hp.v == "/" {
				errs = append(errs, field.Invalid(p.Child(hp.name), *hp.v, string(actuation.CodeRootInvalid)+": must be an absolute, clean directory other than /"))
			}
		}
	}
	// Nested or identical host directories would let one root reach into another (a
	// read-only root under a writable one, a .git of one root inside another): refused here
	// lexically and again by the node agent on the resolved directories.
	for i, a := range spec.Roots {
		for j := 0; j < i; j++ {
			b := spec.Roots[j]
			if a.HostPath != nil && b.HostPath != nil && pathsOverlap(*a.HostPath, *b.HostPath) {
				errs = append(errs, field.Invalid(rootsPath.Index(i).Child("hostPath"), *a.HostPath,
					string(actuation.CodeRootOverlap)+": must not be nested in, contain or equal the hostPath of root "+string(b.Name)))
			}
		}
	}
	if oc := spec.OperationalContext; oc != nil {
		summary := ""
		if oc.Summary != nil {
			summary = *oc.Summary
		}
		errs = append(errs, refusalErrors(field.NewPath("spec", "operationalContext"),
			actuation.ValidateOperationalContext(actuation.ContextClass(oc.Class), summary))...)
	}
	if spec.Requirements != nil {
		errs = append(errs, refusalErrors(field.NewPath("spec", "requirements"),
			actuation.ValidateRequirement(convert.Requirement(spec)))...)
	}
	return errs
}

// pathsOverlap reports whether two clean absolute paths are equal or one lies beneath the
// other (component-wise).
func pathsOverlap(a, b string) bool {
	within := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/") }
	return within(a, b) || within(b, a)
}

// maxTenancyListPages bounds the Environments one admission reads (pages of
// tenancyListPage): past it the create is refused rather than admitted unchecked.
const (
	tenancyListPage     = 500
	maxTenancyListPages = 40
)

// hostTenancy refuses, with root-in-use, a host-local root whose hostPath is, contains or
// lies inside a hostPath another Environment binds, in any namespace
// (actuation.CheckHostTenancy). The comparison is lexical on clean paths: symlinks are the
// node's to resolve, and the node re-checks against its own table before it allocates.
// Read-only bindings of one tree pass here (the node's rootSharing policy decides them);
// an Environment whose node reported its cleanup complete holds nothing.
func (v EnvironmentValidator) hostTenancy(ctx context.Context, env *wbv1.Environment) (field.ErrorList, error) {
	want := hostClaimsOfEnv(env, "")
	if v.Reader == nil || len(want) == 0 {
		return nil, nil
	}
	var held []actuation.HostClaim
	opts := []client.ListOption{client.Limit(tenancyListPage)}
	for page := 0; ; page++ {
		if page == maxTenancyListPages {
			return field.ErrorList{field.Forbidden(field.NewPath("spec", "roots"), fmt.Sprintf("%s: more than %d Environments to check the host directories against",
				actuation.CodeRootInUse, tenancyListPage*maxTenancyListPages))}, nil
		}
		var list wbv1.EnvironmentList
		if err := v.Reader.List(ctx, &list, opts...); err != nil {
			return nil, fmt.Errorf("listing Environments to check the host directories of %s/%s: %w", env.Namespace, env.Name, err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			if o.Namespace == env.Namespace && o.Name == env.Name {
				continue
			}
			if c := meta.FindStatusCondition(o.Status.Conditions, wbv1.ConditionCleanupComplete); c != nil && c.Status == metav1.ConditionTrue {
				continue
			}
			held = append(held, hostClaimsOfEnv(o, string(o.UID))...)
		}
		if list.Continue == "" {
			break
		}
		opts = []client.ListOption{client.Limit(tenancyListPage), client.Continue(list.Continue)}
	}
	var errs field.ErrorList
	for i, w := range want {
		if r := actuation.CheckHostTenancy([]actuation.HostClaim{w}, held, actuation.RootSharingReadOnly); r != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "roots").Index(i).Child("hostPath"), w.Path, string(r.Code)+": "+r.Message))
		}
	}
	return errs, nil
}

// hostClaimsOfEnv are the host directories a host-local Environment's spec binds.
func hostClaimsOfEnv(env *wbv1.Environment, holder string) []actuation.HostClaim {
	if env.Spec.Backend != wbv1.BackendHostLocal {
		return nil
	}
	var out []actuation.HostClaim
	for _, r := range env.Spec.Roots {
		if r.HostPath == nil || !path.IsAbs(*r.HostPath) {
			continue
		}
		out = append(out, actuation.HostClaim{Holder: holder, Ref: env.Namespace + "/" + env.Name, Root: string(r.Name),
			Path: path.Clean(*r.HostPath), ReadOnly: r.Access != nil && *r.Access == wbv1.RootAccessReadOnly})
	}
	return out
}

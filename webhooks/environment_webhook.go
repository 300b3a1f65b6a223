package webhooks

import (
	"context"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-environment,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=environments,verbs=create;update,versions=v1alpha1,name=venvironment.workbench.sensorium.dev,admissionReviewVersions=v1

// EnvironmentValidator admits Environments.
type EnvironmentValidator struct{}

func setupEnvironment(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &wbv1.Environment{}).WithValidator(EnvironmentValidator{}).Complete()
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

func (EnvironmentValidator) validate(ctx context.Context, boundLabels map[string]string, old, env *wbv1.Environment) (admission.Warnings, error) {
	req, err := request(ctx)
	if err != nil {
		return nil, err
	}
	if err := nodeRestriction(req, "Environment", env.Name); err != nil {
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
			if r.Source == nil {
				errs = append(errs, field.Required(p.Child("source"), string(actuation.CodeRootInvalid)+": a fixture-copy.v1 root must name a source"))
			}
		default:
			if r.HostPath != nil || r.Source != nil {
				errs = append(errs, field.Forbidden(p, string(actuation.CodeRootInvalid)+": a VM root may not name a host directory (no host sharing)"))
			}
		}
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

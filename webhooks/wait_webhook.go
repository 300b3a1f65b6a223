package webhooks

import (
	"context"
	"regexp"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// +kubebuilder:webhook:path=/validate-workbench-sensorium-dev-v1alpha1-wait,mutating=false,failurePolicy=fail,sideEffects=None,groups=workbench.sensorium.dev,resources=waits,verbs=create;update,versions=v1alpha1,name=vwait.workbench.sensorium.dev,admissionReviewVersions=v1

// WaitValidator admits Waits: exactly one scope (also CEL), a scope that fits the condition
// kind, a valid file path, a compilable bounded pattern, a bounded deadline.
type WaitValidator struct{}

// ValidateCreate implements admission.Validator.
func (WaitValidator) ValidateCreate(ctx context.Context, obj *wbv1.Wait) (admission.Warnings, error) {
	return nil, specRefusals(ctx, "Wait", obj.Name, func() field.ErrorList { return validateWaitSpec(&obj.Spec) })
}

// validateWaitSpec checks the condition against its scope and the deadline against the
// policy maximum.
func validateWaitSpec(spec *wbv1.WaitSpec) field.ErrorList {
	errs := validateCondition(field.NewPath("spec"), spec.Scope, &spec.Condition)
	if spec.DeadlineSeconds > MaxWaitDeadlineSeconds {
		errs = append(errs, field.Invalid(field.NewPath("spec", "deadlineSeconds"), spec.DeadlineSeconds,
			string(actuation.CodeDeadlineAboveMax)+": must be at most the policy maximum"))
	}
	return errs
}

// ValidateUpdate implements admission.Validator.
func (WaitValidator) ValidateUpdate(ctx context.Context, old, obj *wbv1.Wait) (admission.Warnings, error) {
	return nodeRestricted(ctx, "Wait", obj.Name)
}

// ValidateDelete implements admission.Validator.
func (WaitValidator) ValidateDelete(context.Context, *wbv1.Wait) (admission.Warnings, error) {
	return nil, nil
}

// MaxWaitDeadlineSeconds is the policy maximum for a wait's deadline.
const MaxWaitDeadlineSeconds = 3600

// scopeKinds says which scope each condition kind observes.
var scopeKinds = map[wbv1.ConditionKind]string{
	wbv1.ConditionKindOutputSince:    "session",
	wbv1.ConditionKindOutputMatches:  "session",
	wbv1.ConditionKindQuiescent:      "session",
	wbv1.ConditionKindProcessAlive:   "session",
	wbv1.ConditionKindNoProgress:     "session",
	wbv1.ConditionKindCommandDone:    "command",
	wbv1.ConditionKindFileExists:     "file",
	wbv1.ConditionKindDigestChanged:  "file",
	wbv1.ConditionKindArtifact:       "artifact",
	wbv1.ConditionKindEnvironmentRdy: "environment",
	wbv1.ConditionKindOperationDone:  "operation",
}

func scopeKind(s *wbv1.Scope) string {
	switch {
	case s == nil:
		return ""
	case s.SessionRef != nil:
		return "session"
	case s.CommandRef != nil:
		return "command"
	case s.EnvironmentRef != nil:
		return "environment"
	case s.File != nil:
		return "file"
	case s.ArtifactRef != nil:
		return "artifact"
	case s.OperationRef != nil:
		return "operation"
	}
	return ""
}

// validateCondition is shared by Wait and Probe.
func validateCondition(spec *field.Path, scope *wbv1.Scope, c *wbv1.WaitCondition) field.ErrorList {
	var errs field.ErrorList
	want, got := scopeKinds[c.Kind], scopeKind(scope)
	if got == "" || want != got {
		errs = append(errs, field.Invalid(spec.Child("scope"), got,
			string(actuation.CodeWaitScopeInvalid)+": condition "+string(c.Kind)+" must be scoped to a "+want))
	}
	if scope != nil && scope.File != nil {
		errs = append(errs, pathErrors(spec.Child("scope", "file", "path"), string(scope.File.Path), true)...)
	}
	if c.Kind == wbv1.ConditionKindOutputMatches {
		if c.Pattern == nil {
			errs = append(errs, field.Required(spec.Child("condition", "pattern"), string(actuation.CodeWaitScopeInvalid)+": terminal.output.matches needs a pattern"))
		} else if _, err := regexp.Compile(*c.Pattern); err != nil {
			errs = append(errs, field.Invalid(spec.Child("condition", "pattern"), *c.Pattern, string(actuation.CodeWaitScopeInvalid)+": must be an RE2 expression: "+err.Error()))
		}
	}
	if (c.Kind == wbv1.ConditionKindQuiescent || c.Kind == wbv1.ConditionKindNoProgress) && c.QuietSeconds == nil {
		errs = append(errs, field.Required(spec.Child("condition", "quietSeconds"), string(actuation.CodeWaitScopeInvalid)+": "+string(c.Kind)+" needs quietSeconds"))
	}
	if c.Kind == wbv1.ConditionKindDigestChanged && c.Digest == nil {
		errs = append(errs, field.Required(spec.Child("condition", "digest"), string(actuation.CodeWaitScopeInvalid)+": file.digest.changed needs the previous digest"))
	}
	return errs
}

package actuation

import (
	"slices"
	"strings"
)

// Bounds of capability descriptors and policy.
const (
	MaxCapabilitySet      = 16
	MaxIdentityBytes      = 253
	MaxEquivalenceSets    = 16
	MaxRequirementDevices = 16
)

// Capability is a host-attested backend capability descriptor
// (sensorium-virt-backend-capabilities.v1). JSON names of the semantic fields
// are the Dimension strings; plural fields are supported sets.
type Capability struct {
	BackendID    string `json:"backendID"`
	Provider     string `json:"provider"`
	Version      string `json:"version"`
	BinaryDigest string `json:"binaryDigest,omitempty"`
	PlatformRef  string `json:"platformRef"`

	Locality              string   `json:"locality"`
	HostArchitecture      string   `json:"hostArchitecture"`
	GuestArchitecture     string   `json:"guestArchitecture"`
	IsolationClass        string   `json:"isolationClass"`
	SystemFidelity        string   `json:"systemFidelity"`
	ControlTransport      string   `json:"controlTransport"`
	ControlGuestEndpoint  string   `json:"controlGuestEndpoint"`
	ControlHostEndpoint   string   `json:"controlHostEndpoint"`
	ControlChannelBinding string   `json:"controlChannelBinding"`
	BootMode              string   `json:"bootMode"`
	StorageFormats        []string `json:"storageFormats"`
	DeviceClasses         []string `json:"deviceClasses"`
	ConsoleMode           string   `json:"consoleMode"`
	NetworkProfiles       []string `json:"networkProfiles"`
	HostFilesystemSharing string   `json:"hostFilesystemSharing"`
	CredentialInjection   string   `json:"credentialInjection"`
	ResourceEnforcement   []string `json:"resourceEnforcement"`
	LifecycleOperations   []string `json:"lifecycleOperations"`
}

// scalar returns the scalar value of d, and whether d is scalar.
func (c Capability) scalar(d Dimension) (string, bool) {
	switch d {
	case DimLocality:
		return c.Locality, true
	case DimHostArchitecture:
		return c.HostArchitecture, true
	case DimGuestArchitecture:
		return c.GuestArchitecture, true
	case DimIsolationClass:
		return c.IsolationClass, true
	case DimSystemFidelity:
		return c.SystemFidelity, true
	case DimControlTransport:
		return c.ControlTransport, true
	case DimControlGuestEndpoint:
		return c.ControlGuestEndpoint, true
	case DimControlHostEndpoint:
		return c.ControlHostEndpoint, true
	case DimControlChannelBinding:
		return c.ControlChannelBinding, true
	case DimBootMode:
		return c.BootMode, true
	case DimConsoleMode:
		return c.ConsoleMode, true
	case DimHostFilesystemSharing:
		return c.HostFilesystemSharing, true
	case DimCredentialInjection:
		return c.CredentialInjection, true
	case DimBackendID:
		return c.BackendID, true
	}
	return "", false
}

// set returns the set value of a set-valued dimension.
func (c Capability) set(d Dimension) []string {
	switch d {
	case DimStorageFormats:
		return c.StorageFormats
	case DimDeviceClasses:
		return c.DeviceClasses
	case DimNetworkProfiles:
		return c.NetworkProfiles
	case DimResourceEnforcement:
		return c.ResourceEnforcement
	case DimLifecycleOperations:
		return c.LifecycleOperations
	}
	return nil
}

// values returns what the capability claims on d, as a sorted list (a
// scalar as one element; an empty scalar as none).
func (c Capability) values(d Dimension) []string {
	if v, ok := c.scalar(d); ok {
		if v == "" {
			return []string{}
		}
		return []string{v}
	}
	return nonNil(sortedCopy(c.set(d)))
}

// ValidateCapability checks a descriptor: identity fields present and bounded
// (backendID, provider, version, platformRef; binaryDigest empty or
// "sha256:<hex>"), every scalar dimension set to an admitted value, every set
// value admitted, unique and at most MaxCapabilitySet per set. All refusals
// are vocabulary-unknown, with the field named by its JSON name.
func ValidateCapability(c Capability) []*Refusal {
	var rs []*Refusal
	for _, id := range []struct{ field, value string }{
		{"backendID", c.BackendID}, {"provider", c.Provider}, {"version", c.Version}, {"platformRef", c.PlatformRef},
	} {
		if id.value == "" || len(id.value) > MaxIdentityBytes || !isPrintableASCII(id.value) {
			rs = append(rs, Refuse(CodeVocabularyUnknown, id.field, "must be a registered identity: printable ASCII, 1..%d bytes", MaxIdentityBytes))
		}
	}
	if c.BinaryDigest != "" && !IsDigest(c.BinaryDigest) {
		rs = append(rs, Refuse(CodeVocabularyUnknown, "binaryDigest", "must be sha256:<64 lowercase hex> (got %q)", truncateForMessage(c.BinaryDigest)))
	}
	for _, d := range Dimensions() {
		if IsSetDimension(d) {
			rs = append(rs, validateValueSet(d, c.set(d), string(d), MaxCapabilitySet)...)
			continue
		}
		v, _ := c.scalar(d)
		if !IsAdmittedValue(d, v) {
			rs = append(rs, Refuse(CodeVocabularyUnknown, string(d), "must be one of %q (got %q)", vocabularies[d], truncateForMessage(v)))
		}
	}
	return rs
}

// validateValueSet checks a bounded set of admitted, unique values.
func validateValueSet(d Dimension, values []string, field string, limit int) []*Refusal {
	var rs []*Refusal
	if len(values) > limit {
		rs = append(rs, Refuse(CodeVocabularyUnknown, field, "must not have more than %d values (got %d)", limit, len(values)))
	}
	for i, v := range values[:min(len(values), limit)] {
		f := fieldIndex(field, i)
		switch {
		case !IsAdmittedValue(d, v):
			rs = append(rs, Refuse(CodeVocabularyUnknown, f, "must be one of %q (got %q)", vocabularies[d], truncateForMessage(v)))
		case slices.Index(values, v) < i:
			rs = append(rs, Refuse(CodeVocabularyUnknown, f, "must not repeat %q", v))
		}
	}
	return rs
}

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Requirement is a normalized environment requirement; "" means not
// required.
type Requirement struct {
	BackendID             string   `json:"backendID,omitempty"`
	Locality              string   `json:"locality,omitempty"`
	Architecture          string   `json:"architecture,omitempty"` // matched against guestArchitecture
	IsolationClass        string   `json:"isolationClass,omitempty"`
	SystemFidelity        string   `json:"systemFidelity,omitempty"`
	ControlTransport      string   `json:"controlTransport,omitempty"`
	ControlChannelBinding string   `json:"controlChannelBinding,omitempty"`
	NetworkProfile        string   `json:"networkProfile,omitempty"` // one of the capability's networkProfiles
	HostFilesystemSharing string   `json:"hostFilesystemSharing,omitempty"`
	CredentialInjection   string   `json:"credentialInjection,omitempty"`
	DeviceClasses         []string `json:"deviceClasses,omitempty"` // all must be supported
}

// requirementTerm is one requirement field and the capability dimension it
// is matched against.
type requirementTerm struct {
	field string
	dim   Dimension
	want  string
}

// terms lists the scalar requirement fields in a fixed order.
func (r Requirement) terms() []requirementTerm {
	return []requirementTerm{
		{"locality", DimLocality, r.Locality},
		{"architecture", DimGuestArchitecture, r.Architecture},
		{"isolationClass", DimIsolationClass, r.IsolationClass},
		{"systemFidelity", DimSystemFidelity, r.SystemFidelity},
		{"controlTransport", DimControlTransport, r.ControlTransport},
		{"controlChannelBinding", DimControlChannelBinding, r.ControlChannelBinding},
		{"networkProfile", DimNetworkProfiles, r.NetworkProfile},
		{"hostFilesystemSharing", DimHostFilesystemSharing, r.HostFilesystemSharing},
		{"credentialInjection", DimCredentialInjection, r.CredentialInjection},
	}
}

// ValidateRequirement checks that every non-empty requirement value is
// admitted on its dimension and that deviceClasses is a bounded set of
// admitted, unique values (vocabulary-unknown). backendID, when set, must be
// a bounded printable identity.
func ValidateRequirement(r Requirement) []*Refusal {
	var rs []*Refusal
	if r.BackendID != "" && (len(r.BackendID) > MaxIdentityBytes || !isPrintableASCII(r.BackendID)) {
		rs = append(rs, Refuse(CodeVocabularyUnknown, "backendID", "must be a registered identity: printable ASCII, 1..%d bytes", MaxIdentityBytes))
	}
	for _, t := range r.terms() {
		if t.want != "" && !IsAdmittedValue(t.dim, t.want) {
			rs = append(rs, Refuse(CodeVocabularyUnknown, t.field, "must be one of %q (got %q)", vocabularies[t.dim], truncateForMessage(t.want)))
		}
	}
	rs = append(rs, validateValueSet(DimDeviceClasses, r.DeviceClasses, "deviceClasses", MaxRequirementDevices)...)
	return rs
}

// Equivalences is host policy: on one dimension, sets of admitted values that
// are treated as equal. Policy may equate only admitted values; it never
// infers equivalence from names.
type Equivalences map[Dimension][][]string

// ValidateEquivalences checks policy: known semantic dimensions and admitted
// values only (vocabulary-unknown); every set has at least two unique values
// and no more than the dimension's vocabulary,
// no value appears in two sets of one dimension, at most MaxEquivalenceSets
// sets per dimension (policy-invalid).
func ValidateEquivalences(e Equivalences) []*Refusal {
	var rs []*Refusal
	dims := make([]Dimension, 0, len(e))
	for d := range e {
		dims = append(dims, d)
	}
	slices.Sort(dims)
	for _, d := range dims {
		base := "equivalences." + string(d)
		if _, ok := vocabularies[d]; !ok {
			rs = append(rs, Refuse(CodeVocabularyUnknown, base, "must be a semantic dimension"))
			continue
		}
		sets := e[d]
		if len(sets) > MaxEquivalenceSets {
			rs = append(rs, Refuse(CodePolicyInvalid, base, "must not have more than %d sets (got %d)", MaxEquivalenceSets, len(sets)))
		}
		owner := map[string]int{}
		for i, set := range sets[:min(len(sets), MaxEquivalenceSets)] {
			f := fieldIndex(base, i)
			switch {
			case len(set) < 2:
				rs = append(rs, Refuse(CodePolicyInvalid, f, "must equate at least two values"))
			case len(set) > len(vocabularies[d]):
				rs = append(rs, Refuse(CodePolicyInvalid, f, "must not list more values than %s has (%d)", d, len(vocabularies[d])))
				continue
			}
			for j, v := range set {
				vf := fieldIndex(f, j)
				switch {
				case !IsAdmittedValue(d, v):
					rs = append(rs, Refuse(CodeVocabularyUnknown, vf, "must be an admitted value of %s (got %q)", d, truncateForMessage(v)))
				case slices.Index(set, v) < j:
					rs = append(rs, Refuse(CodePolicyInvalid, vf, "must not repeat %q", v))
				default:
					if prev, seen := owner[v]; seen && prev != i {
						rs = append(rs, Refuse(CodePolicyInvalid, vf, "must not appear in two sets (%q is also in set %d)", v, prev))
					}
					owner[v] = i
				}
			}
		}
	}
	return rs
}

// satisfies reports whether have satisfies want on d: both admitted, and
// equal or in one policy equivalence set.
func satisfies(d Dimension, want, have string, eq Equivalences) bool {
	if !IsAdmittedValue(d, want) || !IsAdmittedValue(d, have) {
		return false
	}
	if want == have {
		return true
	}
	for _, set := range eq[d] {
		if slices.Contains(set, want) && slices.Contains(set, have) {
			return true
		}
	}
	return false
}

// Unmet is one requirement the capability does not satisfy.
type Unmet struct {
	Dimension Dimension `json:"dimension"`
	Want      string    `json:"want"`
	Have      []string  `json:"have"`
}

// Match matches a requirement against a capability conjunctively: every
// non-empty requirement field must be satisfied, scalar dimensions by an
// equal value (or one equal under a policy equivalence set), networkProfile
// by membership in networkProfiles, every device class by membership in
// deviceClasses, architecture by guestArchitecture, backendID by identity
// (never by equivalence). Unknown, empty or missing values on either side
// never satisfy. It returns whether everything matched and all unmet
// requirements, sorted by dimension then wanted value.
func Match(req Requirement, c Capability, eq Equivalences) (bool, []Unmet) {
	var unmet []Unmet
	if req.BackendID != "" && req.BackendID != c.BackendID {
		unmet = append(unmet, Unmet{Dimension: DimBackendID, Want: req.BackendID, Have: c.values(DimBackendID)})
	}
	for _, t := range req.terms() {
		if t.want == "" {
			continue
		}
		ok := false
		for _, have := range c.values(t.dim) {
			if satisfies(t.dim, t.want, have, eq) {
				ok = true
				break
			}
		}
		if !ok {
			unmet = append(unmet, Unmet{Dimension: t.dim, Want: t.want, Have: c.values(t.dim)})
		}
	}
	for _, want := range req.DeviceClasses {
		ok := false
		for _, have := range c.values(DimDeviceClasses) {
			if satisfies(DimDeviceClasses, want, have, eq) {
				ok = true
				break
			}
		}
		if !ok {
			unmet = append(unmet, Unmet{Dimension: DimDeviceClasses, Want: want, Have: c.values(DimDeviceClasses)})
		}
	}
	slices.SortStableFunc(unmet, func(a, b Unmet) int {
		if c := strings.Compare(string(a.Dimension), string(b.Dimension)); c != 0 {
			return c
		}
		return strings.Compare(a.Want, b.Want)
	})
	return len(unmet) == 0, unmet
}

// CapabilityDigest digests a descriptor with its sets sorted, for binding
// into a Plan.
func CapabilityDigest(c Capability) string {
	c.StorageFormats = nonNil(sortedCopy(c.StorageFormats))
	c.DeviceClasses = nonNil(sortedCopy(c.DeviceClasses))
	c.NetworkProfiles = nonNil(sortedCopy(c.NetworkProfiles))
	c.ResourceEnforcement = nonNil(sortedCopy(c.ResourceEnforcement))
	c.LifecycleOperations = nonNil(sortedCopy(c.LifecycleOperations))
	return mustDigest(c)
}

// Package actions is the domain core of signed action catalogs (seed 002, issue 10):
// catalog validation with the seed's structural codes, argv rendering, parameter
// validation, canonical digests, Ed25519 signatures, signer scope, posture and signature
// policy. It imports no Kubernetes package; the webhooks, the manager and the node agent
// call it with the same data, so admission and dispatch decide alike.
//
// The types carry the same JSON field names as api/v1alpha1 (ActionCatalogSpec and
// friends), so a catalog converts by encoding the API value and decoding it here.
package actions

import (
	"encoding/json"

	"sensorium.dev/workbench/internal/actuation"
)

// Class is one of the seed's action classes.
type Class string

// The closed class catalog.
const (
	ClassReadOnlySpawn     Class = "C1"
	ClassAllowlistedScript Class = "C2"
	ClassScopedFSWrite     Class = "C3"
	ClassEgressNetwork     Class = "C4"
	ClassArtifactProducing Class = "C5"
	ClassComposed          Class = "C6"
	ClassOperatorGated     Class = "C7"
)

// Classes lists the closed class catalog in order.
var Classes = []Class{ClassReadOnlySpawn, ClassAllowlistedScript, ClassScopedFSWrite, ClassEgressNetwork, ClassArtifactProducing, ClassComposed, ClassOperatorGated}

// SeedName is the seed's name of a class.
func SeedName(c Class) string {
	switch c {
	case ClassReadOnlySpawn:
		return "read-only-spawn"
	case ClassAllowlistedScript:
		return "allowlisted-script"
	case ClassScopedFSWrite:
		return "scoped-fs-write"
	case ClassEgressNetwork:
		return "egress-network-spawn"
	case ClassArtifactProducing:
		return "artifact-producing-spawn"
	case ClassComposed:
		return "composed-spawn"
	case ClassOperatorGated:
		return "operator-gated-spawn"
	}
	return ""
}

// Known reports whether c is in the closed catalog.
func (c Class) Known() bool { return SeedName(c) != "" }

// Effects of a composed action.
const (
	EffectRead            = "read"
	EffectScopedFSWrite   = "scoped-fs-write"
	EffectEgressNetwork   = "egress-network"
	EffectArtifactProduce = "artifact-produce"
)

// Executable names the program.
type Executable struct {
	Kind        string `json:"kind"`
	Path        string `json:"path"`
	Interpreter string `json:"interpreter,omitempty"`
	SHA256      string `json:"sha256,omitempty"`
}

// Script is the C2 block.
type Script struct {
	AllowedRoots []string `json:"allowedRoots"`
}

// FSWrite is the C3 block.
type FSWrite struct {
	WriteRoot       actuation.CwdAddress `json:"writeRoot"`
	MaxBytesTotal   int64                `json:"maxBytesTotal"`
	MaxBytesPerFile int64                `json:"maxBytesPerFile"`
	PathPattern     string               `json:"pathPattern,omitempty"`
}

// Endpoint is one allowed egress destination.
type Endpoint struct {
	Host     string `json:"host"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol"`
}

// Egress is the C4 block.
type Egress struct {
	Endpoints             []Endpoint `json:"endpoints"`
	MaxBytesTotal         int64      `json:"maxBytesTotal"`
	MaxBytesPerConnection int64      `json:"maxBytesPerConnection"`
}

// Artifact is the C5 block.
type Artifact struct {
	MaxCount          int32    `json:"maxCount"`
	MaxBytesPer       int64    `json:"maxBytesPer"`
	MaxBytesTotal     int64    `json:"maxBytesTotal"`
	AllowedMediaTypes []string `json:"allowedMediaTypes"`
}

// Composed is the C6 block.
type Composed struct {
	Effects []string `json:"effects"`
}

// OutputLimits cap captured output.
type OutputLimits struct {
	StdoutBytes int64 `json:"stdoutBytes"`
	StderrBytes int64 `json:"stderrBytes"`
}

// ResultContract says what a result is.
type ResultContract struct {
	StdoutFormat        string   `json:"stdoutFormat"`
	ResultPointerFields []string `json:"resultPointerFields,omitempty"`
	SignalKind          string   `json:"signalKind,omitempty"`
	SignalFamily        string   `json:"signalFamily,omitempty"`
}

// Signing is the seed's scoped signer grant of one action (the API's ActionSigning).
type Signing struct {
	SignerRef      string   `json:"signerRef"`
	KeyKind        string   `json:"keyKind,omitempty"`
	AllowedDomains []string `json:"allowedDomains"`
	MaxSignatures  int32    `json:"maxSignatures"`
}

// Action is one catalog declaration.
type Action struct {
	ID                    string                `json:"id"`
	Class                 Class                 `json:"class"`
	Group                 string                `json:"group,omitempty"`
	Description           string                `json:"description,omitempty"`
	Executable            Executable            `json:"executable"`
	ArgvTemplate          []string              `json:"argvTemplate"`
	WorkingDirectory      *actuation.CwdAddress `json:"workingDirectory,omitempty"`
	ParametersSchema      json.RawMessage       `json:"parametersSchema,omitempty"`
	Script                *Script               `json:"script,omitempty"`
	FSWrite               *FSWrite              `json:"fsWrite,omitempty"`
	Egress                *Egress               `json:"egress,omitempty"`
	Artifact              *Artifact             `json:"artifact,omitempty"`
	Composed              *Composed             `json:"composed,omitempty"`
	Environment           []actuation.EnvVar    `json:"environment,omitempty"`
	DefaultTimeoutSeconds int64                 `json:"defaultTimeoutSeconds"`
	MaxTimeoutSeconds     int64                 `json:"maxTimeoutSeconds"`
	OutputLimits          OutputLimits          `json:"outputLimits"`
	ResultContract        ResultContract        `json:"resultContract"`
	Sensitivity           map[string]string     `json:"sensitivity,omitempty"`
	IncidentalEffects     []string              `json:"incidentalEffects,omitempty"`
	Signing               *Signing              `json:"signing,omitempty"`
}

// Catalog is the signed document: the spec of an ActionCatalog.
type Catalog struct {
	Actions []Action `json:"actions"`
}

// Find returns the action with id, or nil.
func (c *Catalog) Find(id string) *Action {
	for i := range c.Actions {
		if c.Actions[i].ID == id {
			return &c.Actions[i]
		}
	}
	return nil
}

// Effects returns the effect categories an action has: its composed effects for C6, the
// one category of its class otherwise (C7 runs with the read-only envelope).
func (a *Action) Effects() []string {
	switch a.Class {
	case ClassScopedFSWrite:
		return []string{EffectScopedFSWrite}
	case ClassEgressNetwork:
		return []string{EffectEgressNetwork}
	case ClassArtifactProducing:
		return []string{EffectArtifactProduce}
	case ClassComposed:
		if a.Composed != nil {
			return a.Composed.Effects
		}
		return nil
	}
	return []string{EffectRead}
}

// ParseCatalog decodes a catalog spec (the JSON encoding of the API's ActionCatalogSpec)
// and returns it with its digest computed from exactly these bytes.
func ParseCatalog(specJSON []byte) (Catalog, string, error) {
	var c Catalog
	if err := json.Unmarshal(specJSON, &c); err != nil {
		return Catalog{}, "", err
	}
	d, err := SpecDigestJSON(specJSON)
	return c, d, err
}

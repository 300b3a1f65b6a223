package actuation

// Artifact classification decides who may download an artifact (issue 25 item 8): the
// download route's "get" on artifacts/download suffices for public and internal artifacts;
// a confidential one (recording traces, by default) needs the virtual verb
// "get-confidential", a restricted one "get-restricted", each checked with
// SubjectAccessReview at the node that serves the blob. workbench-operator holds both;
// workbench-agent and workbench-viewer hold neither. A class the node does not know is
// treated as restricted (fail closed).

// Artifact classifications (the API's enum).
const (
	ClassificationPublic       = "public"
	ClassificationInternal     = "internal"
	ClassificationConfidential = "confidential"
	ClassificationRestricted   = "restricted"
)

// Virtual verbs on artifacts/download for classified artifacts.
const (
	VerbGetConfidential = "get-confidential"
	VerbGetRestricted   = "get-restricted"
)

// ArtifactDownloadVerb is the extra verb a caller must hold on artifacts/download to read
// an artifact of classification class, or "" when "get" suffices ("" class is the API's
// default, internal).
func ArtifactDownloadVerb(class string) string {
	switch class {
	case "", ClassificationPublic, ClassificationInternal:
		return ""
	case ClassificationConfidential:
		return VerbGetConfidential
	default:
		return VerbGetRestricted
	}
}

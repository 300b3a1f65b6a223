package webhooks

import (
	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/util/uuid"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// correlationPatch gives a TerminalCommand created without a correlation id one (issue 30
// item 5): "wb-" and a random UUID. A client-supplied id (any valid label value) is kept.
// labelsExist says whether /metadata/labels exists once the earlier operations applied.
// It also returns the command's id as stored (for its audit annotation, auditCorrelation).
func correlationPatch(obj *wbv1.TerminalCommand, labelsExist bool) ([]jsonpatch.Operation, string) {
	if id := obj.Labels[wbv1.CorrelationLabel]; id != "" {
		return nil, id
	}
	id := NewCorrelationID()
	return setCorrelationPatch(id, labelsExist), id
}

// NewCorrelationID generates a correlation id.
func NewCorrelationID() string { return "wb-" + string(uuid.NewUUID()) }

// correlationLabelPatch is correlationPatch for any kind: it adds a generated correlation
// id to an object whose labels carry none, and returns the object's id as stored.
func correlationLabelPatch(labels map[string]string) ([]jsonpatch.Operation, string) {
	if id := labels[wbv1.CorrelationLabel]; id != "" {
		return nil, id
	}
	id := NewCorrelationID()
	return setCorrelationPatch(id, len(labels) > 0), id
}

// setCorrelationPatch adds the correlation label id to an object without one; labelsExist
// says whether /metadata/labels exists.
func setCorrelationPatch(id string, labelsExist bool) []jsonpatch.Operation {
	if !labelsExist {
		return []jsonpatch.Operation{{Operation: "add", Path: "/metadata/labels", Value: map[string]string{wbv1.CorrelationLabel: id}}}
	}
	return []jsonpatch.Operation{{Operation: "add", Path: "/metadata/labels/" + pointerEscape(wbv1.CorrelationLabel), Value: id}}
}

package webhooks

import (
	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/util/uuid"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// correlationPatch gives a TerminalCommand created without a correlation id one (issue 30
// item 5): "wb-" and a random UUID. A client-supplied id (any valid label value) is kept.
// labelsExist says whether /metadata/labels exists once the earlier operations applied.
func correlationPatch(obj *wbv1.TerminalCommand, labelsExist bool) []jsonpatch.Operation {
	if obj.Labels[wbv1.CorrelationLabel] != "" {
		return nil
	}
	id := NewCorrelationID()
	if !labelsExist {
		return []jsonpatch.Operation{{Operation: "add", Path: "/metadata/labels", Value: map[string]string{wbv1.CorrelationLabel: id}}}
	}
	return []jsonpatch.Operation{{Operation: "add", Path: "/metadata/labels/" + pointerEscape(wbv1.CorrelationLabel), Value: id}}
}

// NewCorrelationID generates a correlation id.
func NewCorrelationID() string { return "wb-" + string(uuid.NewUUID()) }

// correlationLabelPatch is correlationPatch for any kind: it adds a generated correlation
// id to an object whose labels carry none.
func correlationLabelPatch(labels map[string]string) []jsonpatch.Operation {
	if labels[wbv1.CorrelationLabel] != "" {
		return nil
	}
	id := NewCorrelationID()
	if len(labels) == 0 {
		return []jsonpatch.Operation{{Operation: "add", Path: "/metadata/labels", Value: map[string]string{wbv1.CorrelationLabel: id}}}
	}
	return []jsonpatch.Operation{{Operation: "add", Path: "/metadata/labels/" + pointerEscape(wbv1.CorrelationLabel), Value: id}}
}

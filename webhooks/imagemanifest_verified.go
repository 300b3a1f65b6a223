package webhooks

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// nodeOwnVerifications refuses (node-restricted) a node agent's status write that adds,
// changes or removes a verifiedOn entry of another node, or touches anything of the status
// besides verifiedOn (the conditions and observedGeneration are the manager's).
func nodeOwnVerifications(ctx context.Context, old, obj *wbv1.ImageManifest) error {
	req, err := request(ctx)
	if err != nil {
		return err
	}
	node, isNode := NodeIdentity(req.UserInfo)
	if !isNode || !isStatus(req) {
		return nil
	}
	if node == "" {
		return forbidden("ImageManifest", obj.Name, actuation.CodeNodeRestricted, "node agent identity %q carries no node name", req.UserInfo.Username)
	}
	others := func(s *wbv1.ImageManifestStatus) map[string]wbv1.ImageVerification {
		m := map[string]wbv1.ImageVerification{}
		for _, v := range s.VerifiedOn {
			if v.NodeName != node {
				m[v.NodeName+"\x00"+v.Variant] = v
			}
		}
		return m
	}
	if !equality.Semantic.DeepEqual(others(&old.Status), others(&obj.Status)) {
		return forbidden("ImageManifest", obj.Name, actuation.CodeNodeRestricted, "node %s may write only its own verifiedOn entries", node)
	}
	if old.Status.ObservedGeneration != obj.Status.ObservedGeneration || !equality.Semantic.DeepEqual(old.Status.Conditions, obj.Status.Conditions) {
		return forbidden("ImageManifest", obj.Name, actuation.CodeNodeRestricted, "node %s may not write an image manifest's conditions", node)
	}
	return nil
}

package waits

import (
	"regexp"
	"time"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// ConditionRequest maps a Wait/Probe condition onto an engine request without its
// source and deadline.
func ConditionRequest(id string, c *wbv1.WaitCondition) (Request, error) {
	req := Request{ID: id, Kind: string(c.Kind)}
	if c.Pattern != nil {
		re, err := regexp.Compile(*c.Pattern)
		if err != nil {
			return req, actuation.Refusef(actuation.CodeWaitScopeInvalid, "pattern is not an RE2 expression: %v", err)
		}
		req.Pattern = re
	}
	if c.SinceSeq != nil && *c.SinceSeq > 0 {
		req.SinceSeq = uint64(*c.SinceSeq)
	}
	if c.QuietSeconds != nil {
		req.Quiet = time.Duration(*c.QuietSeconds) * time.Second
	}
	if c.Digest != nil {
		req.PrevDigest = string(*c.Digest)
	}
	return req, nil
}

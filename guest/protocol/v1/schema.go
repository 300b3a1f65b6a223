package protocol

import (
	"encoding/json"
	"sync"
)

// headerLayout is the frame header layout as documented in doc.go; it is part of the
// schema digest so a layout change cannot keep the digest.
const headerLayout = "magic[4]=WBGP version:u16 type:u8 flags:u8 seq:u64 deadlineMS:u32 length:u32 index:u32 count:u32 sha256[32]; big-endian; payload JSON (strict) or raw chunk bytes"

var schemaDigest = sync.OnceValue(func() string {
	doc := struct {
		Version  int       `json:"version"`
		Header   string    `json:"header"`
		Frames   []string  `json:"frames"`
		Limits   Limits    `json:"limits"`
		Ops      []Op      `json:"ops"`
		Outcomes []Outcome `json:"outcomes"`
		Signals  []string  `json:"signals"`
		StageRef string    `json:"stageRef"`
	}{
		Version:  Version,
		Header:   headerLayout,
		Frames:   []string{FrameHandshake.String(), FrameRequest.String(), FrameChunk.String(), FrameResult.String(), FrameError.String()},
		Limits:   WireLimits(),
		Ops:      Ops,
		Outcomes: []Outcome{OutcomeSucceeded, OutcomeRefused, OutcomeUnknown},
		Signals:  Signals,
		StageRef: StageRef("example", 0, DigestOf(nil)),
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err) // static data; cannot fail
	}
	return DigestOf(b)
})

// SchemaDigest is the digest of this protocol version's schema (version, header layout,
// frame types, limits, operations, outcomes, signals and the stage-ref construction). An
// ImageManifest's spec.digests.protocol carries it.
func SchemaDigest() string { return schemaDigest() }

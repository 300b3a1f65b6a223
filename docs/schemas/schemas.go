// Package schemas embeds the published JSON Schemas of docs/schemas so that the CLI
// serves exactly the files in the repository (`kubectl workbench skill schema`).
package schemas

import (
	_ "embed"
)

// SkillBundle is skill-bundle.schema.json: the wire format of a SkillBundle.
//
//go:embed skill-bundle.schema.json
var SkillBundle []byte

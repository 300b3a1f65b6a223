package skills

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"sensorium.dev/workbench/docs/schemas"
	"sensorium.dev/workbench/internal/actuation"
)

// SchemaURL is the $id of the published bundle schema (docs/schemas/skill-bundle.schema.json).
const SchemaURL = "https://workbench.sensorium.dev/schemas/skill-bundle.schema.json"

// BundleSchema returns the published JSON Schema of a SkillBundle.
func BundleSchema() []byte { return bytes.Clone(schemas.SkillBundle) }

var (
	schemaOnce     sync.Once
	compiledSchema *jsonschema.Schema
	schemaErr      error
)

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("the bundle schema loads no external reference (%s)", url)
}

func bundleSchema() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemas.SkillBundle))
		if err != nil {
			schemaErr = fmt.Errorf("the embedded bundle schema is not JSON: %w", err)
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.UseLoader(noLoader{})
		if err := c.AddResource(SchemaURL, doc); err != nil {
			schemaErr = err
			return
		}
		compiledSchema, schemaErr = c.Compile(SchemaURL)
	})
	return compiledSchema, schemaErr
}

// ValidateSchema checks a bundle document against the published schema; a violation is
// refused with bundle-schema-invalid naming the first failing location.
func ValidateSchema(raw []byte) error {
	s, err := bundleSchema()
	if err != nil {
		return fmt.Errorf("compiling the bundle schema: %w", err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return refuse(actuation.CodeBundleSchemaInvalid, "", "must be JSON: %v", err)
	}
	if err := s.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			msg := strings.Join(strings.Fields(ve.Error()), " ")
			if len(msg) > 1024 {
				msg = msg[:1024]
			}
			return refuse(actuation.CodeBundleSchemaInvalid, "", "must validate against %s: %s", SchemaURL, msg)
		}
		return refuse(actuation.CodeBundleSchemaInvalid, "", "must validate against %s: %v", SchemaURL, err)
	}
	return nil
}

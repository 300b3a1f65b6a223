package guestclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// jsonArray decodes a JSON array strictly (unknown fields and trailing data refused).
func jsonArray(b []byte, v any) error {
	if len(b) == 0 || b[0] != '[' {
		return fmt.Errorf("not a JSON array")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("trailing data after the array")
	}
	return nil
}

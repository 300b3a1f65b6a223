package skills

import (
	"errors"

	"sensorium.dev/workbench/internal/actuation"
)

func asRefusal(err error, r **actuation.Refusal) bool { return errors.As(err, r) }

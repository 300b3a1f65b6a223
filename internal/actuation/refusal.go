package actuation

import (
	"errors"
	"fmt"
)

// Refusef builds a Refusal without a field; the message is
// fmt.Sprintf(format, args...). Runtime packages (platform, backends, node
// agent, guest) use it where no API field is concerned.
func Refusef(code Code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrapf builds a Refusal that keeps cause reachable through errors.Is and
// errors.As.
func Wrapf(code Code, cause error, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Message: fmt.Sprintf(format, args...), Cause: cause}
}

// Unwrap returns the cause of the refusal (nil when there is none).
func (r *Refusal) Unwrap() error {
	if r == nil {
		return nil
	}
	return r.Cause
}

// Is makes errors.Is(err, &Refusal{Code: c}) match any refusal with code c.
func (r *Refusal) Is(target error) bool {
	t, ok := target.(*Refusal)
	return ok && r != nil && t != nil && t.Code == r.Code
}

// CodeOf returns the code of the first Refusal in err's chain, or "" when err
// carries no refusal. It is the only way the tree reads a refusal code from
// an error.
func CodeOf(err error) Code {
	var r *Refusal
	if errors.As(err, &r) && r != nil {
		return r.Code
	}
	return ""
}

package session

import (
	"reflect"
	"unsafe"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// MaxControlStringBytes bounds the data of one OSC/DCS/APC control string the screen model
// keeps (longer strings are cut by the parser). charmbracelet/x/vt v0.1.0 sizes this buffer
// at 4 MiB per emulator and offers no option to change it; at 4 MiB per idle session the
// node could hold far fewer sessions than its caps promise, so the buffer is resized here.
const MaxControlStringBytes = 64 << 10

// boundParser shrinks the emulator's parser data buffer. It reaches the unexported field
// through reflection because the library exposes no setter; TestParserBufferBounded fails
// loudly if a library upgrade moves the field, rather than silently keeping 4 MiB.
func boundParser(emu *vt.Emulator) bool {
	f := reflect.ValueOf(emu).Elem().FieldByName("parser")
	if !f.IsValid() || f.Type() != reflect.TypeOf((*ansi.Parser)(nil)) {
		return false
	}
	p := *(**ansi.Parser)(unsafe.Pointer(f.UnsafeAddr()))
	if p == nil {
		return false
	}
	p.SetDataSize(MaxControlStringBytes)
	return true
}

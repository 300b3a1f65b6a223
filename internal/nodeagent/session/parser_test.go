package session

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// TestParserBufferBounded checks that the screen model's control-string buffer is bounded to
// MaxControlStringBytes, not the library's 4 MiB.
func TestParserBufferBounded(t *testing.T) {
	emu := vt.NewEmulator(80, 24)
	if !boundParser(emu) {
		t.Fatal("charmbracelet/x/vt no longer has the parser field boundParser resizes: revisit parser.go")
	}
	f := reflect.ValueOf(emu).Elem().FieldByName("parser")
	p := *(**ansi.Parser)(unsafe.Pointer(f.UnsafeAddr()))
	data := reflect.ValueOf(p).Elem().FieldByName("data")
	if !data.IsValid() || data.Len() != MaxControlStringBytes {
		t.Fatalf("parser data buffer is %d bytes, want %d", data.Len(), MaxControlStringBytes)
	}
	// The emulator still renders after the resize.
	_, _ = emu.Write([]byte("\x1b]0;title\x07hello\r\n"))
	if got := emu.CellAt(0, 0); got == nil || got.Content != "h" {
		t.Fatalf("screen after resize: %+v", got)
	}
}

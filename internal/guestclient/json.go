package guestclient

import (
	"encoding/json"
	"errors"
	"io"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// MaxEntryJSON bounds the encoding of one snapshot entry: two paths of at most
// protocol.MaxPathLen bytes, each byte escaped to at most 6 (\u00XX), plus the fixed
// fields. A guest entry above it is refused before it is decoded.
const MaxEntryJSON = 2*6*protocol.MaxPathLen + 1024

// errWindow is the reader's refusal of an element above its window.
var errWindow = errors.New("element above its size bound")

// windowReader serves the decoder at most limit bytes of the stream: the decoder's
// buffer, which holds at least the element being decoded, never grows past one
// element's bound plus what it had already read ahead.
type windowReader struct {
	r             io.Reader
	served, limit int64
}

func (w *windowReader) Read(p []byte) (int, error) {
	if w.served >= w.limit {
		return 0, errWindow
	}
	if rest := w.limit - w.served; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := w.r.Read(p)
	w.served += int64(n)
	return n, err
}

// decodeEntries decodes a guest's snapshot listing, a JSON array of protocol.Entry, from
// r one element at a time: each element is bounded by MaxEntryJSON before it is decoded
// and counted as it is decoded, so a listing with more than max entries is refused at
// entry max+1, whatever the transfer holds. Unknown fields, a non-array and trailing
// data are refused too. Every refusal is CodeAnswerOverBound or CodeMalformedPayload.
func decodeEntries(r io.Reader, max uint32) ([]protocol.Entry, error) {
	w := &windowReader{r: r}
	dec := json.NewDecoder(w)
	dec.DisallowUnknownFields()
	window := func() { w.limit = dec.InputOffset() + MaxEntryJSON }
	fail := func(err error) error {
		if errors.Is(err, errWindow) {
			return refusef(actuation.CodeAnswerOverBound, "listing element at byte %d above %d bytes", dec.InputOffset(), MaxEntryJSON)
		}
		if actuation.CodeOf(err) != "" {
			return marked(err)
		}
		return refusef(actuation.CodeMalformedPayload, "listing: %s", protocol.Truncate(err.Error()))
	}
	window()
	if t, err := dec.Token(); err != nil {
		return nil, fail(err)
	} else if d, ok := t.(json.Delim); !ok || d != '[' {
		return nil, refusef(actuation.CodeMalformedPayload, "listing is not a JSON array")
	}
	entries := make([]protocol.Entry, 0, min(max, 1024))
	for {
		window()
		if !dec.More() {
			break
		}
		if uint32(len(entries)) >= max {
			return nil, refusef(actuation.CodeAnswerOverBound, "listing holds more than the %d entries asked for", max)
		}
		var e protocol.Entry
		if err := dec.Decode(&e); err != nil {
			return nil, fail(err)
		}
		entries = append(entries, e)
	}
	if t, err := dec.Token(); err != nil {
		return nil, fail(err)
	} else if d, ok := t.(json.Delim); !ok || d != ']' {
		return nil, refusef(actuation.CodeMalformedPayload, "listing is not a JSON array")
	}
	window()
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, refusef(actuation.CodeMalformedPayload, "trailing data after the listing")
		}
		return nil, fail(err)
	}
	return entries, nil
}

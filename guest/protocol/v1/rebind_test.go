package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

type rebindVectors struct {
	Current Binding `json:"current"`
	Frame   struct {
		Seq        uint64 `json:"seq"`
		DeadlineMS uint32 `json:"deadlineMS"`
		OpID       string `json:"opID"`
		Channel    string `json:"channel"`
		SHA256     string `json:"sha256"`
	} `json:"frame"`
	Vectors []struct {
		Name  string `json:"name"`
		Input struct {
			Current *Binding `json:"current"`
			Next    Binding  `json:"next"`
		} `json:"input"`
		Expect struct {
			OK   bool   `json:"ok"`
			Code string `json:"code"`
		} `json:"expect"`
	} `json:"vectors"`
}

func loadRebindVectors(t *testing.T) rebindVectors {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "vectors", "guest", "rebind.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc rebindVectors
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) < 10 {
		t.Fatalf("only %d vectors", len(doc.Vectors))
	}
	return doc
}

// TestRebindGoldenVectors runs test/vectors/guest/rebind.json against CheckRebind: every
// accepted next binding advances the generation under a fresh nonce on the same CID and
// image; every refusal carries the vector's code.
func TestRebindGoldenVectors(t *testing.T) {
	doc := loadRebindVectors(t)
	if err := doc.Current.Validate(); err != nil {
		t.Fatalf("current binding: %v", err)
	}
	for _, v := range doc.Vectors {
		cur := doc.Current
		if v.Input.Current != nil {
			cur = *v.Input.Current
		}
		next := v.Input.Next
		got := string(actuation.CodeOf(cur.CheckRebind(&next)))
		want := v.Expect.Code
		if v.Expect.OK {
			want = ""
		}
		if got != want {
			t.Errorf("%s: CheckRebind = %q, want %q", v.Name, got, want)
		}
		if got == "" {
			// An accepted rebind can never be answered by the previous binding's handshake.
			old := Handshake{Protocol: Version, Binding: cur}
			if actuation.CodeOf(next.Check(&old)) == "" {
				t.Errorf("%s: the previous binding's handshake passes the next binding", v.Name)
			}
		}
	}
}

// TestRebindFrameGolden pins the wire bytes of a rebind request: the op name, the args'
// JSON and the frame layout are part of the contract the guest image was built with.
func TestRebindFrameGolden(t *testing.T) {
	doc := loadRebindVectors(t)
	args, err := json.Marshal(RebindArgs{Binding: doc.Vectors[0].Input.Next})
	if err != nil {
		t.Fatal(err)
	}
	p, err := json.Marshal(Request{Op: OpRebind, OpID: doc.Frame.OpID, Channel: doc.Frame.Channel, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, &Frame{Header: Header{Type: FrameRequest, Seq: doc.Frame.Seq, DeadlineMS: doc.Frame.DeadlineMS}, Payload: p}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if got := hex.EncodeToString(sum[:]); got != doc.Frame.SHA256 {
		t.Fatalf("rebind frame sha256 %s, golden %s (frame %x)", got, doc.Frame.SHA256, buf.Bytes())
	}
	// The frame decodes back to the same request, strictly.
	f, err := ReadFrame(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var req Request
	if err := DecodeJSON(f.Payload, &req); err != nil || req.Op != OpRebind || !req.Op.Known() {
		t.Fatalf("decoded %+v: %v", req, err)
	}
	var back RebindArgs
	if err := DecodeJSON(req.Args, &back); err != nil || back.Binding != doc.Vectors[0].Input.Next {
		t.Fatalf("args %+v: %v", back, err)
	}
}

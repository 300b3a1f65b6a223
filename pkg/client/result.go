package client

import (
	"bytes"
	"unicode/utf8"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// RunResult is the outcome of a command as the CLI's `run -o json` and the MCP run_command
// tool report it.
type RunResult struct {
	Command         string `json:"command"`
	Phase           string `json:"phase"`
	ExitCode        *int32 `json:"exitCode,omitempty"`
	SignalOrigin    string `json:"signalOrigin,omitempty"`
	RefusalCode     string `json:"refusalCode,omitempty"`
	RefusalMessage  string `json:"refusalMessage,omitempty"`
	Output          string `json:"output"`
	OutputBase64    bool   `json:"outputBase64,omitempty"`
	OutputTruncated bool   `json:"outputTruncated,omitempty"`
	OutputDigest    string `json:"outputDigest,omitempty"`
	ConsentRequest  string `json:"consentRequest,omitempty"`
	CorrelationID   string `json:"correlationID,omitempty"`
}

// ResultOf summarizes a final command with the output read (nil when unread).
func ResultOf(cmd *wbv1.TerminalCommand, output *CappedBuffer) RunResult {
	r := RunResult{Command: cmd.Name, Phase: string(wbv1.CommandPhaseFor(cmd.Status.Conditions)), ExitCode: cmd.Status.ExitCode,
		SignalOrigin: string(cmd.Status.SignalOrigin), OutputDigest: string(cmd.Status.OutputDigest),
		ConsentRequest: cmd.Status.ConsentRequestRef, OutputTruncated: cmd.Status.Truncated, CorrelationID: cmd.Labels[wbv1.CorrelationLabel]}
	if cmd.Status.Refusal != nil {
		r.RefusalCode, r.RefusalMessage = cmd.Status.Refusal.Code, cmd.Status.Refusal.Message
	}
	if output != nil {
		b := output.Bytes()
		if utf8.Valid(b) {
			r.Output = string(b)
		} else {
			r.Output, r.OutputBase64 = encodeBase64(b), true
		}
		r.OutputTruncated = r.OutputTruncated || output.Truncated
	}
	return r
}

// CappedBuffer keeps at most Cap bytes and records that more arrived; writes never fail,
// so a stream copied into it is read to its end.
type CappedBuffer struct {
	Cap       int
	Truncated bool
	buf       bytes.Buffer
}

func (c *CappedBuffer) Write(p []byte) (int, error) {
	room := c.Cap - c.buf.Len()
	if room < len(p) {
		c.Truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}

// Bytes is what was kept.
func (c *CappedBuffer) Bytes() []byte { return c.buf.Bytes() }

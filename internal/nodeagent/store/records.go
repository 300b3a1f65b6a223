package store

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"

	"sensorium.dev/workbench/internal/actuation"
)

// Phases the store itself writes or reasons about.
const (
	PhaseStarting = "Starting" // RecordCommandStart default: admitted, process not yet proven started
	PhaseFailed   = "Failed"
	PhaseApplying = "Applying" // patch write in progress (agent-internal)
)

// Settled phases: nothing is in flight for the agent. Records in any other
// phase (including unknown ones) are "live", and a previous process
// generation's live record is never trusted after restart.
var (
	terminalSession = set("Closed", "Failed", "Expired", "Killed")
	terminalCommand = set("Succeeded", "Failed", "TimedOut", "Cancelled", "Refused")
	terminalWait    = set("Satisfied", "TimedOut", "Cancelled", "Failed", "Expired")
	terminalPatch   = set("AwaitingApproval", "Applied", "Rejected", "Failed")
)

func set(xs ...string) map[string]bool {
	m := map[string]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Recovery outcome vocabulary (seed: boring, operator-readable).
const (
	OutcomeRecovered       = "recovered"
	OutcomeTerminated      = "terminated"
	OutcomeQuarantined     = "quarantined"
	OutcomeFailedRetryable = "failed-retryable"
	OutcomeFailedPermanent = "failed-permanent"
	OutcomeExpired         = "expired"
	OutcomeUnknown         = "unknown"
)

// Environment is an Environment bound to this node.
type Environment struct {
	UID            string            `json:"uid"`
	Namespace      string            `json:"namespace"`
	Name           string            `json:"name"`
	Backend        string            `json:"backend"`
	RootPaths      map[string]string `json:"rootPaths,omitempty"` // root name -> admitted host path
	ManagedCopyDir string            `json:"managedCopyDir,omitempty"`
	// RootIdentities are the "dev:ino" of each host root pinned when the environment first
	// became ready: a root whose directory is later another one fails with root-changed.
	RootIdentities map[string]string `json:"rootIdentities,omitempty"`
	// HostClaims are the symlink-resolved host directories the environment binds
	// (host-local), the node's table of host-root tenancy: written with ClaimEnvironment,
	// freed when the record is deleted (teardown, or the recovery sweep of an orphan).
	HostClaims []actuation.HostClaim `json:"hostClaims,omitempty"`
	Phase      string                `json:"phase"`
	UpdatedAt  time.Time             `json:"updatedAt"`
}

// Session is a TerminalSession's process identity and progress.
type Session struct {
	UID            string `json:"uid"`
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	EnvironmentUID string `json:"environmentUID"`
	PID            int    `json:"pid,omitempty"`
	PGID           int    `json:"pgid,omitempty"`
	// StartTime is field 22 of /proc/<pid>/stat (clock ticks after boot): with
	// PID it identifies the process across PID reuse.
	StartTime uint64    `json:"startTime,omitempty"`
	Phase     string    `json:"phase"`
	LastSeq   uint64    `json:"lastSeq"`
	Reason    string    `json:"reason,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Command is a TerminalCommand admission and its process identity.
type Command struct {
	UID            string `json:"uid"`
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	SessionUID     string `json:"sessionUID,omitempty"`
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
	ArgvDigest     string `json:"argvDigest"`
	// AdmittedBy and AdmittedContext are the node's own decision (who admitted the command,
	// under which operational context of its environment), recorded with the start: the
	// decision reaches status in the same write as the start or the outcome, so a record
	// without a decision in status (a crash between the two) still names it.
	AdmittedBy      string    `json:"admittedBy,omitempty"`
	AdmittedContext string    `json:"admittedContext,omitempty"`
	PID             int       `json:"pid,omitempty"`
	PGID            int       `json:"pgid,omitempty"`
	StartTime       uint64    `json:"startTime,omitempty"`
	Phase           string    `json:"phase"`
	Outcome         string    `json:"outcome,omitempty"`
	CreatedAt       time.Time `json:"createdAt"`
	UpdatedAt       time.Time `json:"updatedAt"`
}

// Wait is a Wait's lifecycle.
type Wait struct {
	UID       string    `json:"uid"`
	Namespace string    `json:"namespace,omitempty"`
	Name      string    `json:"name,omitempty"`
	Phase     string    `json:"phase"`
	Deadline  time.Time `json:"deadline"`
	Reason    string    `json:"reason,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// PatchFile mirrors FilePatch.status.changedFiles[].
type PatchFile struct {
	Path         string `json:"path"`
	Op           string `json:"op"`
	DigestBefore string `json:"digestBefore,omitempty"`
	DigestAfter  string `json:"digestAfter,omitempty"`
}

// Patch is a FilePatch attempt (digests only, never content).
type Patch struct {
	UID            string      `json:"uid"`
	Namespace      string      `json:"namespace"`
	Name           string      `json:"name"`
	EnvironmentUID string      `json:"environmentUID"`
	Root           string      `json:"root"`
	Digest         string      `json:"digest"`
	Phase          string      `json:"phase"`
	ChangedFiles   []PatchFile `json:"changedFiles,omitempty"`
	RefusalCode    string      `json:"refusalCode,omitempty"`
	UpdatedAt      time.Time   `json:"updatedAt"`
}

// TempRoot is a temporary directory the agent created and must clean up.
type TempRoot struct {
	Path      string    `json:"path"`
	Owner     string    `json:"owner"` // e.g. "environment/<uid>"
	CreatedAt time.Time `json:"createdAt"`
}

// Recovery is one metadata-only recovery fact.
type Recovery struct {
	ID       string    `json:"id"`
	Time     time.Time `json:"time"`
	Resource string    `json:"resource"` // e.g. "command/ns/name (uid)"
	Action   string    `json:"action"`   // e.g. "mark-interrupted", "kill-process-group"
	Outcome  string    `json:"outcome"`  // Outcome* vocabulary
	Detail   string    `json:"detail,omitempty"`
}

// InterruptSummary reports what MarkInterrupted changed.
type InterruptSummary struct {
	Sessions, Commands, Waits, Patches int
	Records                            []Recovery
}

// MarkInterrupted runs in one transaction at agent start (after the process
// sweep): every session, command, wait or patch left in a non-terminal phase by
// the previous process generation becomes Failed with reason
// "interrupted: <reason>", and one recovery fact is appended per record.
// Sessions and commands are failed-permanent (never re-run), waits
// failed-retryable (they can be re-registered), an Applying patch unknown (its
// outcome cannot be proved). Idempotent: a second call changes nothing.
func (db *DB) MarkInterrupted(reason string, now time.Time) (*InterruptSummary, error) {
	now = now.UTC()
	why := "interrupted: " + reason
	sum := &InterruptSummary{}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		rec := func(kind, ns, name, uid, outcome string) error {
			r, err := appendRecoveryTx(tx, Recovery{
				Time:     now,
				Resource: fmt.Sprintf("%s/%s/%s (%s)", kind, ns, name, uid),
				Action:   "mark-interrupted",
				Outcome:  outcome,
				Detail:   why,
			})
			sum.Records = append(sum.Records, r)
			return err
		}
		var err error
		if sum.Sessions, err = interruptTx(tx, bucketSessions, "session", OutcomeFailedPermanent, rec,
			func(v *Session) bool { return !terminalSession[v.Phase] },
			func(s *Session) (string, string, string) {
				s.Phase, s.Reason, s.UpdatedAt = PhaseFailed, why, now
				return s.UID, s.Namespace, s.Name
			}); err != nil {
			return err
		}
		if sum.Commands, err = interruptTx(tx, bucketCommands, "command", OutcomeFailedPermanent, rec,
			func(v *Command) bool { return !terminalCommand[v.Phase] },
			func(c *Command) (string, string, string) {
				c.Phase, c.Outcome, c.UpdatedAt = PhaseFailed, why, now
				return c.UID, c.Namespace, c.Name
			}); err != nil {
			return err
		}
		if sum.Waits, err = interruptTx(tx, bucketWaits, "wait", OutcomeFailedRetryable, rec,
			func(v *Wait) bool { return !terminalWait[v.Phase] },
			func(w *Wait) (string, string, string) {
				w.Phase, w.Reason, w.UpdatedAt = PhaseFailed, why, now
				return w.UID, w.Namespace, w.Name
			}); err != nil {
			return err
		}
		if sum.Patches, err = interruptTx(tx, bucketPatches, "patch", OutcomeUnknown, rec,
			func(v *Patch) bool { return !terminalPatch[v.Phase] },
			func(p *Patch) (string, string, string) {
				p.Phase, p.RefusalCode, p.UpdatedAt = PhaseFailed, "interrupted", now
				return p.UID, p.Namespace, p.Name
			}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: mark interrupted in %s: %w", db.path, err)
	}
	return sum, nil
}

// interruptTx fails every record of bucket still live (not in a terminal phase): mark sets
// its failed phase and returns its UID, namespace and name; it is put back and one recovery
// fact (kind, outcome) recorded by rec. It returns how many it failed.
func interruptTx[T any](tx *bolt.Tx, bucket []byte, kind, outcome string, rec func(kind, ns, name, uid, outcome string) error,
	live func(*T) bool, mark func(*T) (uid, ns, name string)) (int, error) {
	recs, err := liveTx[T](tx, bucket, live)
	if err != nil {
		return 0, err
	}
	for i := range recs {
		uid, ns, name := mark(&recs[i])
		if err := putTx(tx, bucket, uid, &recs[i]); err != nil {
			return i, err
		}
		if err := rec(kind, ns, name, uid, outcome); err != nil {
			return i, err
		}
	}
	return len(recs), nil
}

// liveTx collects matching records first (bbolt forbids mutating a bucket
// while iterating it).
func liveTx[T any](tx *bolt.Tx, bucket []byte, live func(*T) bool) ([]T, error) {
	var out []T
	c := tx.Bucket(bucket).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		v, _, err := getTx[T](tx, bucket, string(k))
		if err != nil {
			return nil, err
		}
		if live(&v) {
			out = append(out, v)
		}
	}
	return out, nil
}

// maxProcStat bounds the read of /proc/<pid>/stat.
const maxProcStat = 4096

// ReadProcStartTime returns field 22 (starttime, clock ticks after boot) of
// /proc/<pid>/stat. Together with the pid it names one process incarnation, so
// a recovery sweep never signals a recycled pid.
func ReadProcStartTime(pid int) (uint64, error) {
	p := "/proc/" + strconv.Itoa(pid) + "/stat"
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("store: %s: %w", p, err)
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, maxProcStat)
	n, err := f.Read(buf)
	if err != nil {
		return 0, fmt.Errorf("store: read %s: %w", p, err)
	}
	return parseProcStartTime(buf[:n])
}

func parseProcStartTime(stat []byte) (uint64, error) {
	// comm (field 2) may contain spaces and ')': fields resume after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("store: malformed /proc stat: no ')'")
	}
	fields := bytes.Fields(stat[i+1:])
	const idx = 22 - 3 // fields[0] is field 3 (state)
	if len(fields) <= idx {
		return 0, fmt.Errorf("store: malformed /proc stat: %d fields after comm", len(fields))
	}
	v, err := strconv.ParseUint(string(fields[idx]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("store: malformed /proc stat starttime %q: %w", fields[idx], err)
	}
	return v, nil
}

package vfkitsystem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/vmrecord"
)

// Recovery outcomes (the node agent's vocabulary).
const (
	OutcomeRecovered   = "recovered"
	OutcomeTerminated  = "terminated"
	OutcomeQuarantined = "quarantined"
	OutcomeFailed      = "failed-retryable"
)

// FileState is how a recorded file compares with what is on disk now.
type FileState string

// File states.
const (
	FileUnrecorded FileState = "unrecorded" // the record names no such file (not created yet)
	FileMatches    FileState = "matches"    // same path, device and inode
	FileMissing    FileState = "missing"
	FileReplaced   FileState = "replaced" // another inode (or not a regular file / socket) at the path
)

// Observation is what a sweep measured, now, for one recorded VM.
type Observation struct {
	// OwnerAlive: a process with the record's owner PID and start time exists.
	OwnerAlive bool
	// OwnerIsSelf: that process is this one.
	OwnerIsSelf bool
	// RunsHere: this process's VM table holds the VM.
	RunsHere bool
	Disk     FileState
	EFIVars  FileState
}

// Decision is what recovery does with one VM directory.
type Decision struct {
	Outcome string // "" when there is nothing to report
	// RemoveDir removes the whole directory (disk included).
	RemoveDir bool
	// RemoveBoot removes this boot's files (binding disk, socket, serial, temp files).
	RemoveBoot bool
	// RemoveDisk and RemoveEFIVars remove the environment's disk and variable store.
	RemoveDisk, RemoveEFIVars bool
	// Tombstone rewrites the record as stopped (keeping the generation).
	Tombstone bool
	Message   string
}

// Decide is the recovery rule for one VM directory. rec is nil when the record is missing
// or unreadable (recErr says why); known says whether the node agent's store still records
// the environment. A VZVirtualMachine lives in its owner's process and cannot be adopted
// by another: a VM whose owner is gone is gone with it, and a VM whose owner still runs
// and is not this process belongs to that process (another agent instance), which this
// one neither stops nor deletes from under it.
func Decide(rec *Record, recErr error, known bool, obs Observation) Decision {
	switch {
	case rec == nil && !known:
		return Decision{Outcome: OutcomeTerminated, RemoveDir: true, Message: fmt.Sprintf("environment not known to the store, no usable record (%v): directory removed", recErr)}
	case rec == nil:
		// Nothing in the directory is provably the environment's: remove it all; the next
		// Allocate clones a fresh disk and boots generation 1.
		return Decision{Outcome: OutcomeQuarantined, RemoveDir: true, Message: fmt.Sprintf("unreadable recovery record (%v): working files and disk removed", recErr)}
	case obs.RunsHere:
		return Decision{Outcome: OutcomeRecovered, Message: fmt.Sprintf("generation %d already runs in this process", rec.Generation)}
	case rec.Owner != nil && obs.OwnerAlive && !obs.OwnerIsSelf:
		return Decision{Outcome: OutcomeQuarantined, Message: fmt.Sprintf("generation %d is owned by live process %d (another agent instance): left untouched", rec.Generation, rec.Owner.PID)}
	case !known:
		return Decision{Outcome: OutcomeTerminated, RemoveDir: true, Message: "environment not known to the store: VM gone with its owner, disk and files removed"}
	case rec.State == StateStopped:
		d := Decision{RemoveBoot: true}
		if obs.Disk == FileMissing || obs.Disk == FileReplaced || obs.EFIVars == FileReplaced {
			d.Outcome, d.RemoveDisk, d.RemoveEFIVars = OutcomeQuarantined, true, true
			d.Message = fmt.Sprintf("stopped generation %d: working disk %s, EFI store %s: both removed, the next boot clones afresh", rec.Generation, obs.Disk, obs.EFIVars)
		}
		return d
	}
	// Known, recorded, not running here, owner gone (or never recorded): the boot ended.
	d := Decision{Outcome: OutcomeQuarantined, RemoveBoot: true, Tombstone: true}
	switch {
	case obs.Disk == FileMatches && obs.EFIVars != FileReplaced:
		d.Message = fmt.Sprintf("generation %d ended with its owner process; the working disk (same inode) is kept for the next boot", rec.Generation)
	default:
		d.RemoveDisk, d.RemoveEFIVars = true, true
		d.Message = fmt.Sprintf("generation %d ended with its owner process; working disk %s, EFI store %s: both removed, the next boot clones afresh",
			rec.Generation, obs.Disk, obs.EFIVars)
	}
	return d
}

// bootFiles are the names of one boot's files in a VM directory.
var bootFiles = []string{BindingDiskName, GuestSockName, SerialLogName}

// Apply carries out d on dir; rec is the record read (nil when none). It returns what
// remains that should not.
func Apply(dir string, rec *Record, d Decision) ([]string, error) {
	if d.RemoveDir {
		if err := os.RemoveAll(dir); err != nil {
			return []string{dir}, err
		}
		return nil, nil
	}
	var remove []string
	if d.RemoveBoot {
		remove = append(remove, bootFiles...)
		names, err := listDir(dir)
		if err != nil {
			return []string{dir}, err
		}
		for _, n := range names {
			if len(n) > len(tmpPrefix) && n[:len(tmpPrefix)] == tmpPrefix {
				remove = append(remove, n)
			}
		}
	}
	if d.RemoveDisk {
		remove = append(remove, DiskName)
	}
	if d.RemoveEFIVars {
		remove = append(remove, EFIVarsName)
	}
	var left []string
	var errs []error
	for _, n := range remove {
		p := filepath.Join(dir, n)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			left, errs = append(left, p), append(errs, err)
		}
	}
	if d.Tombstone && rec != nil {
		t := *rec
		t.State, t.Reason, t.Owner, t.Socket, t.BindingDisk = StateStopped, d.Message, nil, nil, nil
		if d.RemoveDisk {
			t.Disk, t.CloneOf = nil, ""
		}
		if d.RemoveEFIVars {
			t.EFIVars = nil
		}
		if err := WriteRecord(dir, &t); err != nil {
			left, errs = append(left, filepath.Join(dir, RecordName)), append(errs, err)
		}
	}
	return left, errors.Join(errs...)
}

// Observer measures one recorded VM (platform code: process and file identities).
type Observer func(dir string, rec *Record) Observation

// Sweep is the recovery sweep over root (<StateDir>/vfkit): every entry is decided by
// Decide with obs's measurements and carried out by Apply. Non-directories and
// directories that are not environment IDs are removed. Failures are reported per
// resource as failed-retryable; the error is non-nil only when the sweep could not run.
func Sweep(root string, known map[string]backends.Spec, lim Limits, obs Observer) ([]backends.RecoveryAction, error) {
	names, err := listDir(root)
	if err != nil {
		return nil, fmt.Errorf("recover %s: %w", ID, err)
	}
	var actions []backends.RecoveryAction
	act := func(resource, outcome, msg string) {
		actions = append(actions, backends.RecoveryAction{Resource: resource, Outcome: outcome, Message: msg})
	}
	for _, name := range names {
		path := filepath.Join(root, name)
		fi, err := os.Lstat(path)
		if err != nil {
			continue
		}
		if !fi.IsDir() || CheckID(name) != nil {
			if err := os.RemoveAll(path); err != nil {
				act(path, OutcomeFailed, "not an environment's VM directory; remove: "+err.Error())
			} else {
				act(path, OutcomeTerminated, "not an environment's VM directory")
			}
			continue
		}
		rec, rerr := ReadRecord(path, lim)
		var o Observation
		if rec != nil {
			o = obs(path, rec)
		}
		_, isKnown := known[name]
		d := Decide(rec, rerr, isKnown, o)
		left, err := Apply(path, rec, d)
		switch {
		case err != nil || len(left) > 0:
			act(path, OutcomeFailed, fmt.Sprintf("%s; left %v: %v", d.Message, left, err))
		case d.Outcome != "":
			act(path, d.Outcome, d.Message)
		}
	}
	return actions, nil
}

// listDir lists a directory's names (bounded, sorted); a missing directory is empty.
func listDir(dir string) ([]string, error) { return vmrecord.ListDir(dir) }

// CompareFile compares a recorded identity with now (now is the zero identity and err
// os.ErrNotExist when the path is gone).
func CompareFile(rec *FileIdentity, now FileIdentity, err error) FileState {
	switch {
	case rec == nil:
		return FileUnrecorded
	case errors.Is(err, os.ErrNotExist):
		return FileMissing
	case err != nil || now.Dev != rec.Dev || now.Ino != rec.Ino:
		return FileReplaced
	}
	return FileMatches
}

// ProcessAlive reports whether the process id pins still runs (same PID, same start).
func ProcessAlive(id ProcessIdentity) bool {
	now, err := ProcessIdentityOf(id.PID)
	return err == nil && now.Start == id.Start
}

// ObserveWith measures rec with the platform's identity functions; self is this process.
func ObserveWith(rec *Record, self ProcessIdentity, runsHere bool) Observation {
	o := Observation{RunsHere: runsHere}
	if rec.Owner != nil {
		o.OwnerAlive = ProcessAlive(*rec.Owner)
		o.OwnerIsSelf = rec.Owner.PID == self.PID && rec.Owner.Start == self.Start
	}
	if rec.Disk != nil {
		now, err := StatFile(rec.Disk.Path)
		o.Disk = CompareFile(rec.Disk, now, err)
	} else {
		o.Disk = FileUnrecorded
	}
	if rec.EFIVars != nil {
		now, err := StatFile(rec.EFIVars.Path)
		o.EFIVars = CompareFile(rec.EFIVars, now, err)
	} else {
		o.EFIVars = FileUnrecorded
	}
	return o
}

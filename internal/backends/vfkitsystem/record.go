package vfkitsystem

import (
	"fmt"
	"path/filepath"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/backends/vmrecord"
)

// Names inside one VM directory (<StateDir>/vfkit/<ID>).
const (
	RecordName      = "record.json"
	DiskName        = "disk.raw"
	EFIVarsName     = "efi.vars"
	BindingDiskName = "binding.img"
	GuestSockName   = "g.sock"
	SerialLogName   = "serial.log"
	tmpPrefix       = vmrecord.TmpPrefix
	recordLimit     = 64 << 10
)

// VM states in the record. They only move forward within one boot: launching → running
// → draining; a boot that ended leaves a "stopped" tombstone that keeps the generation
// (and the working disk, which belongs to the environment, not to the boot) so the next
// boot advances the generation.
const (
	StateLaunching = "launching"
	StateRunning   = "running"
	StateDraining  = "draining"
	StateStopped   = "stopped"
)

const recordSchema = "vfkit-system.v1.record"

// ProcessIdentity pins a process: its PID and its start time (macOS: kinfo_proc's
// p_starttime in microseconds since the epoch; Linux, where the platform-neutral code is
// tested: /proc/<pid>/stat's starttime in clock ticks since boot), so a reused PID is
// never mistaken for it.
// The Virtualization framework runs the guest in an XPC service process owned by the
// process that created the VZVirtualMachine (the node agent) and ends it when that
// process exits; the owner is therefore what identifies a boot's lifetime.
type ProcessIdentity struct {
	PID        int    `json:"pid"`
	Start      int64  `json:"start"`
	Executable string `json:"executable,omitempty"`
}

// FileIdentity pins a file or socket by path, device, inode (and, for a disk, its size in
// bytes when it was recorded). On APFS a clone has an inode of its own: a replaced disk or
// socket never matches.
type FileIdentity struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	Size int64  `json:"size,omitempty"`
}

// Record is the host-private recovery record of one VM (record.json, 0600). It is written
// before anything is created and completed after every step, so a crash at any point
// leaves a record that names what may exist.
type Record struct {
	Schema string `json:"schema"`
	ID     string `json:"id"`
	Ref    string `json:"ref"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`

	Generation int64            `json:"generation"`
	Binding    protocol.Binding `json:"binding"`
	Plan       Plan             `json:"plan"`

	// Owner is the node agent process that created the VZVirtualMachine.
	Owner *ProcessIdentity `json:"owner,omitempty"`
	// Disk is the working disk (an APFS clone of Plan.Disk.BasePath); CloneOf the base's
	// verified digest. The disk outlives boots: it is the environment's, until teardown.
	Disk    *FileIdentity `json:"disk,omitempty"`
	CloneOf string        `json:"cloneOf,omitempty"`
	// EFIVars is this environment's EFI variable store.
	EFIVars *FileIdentity `json:"efiVars,omitempty"`
	// BindingDisk is this boot's read-only binding disk.
	BindingDisk *FileIdentity `json:"bindingDisk,omitempty"`
	// Socket is the hybrid-vsock host socket the broker serves for this boot.
	Socket *FileIdentity `json:"socket,omitempty"`

	LaunchedAt time.Time `json:"launchedAt,omitzero"`
	ReadyAt    time.Time `json:"readyAt,omitzero"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// WriteRecord replaces dir/record.json atomically and durably (temp file, fsync, rename,
// directory fsync).
func WriteRecord(dir string, r *Record) error {
	r.Schema = recordSchema
	r.UpdatedAt = time.Now().UTC()
	return vmrecord.Write(dir, RecordName, r, recordLimit)
}

// ErrNoRecord: the directory holds no record.
var ErrNoRecord = vmrecord.ErrNoRecord

// ReadRecord reads dir/record.json strictly: bounded, unknown fields refused, schema
// checked, and the recorded plan re-validated against lim (a record edited to ask for a
// device outside the profile is refused, never booted). A missing file is ErrNoRecord.
func ReadRecord(dir string, lim Limits) (*Record, error) {
	var r Record
	if err := vmrecord.Read(dir, RecordName, recordLimit, &r); err != nil {
		return nil, err
	}
	if r.Schema != recordSchema {
		return nil, fmt.Errorf("record schema %q, want %q", r.Schema, recordSchema)
	}
	switch r.State {
	case StateLaunching, StateRunning, StateDraining, StateStopped:
	default:
		return nil, fmt.Errorf("record state %q is not one of launching, running, draining, stopped", r.State)
	}
	if r.ID != filepath.Base(dir) {
		return nil, fmt.Errorf("record names environment %q in directory %q", r.ID, filepath.Base(dir))
	}
	if err := CheckPlan(&r.Plan, lim); err != nil {
		return nil, fmt.Errorf("recorded plan: %w", err)
	}
	return &r, nil
}

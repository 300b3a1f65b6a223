package qemumicrovm

import (
	"fmt"
	"os"
	"syscall"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/backends/vmrecord"
)

// Names inside one VM directory (<StateDir>/vms/<ID>). They are short on purpose: a Unix
// socket path has at most 107 bytes.
const (
	RecordName  = "record.json"
	bindingName = "binding.json"
	vhostSock   = "v.sock" // QEMU <-> vhost-device-vsock (vhost-user)
	guestSock   = "g.sock" // hybrid vsock host side (CONNECT <port>)
	serialSock  = "s.sock" // QEMU's serial chardev connects here once, then it is removed
	serialLog   = "serial.log"
	tmpPrefix   = vmrecord.TmpPrefix
	recordLimit = 64 << 10
)

// VM states in the record. They only move forward within one boot: launching → running
// → draining; a boot that ended (failed, quarantined, replaced) leaves a "stopped"
// tombstone that keeps the generation so the next boot advances it.
const (
	StateLaunching = "launching"
	StateRunning   = "running"
	StateDraining  = "draining"
	StateStopped   = "stopped"
)

const recordSchema = "qemu-microvm.v1.record"

// SocketIdentity pins a Unix socket by path, device and inode.
type SocketIdentity struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// FileRef is a verified boot file.
type FileRef struct {
	Path   string `json:"path"` // relative to the image directory
	Digest string `json:"digest"`
}

// Record is the host-private recovery record of one VM (record.json, 0600). It is written
// before anything is launched and completed after every step, so a crash at any point
// leaves a record that names what may exist.
type Record struct {
	Schema string `json:"schema"`
	ID     string `json:"id"`
	Ref    string `json:"ref"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`

	Generation int64 `json:"generation"`
	// Binding is what the guest must answer the handshake with: environment, generation,
	// VM plan digest, image digest, guest CID and this boot's nonce.
	Binding protocol.Binding `json:"binding"`
	// SpecPlanDigest is the manager's normalized plan digest the VM plan includes.
	SpecPlanDigest string `json:"specPlanDigest,omitempty"`

	Accel       string   `json:"accel"`
	VCPUs       int32    `json:"vcpus"`
	MemoryMiB   int32    `json:"memoryMiB"`
	Variant     string   `json:"variant,omitempty"`
	Kernel      FileRef  `json:"kernel"`
	Initrd      FileRef  `json:"initrd"`
	CommandLine string   `json:"commandLine"`
	Devices     []string `json:"devices"`
	// Disk binds the working disk of a full-system variant (disk.go); nil without one.
	Disk *DiskRef `json:"disk,omitempty"`

	QEMU   *ProcIdentity `json:"qemu,omitempty"`
	Device *ProcIdentity `json:"device,omitempty"`
	// Sockets pins the control sockets once they exist (vhost, guest).
	Sockets []SocketIdentity `json:"sockets,omitempty"`

	LaunchedAt time.Time `json:"launchedAt,omitzero"`
	ReadyAt    time.Time `json:"readyAt,omitzero"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// socket returns the pinned identity of the socket named name ("" path when unpinned).
func (r *Record) socket(path string) SocketIdentity {
	for _, s := range r.Sockets {
		if s.Path == path {
			return s
		}
	}
	return SocketIdentity{}
}

// writeRecord replaces dir/record.json atomically and durably (temp file, fsync, rename,
// directory fsync).
func writeRecord(dir string, r *Record) error {
	r.Schema = recordSchema
	r.UpdatedAt = time.Now().UTC()
	return vmrecord.Write(dir, RecordName, r, recordLimit)
}

// errNoRecord: the directory holds no record.
var errNoRecord = vmrecord.ErrNoRecord

// readRecord reads dir/record.json strictly (bounded, unknown fields refused, schema
// checked). A missing file is errNoRecord.
func readRecord(dir string) (*Record, error) {
	var r Record
	if err := vmrecord.Read(dir, RecordName, recordLimit, &r); err != nil {
		return nil, err
	}
	if r.Schema != recordSchema {
		return nil, fmt.Errorf("record schema %q, want %q", r.Schema, recordSchema)
	}
	return &r, nil
}

// socketIdentity stats path and returns its identity if it is a socket.
func socketIdentity(path string) (SocketIdentity, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return SocketIdentity{}, fmt.Errorf("socket %s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return SocketIdentity{}, fmt.Errorf("%s is not a socket", path)
	}
	return SocketIdentity{Path: path, Dev: st.Dev, Ino: st.Ino}, nil
}

func writeFileAtomic(dir, name string, data []byte, mode os.FileMode) error {
	return vmrecord.WriteFileAtomic(dir, name, data, mode)
}

package agent

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/fixturecopy"
	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/platform/loopdisk"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/statusapply"
)

// StorageConfig bounds what sandboxed programs can write on the node.
//
//   - Every fixture-copy.v1 environment's copies live on a disk of its own (an ext4 image
//     on a loop device, nosuid,nodev) of resources.diskMiB or DefaultDiskMiB; the sum of
//     the disks may not exceed MaxMiB (storage-exhausted).
//   - Every sandbox's /tmp is a tmpfs of TmpMiB.
//   - Every command and PTY program runs with RLIMIT_FSIZE MaxFileMiB (EFBIG past it), at
//     most its environment's disk.
//
// host-local roots are the operator's own directories: nothing bounds them but
// RLIMIT_FSIZE per file (its BackendCapability does not claim host-storage). Keep the
// state directory on a filesystem no read-write admitted root shares.
type StorageConfig struct {
	// MaxMiB is the node-wide reservation for environment disks (default: half the state
	// directory filesystem's free space when the agent starts).
	MaxMiB int64 `json:"maxMiB,omitempty"`
	// DefaultDiskMiB is the disk of an environment that sets no resources.diskMiB
	// (default 1024, at most MaxMiB).
	DefaultDiskMiB int64 `json:"defaultDiskMiB,omitempty"`
	// TmpMiB is each sandbox's /tmp (default 256).
	TmpMiB int64 `json:"tmpMiB,omitempty"`
	// MaxFileMiB is RLIMIT_FSIZE of every command and PTY program (default 4096).
	MaxFileMiB int64 `json:"maxFileMiB,omitempty"`
}

// Storage defaults.
const (
	DefaultDiskMiB    = 1024
	DefaultTmpMiB     = procexec.DefaultTempBytes >> 20
	DefaultMaxFileMiB = 4096
	// defaultReservationShare: the default reservation is 1/2 of the free space.
	defaultReservationShare = 2
)

// storage is the resolved StorageConfig.
type storage struct {
	maxBytes, defaultDiskBytes, tmpBytes, maxFileBytes int64
	// unavailable says why this node cannot make disks ("" when it can).
	unavailable string
	// sharedRoots are the admitted roots on the state directory's filesystem: a
	// read-write host-local environment over one can fill the filesystem holding the
	// agent's store (ConditionStorageIsolated).
	sharedRoots []string
}

// resolveStorage fills the defaults of cfg.Storage; the state directory must exist.
func resolveStorage(cfg Config) (storage, error) {
	var sc StorageConfig
	if cfg.Storage != nil {
		sc = *cfg.Storage
	}
	if sc.MaxMiB < 0 || sc.DefaultDiskMiB < 0 || sc.TmpMiB < 0 || sc.MaxFileMiB < 0 {
		return storage{}, fmt.Errorf("node agent config: storage values must not be negative")
	}
	s := storage{maxBytes: sc.MaxMiB << 20, defaultDiskBytes: sc.DefaultDiskMiB << 20, tmpBytes: sc.TmpMiB << 20, maxFileBytes: sc.MaxFileMiB << 20}
	if s.maxBytes == 0 {
		avail, err := loopdisk.Available(cfg.StateDir)
		if err != nil {
			return storage{}, fmt.Errorf("node agent config: storage.maxMiB unset and %w", err)
		}
		s.maxBytes = avail / defaultReservationShare
	}
	if s.defaultDiskBytes == 0 {
		s.defaultDiskBytes = min(int64(DefaultDiskMiB)<<20, s.maxBytes)
	}
	if s.tmpBytes == 0 {
		s.tmpBytes = procexec.DefaultTempBytes
	}
	if s.tmpBytes < procexec.MinTempBytes || s.tmpBytes > procexec.MaxTempBytes {
		return storage{}, fmt.Errorf("node agent config: storage.tmpMiB %d outside [%d, %d]", sc.TmpMiB, procexec.MinTempBytes>>20, procexec.MaxTempBytes>>20)
	}
	if s.maxFileBytes == 0 {
		s.maxFileBytes = int64(DefaultMaxFileMiB) << 20
	}
	if s.defaultDiskBytes < loopdisk.MinBytes {
		return storage{}, fmt.Errorf("node agent config: storage.defaultDiskMiB %d below the smallest disk (%d MiB)", s.defaultDiskBytes>>20, loopdisk.MinBytes>>20)
	}
	if err := loopdisk.Check(); err != nil {
		s.unavailable = err.Error()
	}
	s.sharedRoots = rootsSharingFS(cfg.StateDir, cfg.AdmittedRoots)
	return s, nil
}

// rootsSharingFS lists (sorted) the admitted roots on the filesystem of stateDir.
func rootsSharingFS(stateDir string, roots map[string]string) []string {
	var st unix.Stat_t
	if unix.Stat(stateDir, &st) != nil {
		return nil
	}
	var out []string
	for name, dir := range roots {
		var rs unix.Stat_t
		if unix.Stat(dir, &rs) == nil && rs.Dev == st.Dev {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// ConditionStorageIsolated on the WorkbenchNode says whether the filesystem holding the
// agent's state (its store, artifacts, environment disk images) is out of reach of every
// sandboxed write beyond its bounds: False names the admitted roots that share it (a
// read-write host-local environment over one is bounded per file only, RLIMIT_FSIZE).
const ConditionStorageIsolated = "StorageIsolated"

func (a *Agent) storageCondition() metav1.Condition {
	if len(a.storage.sharedRoots) == 0 {
		return statusapply.Cond(ConditionStorageIsolated, true, "StateFilesystemSeparate",
			"no admitted root shares the state directory's filesystem; environment disks, /tmp and files are bounded", 0)
	}
	return statusapply.Cond(ConditionStorageIsolated, false, "AdmittedRootSharesStateFilesystem",
		clip(fmt.Sprintf("admitted root(s) %s share the state directory's filesystem: a read-write host-local environment over them is bounded per file only (storage.maxFileMiB); move the state directory to another filesystem", strings.Join(a.storage.sharedRoots, ", ")), 1000), 0)
}

// fixtureDisks is the fixture-copy.v1 backend's disk configuration.
func (s storage) fixtureDisks(stateDir string) fixturecopy.Disks {
	abs := filepath.Clean(stateDir)
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	return fixturecopy.Disks{Pool: loopdisk.NewPool(filepath.Join(abs, fixturecopy.DisksDir), s.maxBytes),
		DefaultBytes: s.defaultDiskBytes, Unavailable: s.unavailable}
}

// fileSizeLimit is RLIMIT_FSIZE of a program of env on backend b: the node's maxFileMiB,
// at most the environment's disk.
func (a *Agent) fileSizeLimit(env *wbv1.Environment) int64 {
	limit := a.storage.maxFileBytes
	b, ok := a.backends.Get(string(env.Spec.Backend))
	if !ok {
		return limit
	}
	if d, ok := b.(environments.DiskBackend); ok && d.EnforcesDisk() {
		var spec backends.Spec
		if res := env.Spec.Resources; res != nil {
			spec.DiskMiB = deref(res.DiskMiB)
		}
		if bound := d.DiskBound(spec); bound > 0 {
			limit = min(limit, bound)
		}
	}
	return limit
}

// nodeStorage is the WorkbenchNode's storage report.
func (a *Agent) nodeStorage() *wbv1.NodeStorage {
	out := &wbv1.NodeStorage{
		CapacityMiB: a.storage.maxBytes >> 20, DefaultDiskMiB: a.storage.defaultDiskBytes >> 20,
		TmpMiB: a.storage.tmpBytes >> 20, MaxFileMiB: a.storage.maxFileBytes >> 20,
	}
	b, ok := a.backends.Get(fixturecopy.ID)
	if !ok {
		return out
	}
	d, ok := b.(environments.DiskBackend)
	if !ok || !d.EnforcesDisk() {
		out.Unavailable = clip(a.storage.unavailable, 512)
		return out
	}
	used, _, n, err := d.Storage()
	if err != nil {
		out.Unavailable = clip(err.Error(), 512)
		return out
	}
	out.UsedMiB, out.Disks = used>>20, int32(n)
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

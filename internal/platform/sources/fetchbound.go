package sources

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// DefaultMaxFetchBytes bounds what one git fetch (submodules included) may write into the
// repository's .git directory: packs, temporary packs and loose objects
// (source-fetch-too-large above it).
const DefaultMaxFetchBytes = 1 << 30

// fetchWatchInterval is how often a running fetch's .git is measured; a fetch overshoots
// the cap by at most what it downloads in one interval before its process group dies.
const fetchWatchInterval = 50 * time.Millisecond

// maxFetchWatchEntries bounds one measurement's walk of .git.
const maxFetchWatchEntries = 1 << 20

// fetchBound returns the watch of a fetch into dst: it refuses once dst/.git holds more
// than max bytes (allocated blocks, so a sparse file cannot hide what was written).
func fetchBound(dst string, max int64) func() error {
	if max <= 0 {
		max = DefaultMaxFetchBytes
	}
	gitDir := filepath.Join(dst, ".git")
	return func() error {
		n, entries, err := dirBytes(gitDir)
		switch {
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return nil // a file vanished under the walk (git renames its temporary packs): measure again next tick
		case n > max:
			return errf(string(actuation.CodeSourceFetchTooLarge), "the fetch wrote more than %d bytes (the node's fetch cap); stopped", max)
		case entries > maxFetchWatchEntries:
			return errf(string(actuation.CodeSourceFetchTooLarge), "the fetch wrote more than %d files into .git; stopped", maxFetchWatchEntries)
		}
		return nil
	}
}

// dirBytes sums the allocated bytes of the files beneath dir (no link followed).
func dirBytes(dir string) (int64, int, error) {
	var total int64
	var entries int
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entries++
		if entries > maxFetchWatchEntries {
			return filepath.SkipAll
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size := info.Size()
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Blocks*512 > size {
			size = st.Blocks * 512
		}
		total += size
		return nil
	})
	return total, entries, err
}

// groupsFile, in a fetch's scratch directory, lists the process groups of the git
// processes it started, one id a line.
const groupsFile = "pgroups"

// recordGroup appends pgid to file (best effort: "" records nothing).
func recordGroup(file string, pgid int) {
	if file == "" {
		return
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	_, _ = fmt.Fprintf(f, "%d\n", pgid)
	_ = f.Close()
}

// SweepScratch is the agent's first step after a restart, before any fetch: the fetches a
// dead agent left behind are ended — every process of a process group its scratch
// directories recorded whose working directory still lies beneath under (the agent's
// state directory: a reused group id of an unrelated process is never signalled) is
// killed — and the scratch directory (empty HOMEs, ssh keys, known_hosts) is removed.
func SweepScratch(dir, under string) error {
	files, _ := filepath.Glob(filepath.Join(dir, "*", groupsFile))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Fields(string(b)) {
			if pgid, err := strconv.Atoi(l); err == nil && pgid > 1 {
				killGroupUnder(pgid, under)
			}
		}
	}
	return os.RemoveAll(dir)
}

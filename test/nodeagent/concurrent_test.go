package nodeagent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestCommandsOfOneSessionRunAtOnce: two commands of one session run at the same time — the
// node takes its commands concurrently up to its caps, not one after another per session
// (issue 27 item 2). Observed by their processes, not by time: both `sleep` processes, told
// apart from every other process on the machine by an argument no one else uses, exist at
// once on the host.
func TestCommandsOfOneSessionRunAtOnce(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	// A duration no other process on the machine has: 40 s plus this process's pid in ms.
	arg := "40." + strconv.Itoa(os.Getpid()%1000)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{arg})))
	for _, name := range []string{"first", "second"} {
		must(t, env.Client.Create(ctx, command(ns, name, "/bin/sleep", arg)))
	}
	defer func() {
		for _, name := range []string{"first", "second"} {
			_ = env.Client.Delete(ctx, command(ns, name)) // the node stops what is gone
		}
	}()
	want := []byte("sleep\x00" + arg + "\x00")
	eventually(t, 30*time.Second, "both sleep processes alive at once", func() (bool, string) {
		cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		var pids []string
		for _, p := range cmdlines {
			raw, err := os.ReadFile(p)
			if err == nil && bytes.HasSuffix(raw, want) {
				pids = append(pids, filepath.Base(filepath.Dir(p)))
			}
		}
		return len(pids) >= 2, fmt.Sprintf("sleep %s processes: %v", arg, pids)
	})
}

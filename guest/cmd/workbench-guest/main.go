// Command workbench-guest is the Workbench guest agent. In a VM it is the initramfs's
// /init: as PID 1 it sets up the minimal system (mounts, kernel modules), then runs
// itself again as the agent under a reaping init loop and powers the guest off when the
// agent answered a shutdown. The agent listens on AF_VSOCK (port 1024 by default) and
// reads its expected binding from QEMU's fw_cfg. It is built static (CGO_ENABLED=0).
//
// The conformance build (-tags workbench_unix_transport) adds --unix-socket, which serves
// the same protocol on a Unix socket instead; production images are built without it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mdlayher/vsock"

	"sensorium.dev/workbench/guest/agent"
	protocol "sensorium.dev/workbench/guest/protocol/v1"
)

// DefaultBindingFile is where QEMU's fw_cfg exposes "-fw_cfg name=opt/workbench/binding"
// (needs the qemu_fw_cfg driver).
const DefaultBindingFile = "/sys/firmware/qemu_fw_cfg/by_name/opt/workbench/binding/raw"

var (
	bindingFile = flag.String("binding-file", DefaultBindingFile, "read-only boot input holding the expected binding (JSON, at most 4 KiB)")
	root        = flag.String("root", "/workspace", "directory every protocol path is resolved beneath")
	stateDir    = flag.String("state-dir", "/run/workbench", "agent state (patch stages); outside the root")
	port        = flag.Uint("port", 1024, "AF_VSOCK port to listen on")
	readyPort   = flag.Uint("ready-port", protocol.ReadyPort, "host (CID 2) vsock port told once the agent listens (0: none); see announceReady")
	maxConns    = flag.Int("max-conns", agent.DefaultMaxConns, "concurrent connections")
	underInit   = flag.Bool("under-init", false, "internal: started by the PID 1 init loop")
	modulesFile = flag.String("modules-file", "/etc/workbench/modules", "PID 1 only: kernel modules (absolute .ko paths, one a line) loaded in order if the file exists")
	printDigest = flag.Bool("print-protocol-digest", false, "print the protocol schema digest and exit")
	version     = flag.Bool("version", false, "print the agent version and exit")
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "workbench-guest: "+format+"\n", args...)
}

func main() {
	if os.Getpid() == 1 {
		// As the kernel's init, stray kernel command-line words may arrive as arguments;
		// they must not stop the guest from booting.
		flag.CommandLine.Init(os.Args[0], flag.ContinueOnError)
		flag.CommandLine.SetOutput(io.Discard)
		_ = flag.CommandLine.Parse(os.Args[1:])
		if !*underInit {
			os.Exit(runInit())
		}
	} else {
		flag.Parse()
	}
	switch {
	case *printDigest:
		fmt.Println(protocol.SchemaDigest())
		return
	case *version:
		fmt.Println(agent.Version)
		return
	}
	os.Exit(runAgent())
}

func runAgent() int {
	l, local, err := listenOverride()
	if err != nil {
		logf("listen: %v", err)
		return 1
	}
	cfg := agent.Config{
		Root:     *root,
		StateDir: *stateDir,
		Binding:  func() (protocol.Binding, error) { return agent.LoadBindingFile(*bindingFile) },
		PID1:     *underInit,
		MaxConns: *maxConns,
		Logf:     logf,
	}
	if !*underInit && !local {
		// Under systemd (the full-system image): per-command cgroups with the environment's
		// pids limit (the host puts it on the kernel command line) and a memory limit that
		// leaves the guest's own services room.
		if cg, err := agent.SetupCommandCgroups(agent.ReadKernelLimit("workbench.pids"), commandMemoryMax()); err != nil {
			logf("no per-command cgroups: %v", err)
		} else {
			cg.Logf = logf
			cfg.Cgroups = cg
			logf("per-command cgroups beneath %s (pids.max %d, memory.max %d)", cg.Parent, cg.Pids, cg.MemoryBytes)
		}
	}
	if !local {
		l, err = vsock.Listen(uint32(*port), nil)
		if err != nil {
			logf("vsock listen on port %d: %v", *port, err)
			return 1
		}
		cfg.LocalCID = vsock.ContextID
	}
	if *underInit {
		if err := os.MkdirAll(*root, 0o755); err != nil {
			logf("root: %v", err)
			return 1
		}
	}
	a, err := agent.New(cfg)
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer func() { _ = a.Close() }()
	logf("%s listening on %s", agent.Version, describe(l))
	if !local && *readyPort != 0 {
		go announceReady(uint32(*readyPort))
	}
	err = a.Serve(l)
	if errors.Is(err, agent.ErrShutdown) {
		logf("shutdown")
		return 0
	}
	logf("serve: %v", err)
	return 1
}

// announceReady makes one guest-initiated connection to the host (CID 2) on port and
// writes protocol.ReadyLine. The vsock device forwards it to the host socket "<uds>_<port>". It
// tells the host that the guest's vsock driver is up and the agent listens, so the host
// need not probe with CONNECT before the device's vrings exist (which vhost-device-vsock
// 0.3.0 does not survive). It is a hint only: the handshake stays the authority. One
// attempt, bounded by a deadline; a host that does not listen just gets nothing.
func announceReady(port uint32) {
	c, err := vsock.Dial(vsock.Host, port, nil)
	if err != nil {
		logf("ready signal to host port %d: %v", port, err)
		return
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, protocol.ReadyLine); err != nil {
		logf("ready signal: %v", err)
	}
}

func describe(l net.Listener) string {
	return l.Addr().Network() + " " + l.Addr().String()
}

// commandMemoryMax is each command's memory.max: the guest's memory less a reserve of
// 96 MiB for systemd, the agent and the page cache they need (at least 32 MiB).
func commandMemoryMax() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	total := int64(si.Totalram) * int64(si.Unit)
	return max(total-96<<20, 32<<20)
}

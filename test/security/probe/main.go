// Command probe is what a hostile repository would run from its Makefile: it attempts
// each privileged operation in a harmless form and prints one JSON line per attempt with
// the errno it got. A probe is "refused" when the sandbox stopped it (the errno a missing
// capability, a seccomp filter, a namespace or Landlock gives) and "allowed" when the
// operation got past the permission check (for the operations with invalid arguments:
// EINVAL/EBADF means the capability was held). Nothing it does changes the host even when
// allowed: invalid magic numbers, the current hostname, a device node and a mount removed
// at once, connections closed without a byte.
//
// Modes (argv[1]): "probes" (the default), "forkstorm N", "memstorm MiB", "daemon MARKER",
// "flood BYTES". The test builds it statically (CGO_ENABLED=0) and runs it through make.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Line is one probe's report.
type Line struct {
	Probe  string `json:"probe"`
	Result string `json:"result"` // refused | allowed
	Errno  string `json:"errno,omitempty"`
	Detail string `json:"detail,omitempty"`
}

var out = bufio.NewWriter(os.Stdout)

func emit(l Line) {
	b, _ := json.Marshal(l)
	_, _ = out.Write(append(b, '\n')) // a write error sticks in the bufio.Writer: Flush returns it
	if err := out.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "probe: writing a result line:", err)
		os.Exit(1)
	}
}

func errnoName(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno-%d", int(e))
	}
	if err == nil {
		return ""
	}
	return err.Error()
}

// refusedErrno: the errnos by which a sandbox says no (capability, seccomp, LSM, absence).
func refusedErrno(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOSYS)
}

func report(name string, err error, refused bool, detail string) {
	r := "allowed"
	if refused {
		r = "refused"
	}
	emit(Line{Probe: name, Result: r, Errno: errnoName(err), Detail: detail})
}

func main() {
	mode := "probes"
	if len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-") {
		mode = os.Args[1]
		os.Args = append(os.Args[:1], os.Args[2:]...)
	}
	switch mode {
	case "probes":
		probes()
	case "forkstorm":
		forkStorm()
	case "memstorm":
		memStorm()
	case "daemon", "daemon-mid", "daemon-child":
		daemon(mode)
	case "flood":
		flood()
	case "sleep":
		for {
			time.Sleep(time.Hour)
		}
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
}

func probes() {
	stateDir := flag.String("state-dir", "", "the node agent's state directory")
	kubeconfig := flag.String("kubeconfig", "", "the node agent's kubeconfig")
	agentPID := flag.Int("agent-pid", 0, "the node agent's pid in the host PID namespace")
	tcpAddrs := flag.String("tcp", "", "comma-separated host-namespace TCP listeners")
	unixSock := flag.String("unix", "", "a host AF_UNIX socket")
	scratch := flag.String("scratch", ".", "a workspace directory the probe may write")
	flag.Parse()

	// reboot with an invalid second magic: EPERM without CAP_SYS_BOOT, EINVAL with it.
	_, _, e := unix.Syscall6(unix.SYS_REBOOT, unix.LINUX_REBOOT_MAGIC1, 0x1234, 0, 0, 0, 0)
	report("reboot", errOf(e), refusedErrno(errOf(e)), "invalid magic2")

	// kexec_load with invalid flags: EPERM without CAP_SYS_BOOT, EINVAL with it.
	_, _, e = unix.Syscall6(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0xffff0000, 0, 0)
	report("kexec_load", errOf(e), refusedErrno(errOf(e)), "invalid flags")

	// finit_module on an invalid descriptor: EPERM without CAP_SYS_MODULE, EBADF with it.
	empty := [1]byte{}
	_, _, e = unix.Syscall(unix.SYS_FINIT_MODULE, ^uintptr(0), uintptr(unsafe.Pointer(&empty[0])), 0)
	report("finit_module", errOf(e), refusedErrno(errOf(e)), "fd -1")

	// sethostname to the current name.
	name, herr := os.Hostname()
	if herr != nil {
		report("sethostname", herr, false, "cannot read hostname")
	} else {
		err := unix.Sethostname([]byte(name))
		report("sethostname", err, refusedErrno(err), "to the current name "+name)
	}

	// mknod of a character device with /dev/null's numbers inside the workspace.
	node := filepath.Join(*scratch, fmt.Sprintf(".probe-null-%d", os.Getpid()))
	err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))
	if err == nil {
		_ = os.Remove(node)
	}
	report("mknod", err, err != nil && refusedErrno(err), "char 1:3 at "+node)

	mintProbes(*scratch)

	// A tmpfs mount on a workspace directory.
	mnt := filepath.Join(*scratch, fmt.Sprintf(".probe-mnt-%d", os.Getpid()))
	if err := os.Mkdir(mnt, 0o700); err != nil {
		report("mount", err, false, "cannot create the mount point")
	} else {
		err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m")
		if err == nil {
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
		_ = os.Remove(mnt)
		report("mount", err, err != nil && refusedErrno(err), "tmpfs on "+mnt)
	}

	// /proc: only the sandbox's own processes, and not the agent.
	ents, perr := os.ReadDir("/proc")
	pids := 0
	for _, d := range ents {
		if _, err := strconv.Atoi(d.Name()); err == nil {
			pids++
		}
	}
	_, agentErr := os.Stat(fmt.Sprintf("/proc/%d", *agentPID))
	report("proc-count", perr, perr != nil || (pids <= 32 && agentErr != nil), fmt.Sprintf("%d pids visible; agent pid %d visible=%v", pids, *agentPID, agentErr == nil))
	if *agentPID > 0 {
		err := unix.Kill(*agentPID, 0)
		report("kill-agent", err, errors.Is(err, unix.ESRCH) || refusedErrno(err), fmt.Sprintf("kill(%d, 0)", *agentPID))
	}

	// The agent's state directory and kubeconfig.
	openProbe("open-state-dir", *stateDir, unix.O_RDONLY|unix.O_DIRECTORY)
	openProbe("open-kubeconfig", *kubeconfig, unix.O_RDONLY)
	openProbe("open-etc-shadow", "/etc/shadow", unix.O_RDONLY)
	openProbe("open-root-home", "/root", unix.O_RDONLY|unix.O_DIRECTORY)

	// TCP listeners in the host network namespace.
	for i, a := range strings.Split(*tcpAddrs, ",") {
		if a == "" {
			continue
		}
		c, err := net.DialTimeout("tcp", a, 2*time.Second)
		if c != nil {
			_ = c.Close()
		}
		report(fmt.Sprintf("tcp-connect-%d", i), err, err != nil, a)
	}

	// AF_UNIX to a host socket.
	if *unixSock != "" {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			err = unix.Connect(fd, &unix.SockaddrUnix{Name: *unixSock})
			unix.Close(fd)
			report("unix-connect", err, err != nil, "connect "+*unixSock)
		} else {
			report("unix-connect", err, true, "socket(AF_UNIX)")
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
	}
	report("unix-socketpair", err, err != nil, "socketpair(AF_UNIX)")

	// AF_VSOCK to the host (CID 2).
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		cerr := unix.Connect(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_HOST, Port: 9})
		unix.Close(fd)
		report("vsock-socket", nil, false, "socket(AF_VSOCK) succeeded; connect to CID 2: "+errnoName(cerr))
	} else {
		report("vsock-socket", err, true, "socket(AF_VSOCK)")
	}

	// Netlink: socket() and socketpair().
	fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err == nil {
		unix.Close(fd)
	}
	report("netlink-socket", err, err != nil, "socket(AF_NETLINK, NETLINK_ROUTE)")
	_, err = unix.Socketpair(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	report("netlink-socketpair", err, err != nil, "socketpair(AF_NETLINK)")
	fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	report("packet-socket", err, err != nil, "socket(AF_PACKET)")

	// Capabilities (capget, the bounding and ambient sets through prctl) and no_new_privs;
	// /proc/self/status is read too where it is visible, for the report.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		report("capabilities", err, false, "capget failed")
	} else {
		var bnd, amb uint64
		for c := 0; c <= 63; c++ {
			if r, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err == nil && r == 1 {
				bnd |= 1 << c
			}
			if r, err := unix.PrctlRetInt(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_IS_SET, uintptr(c), 0, 0); err == nil && r == 1 {
				amb |= 1 << c
			}
		}
		eff := uint64(data[1].Effective)<<32 | uint64(data[0].Effective)
		prm := uint64(data[1].Permitted)<<32 | uint64(data[0].Permitted)
		inh := uint64(data[1].Inheritable)<<32 | uint64(data[0].Inheritable)
		detail := fmt.Sprintf("CapEff=%016x CapPrm=%016x CapInh=%016x CapAmb=%016x CapBnd=%016x", eff, prm, inh, amb, bnd)
		if st, err := os.ReadFile("/proc/self/status"); err == nil {
			for _, l := range strings.Split(string(st), "\n") {
				if strings.HasPrefix(l, "Cap") {
					detail += "; " + strings.Join(strings.Fields(l), " ")
				}
			}
		}
		report("capabilities", nil, eff|prm|inh|amb|bnd == 0, detail)
	}
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	report("no-new-privs", err, err == nil && nnp == 1, fmt.Sprintf("PR_GET_NO_NEW_PRIVS=%d", nnp))
	emit(Line{Probe: "done", Result: "refused", Detail: "end of probes"})
}

// mintProbes tries to leave a privilege on a root (the workspace dir) and on the
// sandbox's tmp: a setuid or setgid bit through every syscall that takes a mode, a FIFO
// and a socket inode, a file capability. Each is one probe line; "allowed" means the call
// succeeded. The files it makes are left in place (names .probe-mint-*) for the test to
// stat from the host (no mode is reset between attempts: any call that got through
// leaves its bit); a successful call whose bit the kernel then drops (mkdir ignores
// S_ISGID) is still "allowed": the call itself must be refused.
func mintProbes(scratch string) {
	unix.Umask(0o022)
	for _, where := range []struct{ tag, dir string }{{"", scratch}, {"-tmp", os.TempDir()}} {
		dir := where.dir
		n := 0
		name := func() string {
			n++
			return filepath.Join(dir, fmt.Sprintf(".probe-mint-%d-%d", os.Getpid(), n))
		}
		// A file the mode changes apply to (created without special bits: allowed).
		base := name()
		fd, err := unix.Open(base, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o755)
		if err != nil {
			report("mint-base"+where.tag, err, false, "cannot create "+base)
			continue
		}
		mode := func(m uint32) string { return fmt.Sprintf("%#o", m) }
		for _, m := range []uint32{0o4755, 0o2755} {
			k := fmt.Sprintf("%o", m>>9) // 4 | 2
			if nr, ok := sysChmod(); ok {
				err := callErr(sysPath(nr, base, uintptr(m), 0))
				report("chmod-"+k+where.tag, err, isRefused(err), mode(m))
			}
			err = unix.Fchmod(fd, m)
			report("fchmod-"+k+where.tag, err, isRefused(err), mode(m))
			err = callErr(sysAtPath(unix.SYS_FCHMODAT, base, uintptr(m), 0))
			report("fchmodat-"+k+where.tag, err, isRefused(err), mode(m))
			// fchmodat2 (Linux 6.6): ENOSYS on an older kernel (then inconclusive).
			err = callErr(sysAtPath(sysFchmodat2, base, uintptr(m), 0))
			report("fchmodat2-"+k+where.tag, err, isRefused(err), mode(m))
		}
		_ = unix.Close(fd)
		created := func(probe string, f int, err error, detail string) {
			if err == nil && f >= 0 {
				_ = unix.Close(f)
			}
			report(probe+where.tag, err, isRefused(err), detail)
		}
		if nr, ok := sysOpen(); ok {
			p := name()
			r, e := sysPath(nr, p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o4755)
			created("open-creat-4", int(r), errOf(e), "open(O_CREAT, 04755) "+p)
		}
		p := name()
		f, err := unix.Openat(unix.AT_FDCWD, p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o2755)
		created("openat-creat-2", f, err, "openat(O_CREAT, 02755) "+p)
		p = name()
		f, err = unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{Flags: unix.O_CREAT | unix.O_WRONLY | unix.O_CLOEXEC, Mode: 0o4755})
		created("openat2-creat-4", f, err, "openat2(O_CREAT, 04755) "+p)
		if nr, ok := sysCreat(); ok {
			p = name()
			r, e := sysPath(nr, p, 0o4755, 0)
			created("creat-4", int(r), errOf(e), "creat(04755) "+p)
		}
		if nr, ok := sysMkdir(); ok {
			p = name()
			_, e := sysPath(nr, p, 0o2755, 0)
			report("mkdir-2"+where.tag, errOf(e), isRefused(errOf(e)), "mkdir(02755) "+p)
		}
		p = name()
		err = unix.Mkdirat(unix.AT_FDCWD, p, 0o2755)
		report("mkdirat-2"+where.tag, err, isRefused(err), "mkdirat(02755) "+p)
		p = name()
		err = unix.Mknod(p, unix.S_IFIFO|0o644, 0)
		report("mknod-fifo"+where.tag, err, isRefused(err), "FIFO "+p)
		p = name()
		err = unix.Mknodat(unix.AT_FDCWD, p, unix.S_IFSOCK|0o644, 0)
		report("mknodat-socket"+where.tag, err, isRefused(err), "socket inode "+p)
		// A file capability (VFS_CAP_REVISION_2, cap_setuid in permitted+effective) on the
		// base file, by path and by descriptor.
		capv := fileCapability()
		err = unix.Setxattr(base, "security.capability", capv, 0)
		report("setxattr-fcap"+where.tag, err, isRefused(err), "security.capability on "+base)
		if f, err := unix.Open(base, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			err = unix.Fsetxattr(f, "security.capability", capv, 0)
			_ = unix.Close(f)
			report("fsetxattr-fcap"+where.tag, err, isRefused(err), "security.capability on "+base)
		}
	}
}

// MintProbes are the probe names mintProbes reports for the workspace (the same names
// with "-tmp" for the sandbox's tmp). chmod, open, creat and mkdir exist only where the
// architecture has those syscalls (amd64).
var MintProbes = []string{"fchmod-4", "fchmod-2", "fchmodat-4", "fchmodat-2", "fchmodat2-4", "fchmodat2-2",
	"openat-creat-2", "openat2-creat-4", "mkdirat-2", "mknod-fifo", "mknodat-socket", "setxattr-fcap", "fsetxattr-fcap"}

const (
	atFDCWD      = ^uintptr(99) // AT_FDCWD (-100)
	sysFchmodat2 = 452          // the same number on every architecture
)

func isRefused(err error) bool { return err != nil && refusedErrno(err) }

// sysPath calls nr(path, a1, a2); sysAtPath calls nr(AT_FDCWD, path, a2, a3).
func sysPath(nr uintptr, path string, a1, a2 uintptr) (uintptr, syscall.Errno) {
	b, err := unix.BytePtrFromString(path)
	if err != nil {
		return 0, unix.EINVAL
	}
	r, _, e := unix.Syscall(nr, uintptr(unsafe.Pointer(b)), a1, a2)
	return r, e
}

func sysAtPath(nr uintptr, path string, a2, a3 uintptr) (uintptr, syscall.Errno) {
	b, err := unix.BytePtrFromString(path)
	if err != nil {
		return 0, unix.EINVAL
	}
	r, _, e := unix.Syscall6(nr, atFDCWD, uintptr(unsafe.Pointer(b)), a2, a3, 0, 0)
	return r, e
}

// fileCapability is a security.capability value (VFS_CAP_REVISION_2) granting
// CAP_SETUID permitted and effective.
func fileCapability() []byte {
	v := make([]byte, 20)
	put := func(off int, x uint32) {
		v[off], v[off+1], v[off+2], v[off+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
	}
	put(0, 0x02000000|0x000001) // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE
	put(4, 1<<unix.CAP_SETUID)  // permitted, low word
	return v
}

func errOf(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func openProbe(name, path string, flags int) {
	if path == "" {
		report(name, nil, false, "no path given")
		return
	}
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	report(name, err, err != nil && (refusedErrno(err) || errors.Is(err, unix.ENOENT)), path)
}

// forkStorm starts up to N children that block, counts how many the kernel refused, then
// kills them all and reports. Its exit code is 0 either way.
func forkStorm() {
	n, _ := strconv.Atoi(os.Args[1])
	self := os.Args[0]
	var kids []*os.Process
	refused := 0
	var last error
	for i := 0; i < n; i++ {
		p, err := os.StartProcess(self, []string{self, "sleep"}, &os.ProcAttr{Files: []*os.File{nil, nil, nil}})
		if err != nil {
			refused++
			last = err
			continue
		}
		kids = append(kids, p)
	}
	for _, p := range kids {
		_ = p.Kill()
		_, _ = p.Wait()
	}
	b, _ := json.Marshal(map[string]any{"probe": "forkstorm", "attempted": n, "started": len(kids), "refused": refused, "lastError": errnoName(last)})
	fmt.Println(string(b))
}

// memStorm allocates and touches MiB mebibytes, printing progress every 16 MiB.
func memStorm() {
	mib, _ := strconv.Atoi(os.Args[1])
	var keep [][]byte
	for i := 0; i < mib; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		keep = append(keep, b)
		if (i+1)%16 == 0 {
			fmt.Printf("{\"probe\":\"memstorm\",\"allocatedMiB\":%d}\n", i+1)
		}
	}
	fmt.Printf("{\"probe\":\"memstorm\",\"done\":true,\"allocatedMiB\":%d}\n", len(keep))
}

// daemon: the parent starts a setsid'd middle process and exits; the middle starts the
// daemon and exits; the daemon (argv carries MARKER, so the test can find it on the host)
// runs until killed.
func daemon(mode string) {
	marker := os.Args[1]
	self := os.Args[0]
	switch mode {
	case "daemon":
		cmd := exec.Command(self, "daemon-mid", marker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Println(`{"probe":"daemon","error":"` + err.Error() + `"}`)
			os.Exit(1)
		}
		_ = cmd.Wait()
		for i := 0; i < 100; i++ { // at most 5 s for the daemon's heartbeat
			if _, err := os.Stat(".probe-daemon-" + marker); err == nil {
				fmt.Println(`{"probe":"daemon","started":true}`)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		fmt.Println(`{"probe":"daemon","started":false}`)
		os.Exit(1)
	case "daemon-mid":
		cmd := exec.Command(self, "daemon-child", marker)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		_ = cmd.Start()
		os.Exit(0)
	case "daemon-child":
		signalIgnore()
		// The heartbeat proves the daemon ran (and lets the parent report it).
		_ = os.WriteFile(".probe-daemon-"+marker, []byte(strconv.Itoa(os.Getpid())), 0o644)
		for {
			time.Sleep(time.Hour)
		}
	}
}

func signalIgnore() {
	// A daemon ignores SIGHUP/SIGTERM, as real ones do: only a cgroup kill ends it.
	signal.Ignore(syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
}

// flood writes BYTES bytes of output as fast as it can.
func flood() {
	n, _ := strconv.ParseInt(os.Args[1], 10, 64)
	buf := []byte(strings.Repeat("flood-output-0123456789abcdef-", 2185)[:65536])
	w := bufio.NewWriterSize(os.Stdout, 1<<16)
	for n > 0 {
		k := int64(len(buf))
		if n < k {
			k = n
		}
		if _, err := w.Write(buf[:k]); err != nil {
			os.Exit(3)
		}
		n -= k
	}
	_ = w.Flush()
}

// callErr is the error of a raw syscall's result (nil on success).
func callErr(_ uintptr, e syscall.Errno) error { return errOf(e) }

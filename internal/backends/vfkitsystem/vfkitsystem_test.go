package vfkitsystem

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/guest/agent"
	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

var testLimits = Limits{MaxVCPUs: 4, MaxMemoryMiB: 4096, MaxDiskMiB: 16384}

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func testSpec() backends.Spec {
	return backends.Spec{ID: "0b5e6c1a-uid", Ref: "ns/env", Generation: 1, VCPUs: 2, MemoryMiB: 1024, DiskMiB: 4096,
		Roots: []backends.Root{{Name: "repo"}, {Name: "ref", ReadOnly: true}},
		EFI:   &backends.EFIBootImage{Variant: "full-system-arm64", Architecture: "arm64", DiskPath: "guest/full-arm64.raw", DiskDigest: testDigest, DiskFormat: "raw"}}
}

func codeOf(err error) actuation.Code {
	var r *actuation.Refusal
	if errors.As(err, &r) {
		return r.Code
	}
	return ""
}

func TestBuildPlanHasExactlyTheClosedProfile(t *testing.T) {
	p, err := BuildPlan(testSpec(), testLimits, nil)
	if err != nil {
		t.Fatalf("BuildPlan: %v", err)
	}
	if !slices.Equal(p.Devices, Profile) || p.Network != "none" || p.HostSharing != "denied" || p.BootMode != "efi" || p.Disk.Format != "raw" {
		t.Fatalf("plan %+v: want exactly the profile %v, no network, no sharing, EFI, raw", p, Profile)
	}
	if got := p.MountedRoots(); len(got) != 2 || got[0].GuestDir != "repo" || got[0].Path != "" || !got[1].ReadOnly {
		t.Fatalf("mounted roots %+v", got)
	}
	q, _ := BuildPlan(testSpec(), testLimits, nil)
	if p.Digest() != q.Digest() {
		t.Fatal("the same spec gives two plan digests")
	}
	s := testSpec()
	s.MemoryMiB = 2048
	r, _ := BuildPlan(s, testLimits, nil)
	if r.Digest() == p.Digest() {
		t.Fatal("a different memory size gives the same plan digest")
	}
}

// TestPlanRefusesDevicesOutsideTheProfile: every device the Virtualization framework
// could attach beyond §7.2's closed set is refused, by name or as unknown.
func TestPlanRefusesDevicesOutsideTheProfile(t *testing.T) {
	for _, d := range []string{"virtio-fs", "rosetta", "directory-share", "virtio-net", "nat-network", "bridged-network", "graphics",
		"virtio-gpu", "keyboard", "pointing-device", "audio", "usb", "memory-balloon", "virtio-console", "Virtio-FS", "vsock2", ""} {
		_, err := BuildPlan(testSpec(), testLimits, []string{d})
		if codeOf(err) != actuation.CodeDeviceForbidden {
			t.Errorf("extra device %q: %v, want %s", d, err, actuation.CodeDeviceForbidden)
		}
	}
	for name, devs := range map[string][]string{
		"duplicate": append(slices.Clone(Profile), DeviceBlock),
		"missing":   {DeviceBlock, DeviceVsock, DeviceRNG},
		"empty":     nil,
	} {
		if err := CheckDeviceProfile(devs); codeOf(err) != actuation.CodeDeviceForbidden {
			t.Errorf("%s devices %v: %v, want %s", name, devs, err, actuation.CodeDeviceForbidden)
		}
	}
	p, _ := BuildPlan(testSpec(), testLimits, nil)
	for name, mut := range map[string]func(*Plan){
		"network":  func(p *Plan) { p.Network = "isolated" },
		"share":    func(p *Plan) { p.HostSharing = "read-only" },
		"virtiofs": func(p *Plan) { p.Devices = append(p.Devices, "virtio-fs") },
	} {
		q := *p
		q.Devices = slices.Clone(p.Devices)
		mut(&q)
		if err := CheckPlan(&q, testLimits); codeOf(err) != actuation.CodeDeviceForbidden {
			t.Errorf("plan with %s: %v, want %s", name, err, actuation.CodeDeviceForbidden)
		}
	}
}

func TestBuildPlanRefusals(t *testing.T) {
	cases := map[string]struct {
		mut  func(*backends.Spec)
		code actuation.Code
	}{
		"host root":         {func(s *backends.Spec) { s.Roots[0].HostPath = "/Users/me/src" }, actuation.CodeDeviceForbidden},
		"source root":       {func(s *backends.Spec) { s.Roots[0].Source = "/srv/fixture" }, actuation.CodeDeviceForbidden},
		"no EFI variant":    {func(s *backends.Spec) { s.EFI = nil }, actuation.CodeImageInvalid},
		"direct kernel":     {func(s *backends.Spec) { s.Boot = &backends.BootImage{KernelPath: "k"} }, actuation.CodeImageInvalid},
		"x86_64 variant":    {func(s *backends.Spec) { s.EFI.Architecture = "x86_64" }, actuation.CodeImageInvalid},
		"qcow2":             {func(s *backends.Spec) { s.EFI.DiskFormat = "qcow2" }, actuation.CodeImageInvalid},
		"autodetect":        {func(s *backends.Spec) { s.EFI.DiskFormat = "" }, actuation.CodeImageInvalid},
		"absolute disk":     {func(s *backends.Spec) { s.EFI.DiskPath = "/etc/passwd" }, actuation.CodeImageInvalid},
		"climbing disk":     {func(s *backends.Spec) { s.EFI.DiskPath = "guest/../../x.raw" }, actuation.CodeImageInvalid},
		"bad digest":        {func(s *backends.Spec) { s.EFI.DiskDigest = "sha256:xyz" }, actuation.CodeImageInvalid},
		"vcpus above":       {func(s *backends.Spec) { s.VCPUs = 5 }, actuation.CodeResourcesAboveMax},
		"memory above":      {func(s *backends.Spec) { s.MemoryMiB = 4097 }, actuation.CodeResourcesAboveMax},
		"memory below":      {func(s *backends.Spec) { s.MemoryMiB = 64 }, actuation.CodeResourcesInvalid},
		"disk above":        {func(s *backends.Spec) { s.DiskMiB = 16385 }, actuation.CodeResourcesAboveMax},
		"no roots":          {func(s *backends.Spec) { s.Roots = nil }, actuation.CodeRootInvalid},
		"duplicate root":    {func(s *backends.Spec) { s.Roots[1].Name = "repo" }, actuation.CodeRootInvalid},
		"traversing ID":     {func(s *backends.Spec) { s.ID = "../x" }, actuation.CodeEnvironmentIDInvalid},
		"dot ID":            {func(s *backends.Spec) { s.ID = ".probe" }, actuation.CodeEnvironmentIDInvalid},
		"slash in root":     {func(s *backends.Spec) { s.Roots[0].Name = "a/b" }, actuation.CodeRootInvalid},
		"overlong ID bytes": {func(s *backends.Spec) { s.ID = strings.Repeat("a", MaxIDBytes+1) }, actuation.CodeEnvironmentIDInvalid},
	}
	for name, tc := range cases {
		s := testSpec()
		e := *s.EFI
		s.EFI = &e
		s.Roots = slices.Clone(s.Roots)
		tc.mut(&s)
		if _, err := BuildPlan(s, testLimits, nil); codeOf(err) != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
	if err := CheckSocketPath("/" + strings.Repeat("d", maxSocketPath)); codeOf(err) != actuation.CodeStateDirTooLong {
		t.Errorf("long socket path: %v", err)
	}
}

func testBinding() protocol.Binding {
	return protocol.Binding{EnvironmentRef: "ns/env", SourceGeneration: 3, PlanDigest: testDigest, ImageDigest: testDigest, GuestCID: 3,
		BootNonce: strings.Repeat("ab", protocol.NonceHexLen/2)}
}

// TestBindingDiskIsReadByTheGuestAgent: the binding disk's bytes are what the real guest
// agent's --binding-file loader accepts (the guest protocol is unchanged).
func TestBindingDiskIsReadByTheGuestAgent(t *testing.T) {
	b := testBinding()
	data, err := BindingDisk(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != BindingDiskBytes {
		t.Fatalf("binding disk of %d bytes, want %d", len(data), BindingDiskBytes)
	}
	path := filepath.Join(t.TempDir(), BindingDiskName)
	if err := os.WriteFile(path, data, 0o400); err != nil {
		t.Fatal(err)
	}
	got, err := agent.LoadBindingFile(path)
	if err != nil {
		t.Fatalf("the guest agent refuses the binding disk: %v", err)
	}
	if got != b {
		t.Fatalf("guest read %+v, want %+v", got, b)
	}
	b.BootNonce = "short"
	if _, err := BindingDisk(b); err == nil {
		t.Fatal("an invalid binding was rendered")
	}
}

func writeTestRecord(t *testing.T, root, id string) (string, *Record) {
	t.Helper()
	dir := filepath.Join(root, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := testSpec()
	s.ID = id
	p, err := BuildPlan(s, testLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{ID: id, Ref: s.Ref, State: StateRunning, Generation: 2, Binding: testBinding(), Plan: *p}
	if err := WriteRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	return dir, rec
}

// TestRecordIsReadStrictly: a record edited to ask for virtio-fs (or carrying unknown
// fields, another environment's ID, or an unknown state) is refused, never booted.
func TestRecordIsReadStrictly(t *testing.T) {
	root := t.TempDir()
	dir, _ := writeTestRecord(t, root, "env-a")
	if _, err := ReadRecord(dir, testLimits); err != nil {
		t.Fatalf("ReadRecord of a fresh record: %v", err)
	}
	orig, err := os.ReadFile(filepath.Join(dir, RecordName))
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		edit func(string) string
		want string
	}{
		"virtio-fs":     {func(s string) string { return strings.Replace(s, `"virtio-block",`, `"virtio-block", "virtio-fs",`, 1) }, string(actuation.CodeDeviceForbidden)},
		"network":       {func(s string) string { return strings.Replace(s, `"network": "none"`, `"network": "isolated"`, 1) }, string(actuation.CodeDeviceForbidden)},
		"unknown field": {func(s string) string { return strings.Replace(s, `"state":`, `"shares": ["/"], "state":`, 1) }, "unknown field"},
		"other id":      {func(s string) string { return strings.Replace(s, `"id": "env-a"`, `"id": "env-b"`, 1) }, "names environment"},
		"state":         {func(s string) string { return strings.Replace(s, `"state": "running"`, `"state": "adopted"`, 1) }, "record state"},
		"schema": {func(s string) string {
			return strings.Replace(s, `vfkit-system.v1.record`, `qemu-microvm.v1.record`, 1)
		}, "schema"},
		"trailing": {func(s string) string { return s + `{}` }, "trailing"},
	} {
		edited := tc.edit(string(orig))
		if edited == string(orig) {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		if err := os.WriteFile(filepath.Join(dir, RecordName), []byte(edited), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadRecord(dir, testLimits); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ReadRecord = %v, want an error with %q", name, err, tc.want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, RecordName), bytes.Repeat([]byte(" "), recordLimit+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRecord(dir, testLimits); err == nil {
		t.Error("an oversized record was read")
	}
	if _, err := ReadRecord(filepath.Join(root, "none"), testLimits); !errors.Is(err, ErrNoRecord) {
		t.Errorf("missing record: %v", err)
	}
}

func TestDecide(t *testing.T) {
	rec := &Record{ID: "e", Generation: 4, State: StateRunning, Owner: &ProcessIdentity{PID: 10, Start: 1}}
	stopped := &Record{ID: "e", Generation: 4, State: StateStopped}
	cases := []struct {
		name  string
		rec   *Record
		known bool
		obs   Observation
		want  Decision
	}{
		{"no record, unknown", nil, false, Observation{}, Decision{Outcome: OutcomeTerminated, RemoveDir: true}},
		{"no record, known", nil, true, Observation{}, Decision{Outcome: OutcomeQuarantined, RemoveDir: true}},
		{"runs here", rec, true, Observation{RunsHere: true, OwnerAlive: true, OwnerIsSelf: true}, Decision{Outcome: OutcomeRecovered}},
		{"another live owner", rec, true, Observation{OwnerAlive: true, Disk: FileMatches}, Decision{Outcome: OutcomeQuarantined}},
		{"another live owner, unknown env", rec, false, Observation{OwnerAlive: true}, Decision{Outcome: OutcomeQuarantined}},
		{"owner gone, unknown env", rec, false, Observation{Disk: FileMatches}, Decision{Outcome: OutcomeTerminated, RemoveDir: true}},
		{"owner gone, disk matches", rec, true, Observation{Disk: FileMatches, EFIVars: FileMatches}, Decision{Outcome: OutcomeQuarantined, RemoveBoot: true, Tombstone: true}},
		{"owner gone, disk replaced", rec, true, Observation{Disk: FileReplaced, EFIVars: FileMatches}, Decision{Outcome: OutcomeQuarantined, RemoveBoot: true, Tombstone: true, RemoveDisk: true, RemoveEFIVars: true}},
		{"owner gone, disk missing", rec, true, Observation{Disk: FileMissing}, Decision{Outcome: OutcomeQuarantined, RemoveBoot: true, Tombstone: true, RemoveDisk: true, RemoveEFIVars: true}},
		{"owner gone, EFI store replaced", rec, true, Observation{Disk: FileMatches, EFIVars: FileReplaced}, Decision{Outcome: OutcomeQuarantined, RemoveBoot: true, Tombstone: true, RemoveDisk: true, RemoveEFIVars: true}},
		// A self-owned record that this process does not run: the VM ended (a failed boot).
		{"self owner, not running", rec, true, Observation{OwnerAlive: true, OwnerIsSelf: true, Disk: FileMatches}, Decision{Outcome: OutcomeQuarantined, RemoveBoot: true, Tombstone: true}},
		{"tombstone, disk kept", stopped, true, Observation{Disk: FileMatches}, Decision{RemoveBoot: true}},
		{"tombstone, disk replaced", stopped, true, Observation{Disk: FileReplaced}, Decision{Outcome: OutcomeQuarantined, RemoveBoot: true, RemoveDisk: true, RemoveEFIVars: true}},
		{"tombstone, unknown env", stopped, false, Observation{}, Decision{Outcome: OutcomeTerminated, RemoveDir: true}},
	}
	for _, tc := range cases {
		got := Decide(tc.rec, errors.New("x"), tc.known, tc.obs)
		if got.Message == "" && got.Outcome != "" {
			t.Errorf("%s: outcome %s without a message", tc.name, got.Outcome)
		}
		got.Message = ""
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func startSleep(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// TestSweepWithRealProcessesAndFiles drives the recovery sweep over a real directory
// tree with real process and file identities: a VM whose owner process died keeps its
// disk (same inode) and loses its boot files; a replaced disk is removed; an unknown
// environment's directory is removed; a VM whose owner still runs is left alone; a
// recycled PID (same PID, another start time) is not the owner; strays are removed.
func TestSweepWithRealProcessesAndFiles(t *testing.T) {
	root := t.TempDir()
	dead := startSleep(t)
	deadID, err := ProcessIdentityOf(dead.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	_ = dead.Process.Kill()
	_ = dead.Wait()
	live := startSleep(t)
	liveID, err := ProcessIdentityOf(live.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	self, err := ProcessIdentityOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	recycled := liveID
	recycled.Start--

	mk := func(id string, owner ProcessIdentity, replaceDisk bool) string {
		dir, rec := writeTestRecord(t, root, id)
		for _, n := range []string{DiskName, EFIVarsName, BindingDiskName, SerialLogName, tmpPrefix + "x"} {
			if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		d, _ := StatFile(filepath.Join(dir, DiskName))
		e, _ := StatFile(filepath.Join(dir, EFIVarsName))
		rec.Disk, rec.EFIVars, rec.CloneOf, rec.Owner = &d, &e, testDigest, &owner
		if err := WriteRecord(dir, rec); err != nil {
			t.Fatal(err)
		}
		if replaceDisk {
			p := filepath.Join(dir, DiskName)
			if err := os.Rename(filepath.Join(dir, BindingDiskName), p+".new"); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(p+".new", p); err != nil { // another inode at the disk's path
				t.Fatal(err)
			}
		}
		return dir
	}
	kept := mk("dead-owner", deadID, false)
	replaced := mk("replaced-disk", deadID, true)
	gone := mk("unknown-env", deadID, false)
	other := mk("live-owner", liveID, false)
	reused := mk("reused-pid", recycled, false)
	if err := os.WriteFile(filepath.Join(root, "stray-file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, ".probe"), 0o700); err != nil {
		t.Fatal(err)
	}
	known := map[string]backends.Spec{"dead-owner": {}, "replaced-disk": {}, "live-owner": {}, "reused-pid": {}}
	actions, err := Sweep(root, known, testLimits, func(dir string, rec *Record) Observation {
		return ObserveWith(rec, self, false)
	})
	if err != nil {
		t.Fatal(err)
	}
	outcome := map[string]string{}
	for _, a := range actions {
		outcome[filepath.Base(a.Resource)] = a.Outcome
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }
	for _, d := range []string{kept, reused} {
		if outcome[filepath.Base(d)] != OutcomeQuarantined || !exists(filepath.Join(d, DiskName)) || !exists(filepath.Join(d, EFIVarsName)) ||
			exists(filepath.Join(d, BindingDiskName)) || exists(filepath.Join(d, SerialLogName)) || exists(filepath.Join(d, tmpPrefix+"x")) {
			t.Errorf("%s: outcome %q; want quarantined with disk and EFI store kept and boot files removed", filepath.Base(d), outcome[filepath.Base(d)])
		}
		rec, err := ReadRecord(d, testLimits)
		if err != nil || rec.State != StateStopped || rec.Generation != 2 || rec.Owner != nil || rec.Disk == nil {
			t.Errorf("%s: tombstone %+v, %v", filepath.Base(d), rec, err)
		}
	}
	if exists(filepath.Join(replaced, DiskName)) || exists(filepath.Join(replaced, EFIVarsName)) || outcome["replaced-disk"] != OutcomeQuarantined {
		t.Errorf("replaced disk: outcome %q, disk present %v; want it removed", outcome["replaced-disk"], exists(filepath.Join(replaced, DiskName)))
	}
	if exists(gone) || outcome["unknown-env"] != OutcomeTerminated {
		t.Errorf("unknown environment: outcome %q, present %v", outcome["unknown-env"], exists(gone))
	}
	if outcome["live-owner"] != OutcomeQuarantined || !exists(filepath.Join(other, BindingDiskName)) || !exists(filepath.Join(other, DiskName)) {
		t.Errorf("live owner: outcome %q; want its files untouched", outcome["live-owner"])
	}
	if rec, err := ReadRecord(other, testLimits); err != nil || rec.State != StateRunning {
		t.Errorf("live owner's record changed: %+v %v", rec, err)
	}
	if exists(filepath.Join(root, "stray-file")) || exists(filepath.Join(root, ".probe")) {
		t.Error("strays survived the sweep")
	}
}

func echoServer(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guest.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return path
}

// TestServeHybrid: the broker's socket speaks the hybrid-vsock protocol the node agent's
// guest client speaks to qemu-microvm.v1 (CONNECT <port> / OK <port>, then the stream),
// serves only the agent port, and refuses malformed or oversized request lines.
func TestServeHybrid(t *testing.T) {
	guest := echoServer(t)
	var dialed []uint32
	sock := filepath.Join(t.TempDir(), GuestSockName)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- ServeHybrid(ln, func(port uint32) (net.Conn, error) {
			dialed = append(dialed, port)
			return net.Dial("unix", guest)
		})
	}()
	talk := func(req string) (string, net.Conn) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		return string(buf[:n]), c
	}
	resp, c := talk("CONNECT 1024\n")
	if resp != "OK 1024\n" {
		t.Fatalf("CONNECT 1024: %q", resp)
	}
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("stream: %q %v", buf, err)
	}
	_ = c.Close()
	for _, bad := range []string{"CONNECT 22\n", "CONNECT 1025\n", "connect 1024\n", "CONNECT 1024 \n", "CONNECT " + strings.Repeat("1", 40) + "\n", "GET / HTTP/1.1\n"} {
		if resp, c := talk(bad); resp != "" {
			t.Errorf("%q answered %q, want the connection closed", bad, resp)
		} else {
			_ = c.Close()
		}
	}
	if !slices.Equal(dialed, []uint32{protocol.AgentPort}) {
		t.Errorf("guest ports dialed: %v, want only %d", dialed, protocol.AgentPort)
	}
	_ = ln.Close()
	if err := <-done; err != nil {
		t.Fatalf("ServeHybrid after close: %v", err)
	}
}

func TestWaitReady(t *testing.T) {
	for _, tc := range []struct {
		name string
		send string
		code actuation.Code
	}{
		{"ready", protocol.ReadyLine, ""},
		{"wrong line", "HELLO\n", actuation.CodeBootFailed},
		{"silent", "", actuation.CodeBootTimeout},
	} {
		path := filepath.Join(t.TempDir(), "r.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		if tc.send != "" {
			go func() {
				c, err := net.Dial("unix", path)
				if err == nil {
					_, _ = io.WriteString(c, tc.send)
					_ = c.Close()
				}
			}()
		}
		timeout := 20 * time.Second
		if tc.send == "" {
			timeout = 50 * time.Millisecond
		}
		err = WaitReady(ln, timeout)
		if codeOf(err) != tc.code || (tc.code == "" && err != nil) {
			t.Errorf("%s: %v, want code %q", tc.name, err, tc.code)
		}
		_ = ln.Close()
	}
}

func TestSerialLogIsBoundedAndNeverBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), SerialLogName)
	s, err := OpenSerialLog(path, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []string{"0123", "456789ab", "cdef"} {
		if n, err := s.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	if w, d := s.Stats(); w != 10 || d != 6 {
		t.Fatalf("stats %d kept, %d dropped; want 10, 6", w, d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(path); string(data) != "0123456789" {
		t.Fatalf("serial log %q", data)
	}
}

func TestCapabilityIsInTheClosedVocabulary(t *testing.T) {
	c := Capability("v0.0.0", testDigest, "15.1")
	if rs := actuation.ValidateCapability(c); len(rs) > 0 {
		t.Fatalf("capability refused: %v", rs)
	}
	if c.BackendID != ID || c.BootMode != "efi" || c.HostFilesystemSharing != "denied" || !slices.Equal(c.NetworkProfiles, []string{"none"}) ||
		!slices.Equal(c.DeviceClasses, Profile) {
		t.Fatalf("capability %+v", c)
	}
}

package qemumicrovm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

// FloorBoot is the benchmarks' floor for a VM boot: the vsock device and QEMU started
// directly with the product's own command line (qemuArgs: the same kernel, initrd,
// accelerator, devices, memory and vCPUs), timed from the first process start to the
// guest agent's handshake answer. No record, no digest check, no process identities, no
// root creation, no placement. dir is a scratch directory, removed afterwards; ctx bounds
// the boot (a minute when it has no deadline). It is not used by the product itself.
func (b *Backend) FloorBoot(ctx context.Context, img *backends.BootImage, dir string) (time.Duration, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		limit := time.Minute
		if img.DiskPath != "" {
			limit = b.cfg.SystemBootTimeout
		}
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(dir) }() // the measurement VM's scratch directory
	accel, _, err := b.accelerator(ctx)
	if err != nil {
		return 0, err
	}
	nonce, err := newNonce()
	if err != nil {
		return 0, err
	}
	rec := &Record{Accel: accel, VCPUs: DefaultVCPUs, MemoryMiB: DefaultMemoryMiB, CommandLine: commandLine(img.CommandLine, accel),
		Binding: protocol.Binding{EnvironmentRef: "bench/floor", SourceGeneration: 1, PlanDigest: protocol.DigestOf([]byte("floor")),
			ImageDigest: imageDigest(img), GuestCID: guestCID, BootNonce: nonce}}
	bj, err := json.Marshal(rec.Binding)
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, bindingName), bj, 0o400); err != nil {
		return 0, err
	}
	kernel, err := os.Open(filepath.Join(b.cfg.ImageDir, img.KernelPath))
	if err != nil {
		return 0, err
	}
	defer func() { _ = kernel.Close() }()
	initrd, err := os.Open(filepath.Join(b.cfg.ImageDir, img.InitrdPath))
	if err != nil {
		return 0, err
	}
	defer func() { _ = initrd.Close() }()
	extra := []*os.File{kernel, initrd}
	if img.DiskPath != "" {
		// A full-system variant boots a private copy of its base (made before the clock
		// starts: the floor is QEMU and the guest, not the clone).
		d, err := floorDisk(filepath.Join(b.cfg.ImageDir, img.DiskPath), filepath.Join(dir, "disk.img"))
		if err != nil {
			return 0, err
		}
		defer func() { _ = d.Close() }()
		ro, err := readOnlyTwin(d)
		if err != nil {
			return 0, err
		}
		defer func() { _ = ro.Close() }()
		rec.Disk = &DiskRef{Path: d.Name()}
		extra = append(extra, nil, d, ro) // fd 5 unused here (the product's VM directory), fds 6 and 7 the disk
	}
	vs, gs := filepath.Join(dir, vhostSock), filepath.Join(dir, guestSock)
	w, err := watchDir(dir)
	if err != nil {
		return 0, err
	}
	defer w.close()

	start := time.Now()
	dev := exec.Command(b.devBin, "--guest-cid=3", "--socket="+vs, "--uds-path="+gs)
	dev.Env = []string{"RUST_LOG=warn"}
	if err := dev.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = dev.Process.Kill(); _ = dev.Wait() }()
	if err := w.waitFor(ctx, vs, nil); err != nil {
		return 0, err
	}
	ready, err := guestclient.ListenReady(gs, 0)
	if err != nil {
		return 0, err
	}
	defer func() { _ = ready.Close() }()
	serial, err := listenSerial(filepath.Join(dir, serialSock), filepath.Join(dir, serialLog), DefaultSerialMaxBytes)
	if err != nil {
		return 0, err
	}
	go serial.serve(time.Now().Add(10 * time.Minute))
	defer serial.close()
	q := exec.Command(b.qemuBin, b.qemuArgs(dir, rec)...)
	q.ExtraFiles = extra
	var out bytes.Buffer
	q.Stdout, q.Stderr = &out, &out
	if err := q.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = q.Process.Kill(); _ = q.Wait() }()
	if err := ready.Wait(ctx); err != nil {
		return 0, fmt.Errorf("floor boot: %w (%s)", err, out.String())
	}
	c, _, err := guestclient.WaitReady(ctx, guestclient.Endpoint{Path: gs, Hybrid: true}, rec.Binding, 20*time.Millisecond)
	if err != nil {
		return 0, err
	}
	took := time.Since(start)
	_ = c.Close()
	return took, nil
}

// floorDisk is a sparse copy of base at path, open for reading and writing.
func floorDisk(base, path string) (*os.File, error) {
	src, err := os.Open(base)
	if err != nil {
		return nil, err
	}
	defer func() { _ = src.Close() }()
	fi, err := src.Stat()
	if err != nil {
		return nil, err
	}
	p := loopdisk.NewPool(filepath.Dir(path), fi.Size()+1)
	id := strings.TrimSuffix(filepath.Base(path), loopdisk.ImageSuffix)
	if _, _, err := p.Clone(id, src, fi.Size()); err != nil {
		return nil, err
	}
	return os.OpenFile(p.Image(id), os.O_RDWR, 0)
}

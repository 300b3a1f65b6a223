//go:build darwin

// Command vfkit-smoke boots one vfkit-system.v1 guest on a Mac through the backend exactly
// as the node agent would (Recover, Allocate, the guest socket, Teardown) and prints what
// happened and how long each step took: the manual acceptance check of the macOS backend
// on a machine that has one (CI only type-checks it: make darwin-check).
//
//	CGO_ENABLED=1 go build -o vfkit-smoke ./cmd/vfkit-smoke
//	codesign --entitlements hack/vfkit.entitlements -s - vfkit-smoke
//	./vfkit-smoke -images ~/wb/images -disk guest/full-system-arm64.raw -digest sha256:...
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/vfkitsystem"
)

func main() {
	state := flag.String("state", os.TempDir()+"/vfkit-smoke", "state directory (APFS)")
	images := flag.String("images", "", "image directory (APFS; the disk path resolves beneath it)")
	disk := flag.String("disk", "", "the arm64 EFI variant's raw disk, relative to -images")
	digest := flag.String("digest", "", "the disk's sha256:<hex>")
	cpus := flag.Int("cpus", 2, "vCPUs")
	mem := flag.Int("memory-mib", 1024, "guest memory (MiB)")
	size := flag.Int("disk-mib", 8192, "working disk's virtual size (MiB)")
	timeout := flag.Duration("timeout", 2*time.Minute, "boot timeout")
	keep := flag.Bool("keep", false, "leave the VM directory (the working disk) after the run")
	flag.Parse()
	if err := run(*state, *images, *disk, *digest, int32(*cpus), int32(*mem), int32(*size), *timeout, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "vfkit-smoke:", err)
		os.Exit(1)
	}
}

func run(state, images, disk, digest string, cpus, mem, size int32, timeout time.Duration, keep bool) error {
	b, err := vfkitsystem.New(vfkitsystem.Config{StateDir: state, ImageDir: images, BootTimeout: timeout, MaxVMs: 1})
	if err != nil {
		return err
	}
	ctx := context.Background()
	acts, err := b.Recover(ctx, nil)
	if err != nil {
		return err
	}
	for _, a := range acts {
		fmt.Printf("recover: %s %s: %s\n", a.Outcome, a.Resource, a.Message)
	}
	spec := backends.Spec{ID: "smoke", Ref: "vfkit-smoke/smoke", Generation: 1, VCPUs: cpus, MemoryMiB: mem, DiskMiB: size,
		Roots: []backends.Root{{Name: "workspace"}},
		EFI:   &backends.EFIBootImage{Variant: "smoke", Architecture: "arm64", DiskPath: disk, DiskDigest: digest, DiskFormat: vfkitsystem.DiskFormatRaw}}
	start := time.Now()
	st, err := b.Allocate(ctx, spec)
	if err != nil {
		return fmt.Errorf("allocate: %w", err)
	}
	fmt.Printf("allocate: %s in %v: %s\n", st.Phase, time.Since(start).Round(time.Millisecond), st.Message)
	sock, _, err := b.GuestSocket(spec.ID)
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("unix", sock, 10*time.Second)
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT 1024\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	_ = c.Close()
	if err != nil || strings.TrimSpace(line) != "OK 1024" {
		return fmt.Errorf("guest channel: %q %v", line, err)
	}
	fmt.Printf("guest channel: %s (socket %s)\n", strings.TrimSpace(line), sock)
	if keep {
		return nil
	}
	st, err = b.Teardown(ctx, spec)
	fmt.Printf("teardown: %s residue %v: %s\n", st.Phase, st.Residue, st.Message)
	return err
}

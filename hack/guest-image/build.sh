#!/usr/bin/env bash
# Builds the minimal Workbench guest image for qemu-microvm.v1 into bin/guest/:
#
#   vmlinux               Debian's kernel (resolved through linux-image-amd64), uncompressed
#                         from vmlinuz's xz payload (PVH entry: boots ~3.5 s faster under TCG)
#   initramfs.cpio        reproducible cpio newc (sorted, 0:0, fixed mtime): /init = the static
#                         guest agent, busybox-static, the virtio/vsock/fw_cfg modules and the
#                         list the agent loads them from. No sshd, no keys, no NIC driver.
#   workbench-guest       the static agent (CGO_ENABLED=0, -trimpath, no build id)
#   vhost-device-vsock    the vsock device (Debian unstable, pinned version and sha256)
#   digests.txt           sha256 digests (also printed)
#
# and writes config/samples/07_imagemanifest.yaml. Paths in the manifest are relative to
# the node agent's image directory (bin/ in a checkout: guest/vmlinux, ...).
#
# Needs root for apt-get (packages: qemu-system-x86, busybox-static, xz-utils). Names no
# package host: the unstable suite is fetched through a separate apt configuration (own
# sources dir, lists and cache under bin/guest/work/) that reuses the mirror URL of the
# machine's own /etc/apt/sources.list.d/debian.sources.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${GUEST_IMAGE_OUT:-$REPO/bin/guest}"
WORK="$OUT/work"
MANIFEST="${GUEST_IMAGE_MANIFEST:-$REPO/config/samples/07_imagemanifest.yaml}"
SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-0}"
KERNEL_CMDLINE="console=ttyS0 panic=-1 quiet"

# vhost-device-vsock exists only in Debian's unstable suite; pinned version and digest.
VHOST_VSOCK_VERSION="0.3.0-2"
VHOST_VSOCK_SHA256="fd36382419cc174f00d9b1691486b581e13e8c1168dc339b86b2a65180a29ce7"

# Load order matters (dependencies first); a module built into the kernel is skipped.
MODULES=(virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_mmio
  vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport qemu_fw_cfg)

# busybox applets linked in /bin (the agent never needs them; they serve commands run in
# the guest). No network applets beyond what busybox's multi-call binary itself contains.
APPLETS=(sh ash ls cat echo uname sleep env true false mkdir rm mv cp ln sort wc head tail
  grep sed tr id ps mount umount dmesg sync stat touch chmod find xargs printf test expr
  date hostname readlink realpath dirname basename sha256sum diff tee cut uniq od hexdump
  vi less more tar gzip gunzip stty tty reset clear kill)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'guest-image: %s\n' "$*" >&2; exit 1; }
# shellcheck source=hack/lib/apt-side.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib/apt-side.sh"

[[ "$(uname -m)" == x86_64 ]] || die "x86_64 only (this is $(uname -m))"
[[ $EUID -eq 0 ]] || die "run as root (apt-get install/download)"
mkdir -p "$OUT" "$WORK"

# --- host packages -------------------------------------------------------------------------
need=()
for p in qemu-system-x86 busybox-static xz-utils; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  log "apt-get install --no-install-recommends ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
BUSYBOX=/bin/busybox
(cd "$REPO" && go build -trimpath -buildvcs=false -o "$WORK/mkinitramfs" ./hack/guest-image/mkinitramfs)
static() { "$WORK/mkinitramfs" -check-static "$1"; } # no PT_INTERP
static "$BUSYBOX" || die "$BUSYBOX is not static (busybox-static not installed?)"

# --- kernel --------------------------------------------------------------------------------
KPKG="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
if [[ -z "$KPKG" ]]; then
  apt-get update -qq
  KPKG="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')"
fi
[[ -n "$KPKG" ]] || die "cannot resolve linux-image-amd64"
KVER="${KPKG#linux-image-}"
log "kernel package $KPKG"
KDIR="$WORK/kernel-$KVER"
if [[ ! -f "$KDIR/boot/vmlinuz-$KVER" ]]; then
  rm -rf "$WORK/kdeb" "$KDIR"
  mkdir -p "$WORK/kdeb"
  (cd "$WORK/kdeb" && apt-get download -qq "$KPKG" 2>&1 | grep -v 'unsandboxed as root' || true)
  deb="$(ls "$WORK/kdeb/${KPKG}_"*.deb 2>/dev/null | head -1)"
  [[ -f "$deb" ]] || die "apt-get download $KPKG failed"
  KPKG_VERSION="$(dpkg-deb -f "$deb" Version)"
  rm -rf "$KDIR.tmp"
  dpkg-deb -x "$deb" "$KDIR.tmp"
  # Keep only what the image uses: vmlinuz, modules.builtin and the listed modules.
  keep="$(printf ' -name %s.ko* -o' "${MODULES[@]}")"
  find "$KDIR.tmp/lib/modules/$KVER/kernel" -type f ! \( ${keep% -o} \) -delete
  find "$KDIR.tmp" -mindepth 1 -maxdepth 1 ! -name boot ! -name lib -exec rm -rf {} +
  find "$KDIR.tmp/boot" -type f ! -name "vmlinuz-$KVER" -delete
  echo "$KPKG_VERSION" >"$KDIR.tmp/package-version"
  mv "$KDIR.tmp" "$KDIR"
  rm -rf "$WORK/kdeb"
fi
KPKG_VERSION="$(cat "$KDIR/package-version")"
VMLINUZ="$KDIR/boot/vmlinuz-$KVER"

# vmlinux: the first xz stream inside vmlinuz (bzImage's payload), decompressed.
log "extracting vmlinux from the xz payload of vmlinuz-$KVER"
off="$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$VMLINUZ" | head -1 | cut -d: -f1)"
[[ -n "$off" ]] || die "no xz payload in $VMLINUZ"
tail -c +"$((off + 1))" "$VMLINUZ" | xz -dc --single-stream >"$OUT/vmlinux.tmp" 2>/dev/null || true
[[ "$(head -c 4 "$OUT/vmlinux.tmp" | od -An -tx1 | tr -d ' \n')" == 7f454c46 ]] || die "vmlinux is not ELF"
if command -v readelf >/dev/null && ! readelf -n "$OUT/vmlinux.tmp" 2>/dev/null | grep -q 'Xen'; then
  die "vmlinux has no Xen/PVH ELF note (cannot boot with -kernel vmlinux)"
fi
mv "$OUT/vmlinux.tmp" "$OUT/vmlinux"

# Modules.
MODDIR="$WORK/modules"
rm -rf "$MODDIR"
mkdir -p "$MODDIR"
: >"$WORK/modules.list"
for m in "${MODULES[@]}"; do
  if grep -qE "/$m\.ko$" "$KDIR/lib/modules/$KVER/modules.builtin"; then
    log "module $m is built in"
    continue
  fi
  src="$(find "$KDIR/lib/modules/$KVER/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -1)"
  [[ -n "$src" ]] || die "module $m not found in $KPKG"
  case "$src" in
    *.xz) xz -dc "$src" >"$MODDIR/$m.ko" ;;
    *.zst) zstd -qdc "$src" >"$MODDIR/$m.ko" ;;
    *) cp "$src" "$MODDIR/$m.ko" ;;
  esac
  echo "/lib/modules/$m.ko" >>"$WORK/modules.list"
done

# --- agent ---------------------------------------------------------------------------------
log "building the static guest agent"
(cd "$REPO" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false \
  -ldflags '-s -w -buildid=' -o "$OUT/workbench-guest" ./guest/cmd/workbench-guest)
static "$OUT/workbench-guest" || die "agent is not static"
PROTOCOL_DIGEST="$("$OUT/workbench-guest" --print-protocol-digest)"

# --- initramfs -----------------------------------------------------------------------------
SPEC="$WORK/initramfs.spec"
{
  echo "# Workbench guest initramfs (generated by hack/guest-image/build.sh)"
  for d in /bin /dev /etc /etc/workbench /lib /lib/modules /proc /root /run /sys /tmp /workspace; do
    echo "dir $d 0755"
  done
  echo "nod /dev/console 0600 c 5 1"
  echo "nod /dev/null 0666 c 1 3"
  echo "file /init $OUT/workbench-guest 0755"
  echo "file /bin/busybox $BUSYBOX 0755"
  for a in "${APPLETS[@]}"; do echo "slink /bin/$a busybox 0777"; done
  echo "file /etc/workbench/modules $WORK/modules.list 0644"
  for f in "$MODDIR"/*.ko; do echo "file /lib/modules/$(basename "$f") $f 0644"; done
} >"$SPEC"
"$WORK/mkinitramfs" -spec "$SPEC" -o "$OUT/initramfs.cpio" -mtime "$SOURCE_DATE_EPOCH"

# --- vhost-device-vsock (unstable, separate apt configuration) -----------------------------
VDEB="$WORK/vhost-device-vsock_${VHOST_VSOCK_VERSION}_amd64.deb"
sha_ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$VHOST_VSOCK_SHA256" ]]; }
if ! sha_ok "$VDEB"; then
  log "fetching vhost-device-vsock $VHOST_VSOCK_VERSION (unstable, separate apt configuration)"
  rm -f "$WORK"/vhost-device-vsock_*.deb
  apt_side_download unstable "$WORK/apt-unstable" "$WORK" "vhost-device-vsock=$VHOST_VSOCK_VERSION"
  sha_ok "$VDEB" || die "vhost-device-vsock .deb missing or sha256 mismatch (want $VHOST_VSOCK_SHA256)"
fi
rm -rf "$WORK/vdeb"
dpkg-deb -x "$VDEB" "$WORK/vdeb"
install -m 0755 "$WORK/vdeb/usr/bin/vhost-device-vsock" "$OUT/vhost-device-vsock"
rm -rf "$WORK/vdeb"
"$OUT/vhost-device-vsock" --version >/dev/null || die "vhost-device-vsock does not run on this host"

# --- digests and manifest ------------------------------------------------------------------
sha() { sha256sum "$1" | cut -d' ' -f1; }
K_SHA="$(sha "$OUT/vmlinux")"
I_SHA="$(sha "$OUT/initramfs.cpio")"
A_SHA="$(sha "$OUT/workbench-guest")"
V_SHA="$(sha "$OUT/vhost-device-vsock")"
{
  echo "kernel-package $KPKG $KPKG_VERSION"
  echo "kernel sha256:$K_SHA guest/vmlinux $(stat -c %s "$OUT/vmlinux")"
  echo "initrd sha256:$I_SHA guest/initramfs.cpio $(stat -c %s "$OUT/initramfs.cpio")"
  echo "agent sha256:$A_SHA"
  echo "protocol $PROTOCOL_DIGEST"
  echo "vhost-device-vsock sha256:$V_SHA $VHOST_VSOCK_VERSION"
  echo "cmdline $KERNEL_CMDLINE"
} >"$OUT/digests.txt"
cat "$OUT/digests.txt"

cat >"$MANIFEST" <<EOF
# The minimal Workbench guest image for qemu-microvm.v1, as built by \`make guest-image\`
# (hack/guest-image/build.sh): Debian's kernel $KPKG ($KPKG_VERSION) booted directly as an
# uncompressed vmlinux (PVH entry), and a reproducible initramfs whose /init is the static
# guest agent, with busybox-static and the virtio/vsock/fw_cfg modules. No sshd, no keys, no
# NIC driver. Paths are relative to the node agent's image directory.
apiVersion: workbench.sensorium.dev/v1alpha1
kind: ImageManifest
metadata:
  name: workbench-guest-x86-64
spec:
  digests:
    # The initramfs is the whole userspace of this image.
    userspace: sha256:$I_SHA
    agent: sha256:$A_SHA
    protocol: $PROTOCOL_DIGEST
  variants:
    - name: qemu-microvm-x86-64
      backendID: qemu-microvm.v1
      architecture: x86_64
      bootMode: direct-kernel
      kernel:
        digest: sha256:$K_SHA
        path: guest/vmlinux
        size: $(stat -c %s "$OUT/vmlinux")
      initrd:
        digest: sha256:$I_SHA
        path: guest/initramfs.cpio
        size: $(stat -c %s "$OUT/initramfs.cpio")
      kernelCommandLine: $KERNEL_CMDLINE
EOF
log "wrote $MANIFEST"

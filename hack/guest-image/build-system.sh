#!/usr/bin/env bash
# Builds the full-system Workbench guest image (the `full-system` variant of qemu-microvm.v1)
# into bin/guest-system/ from Debian packages, without root mounts:
#
#   base.tar          mmdebstrap (unshare mode) of the pinned package set: systemd as PID 1,
#                     Debian's kernel and an initramfs-tools initramfs (virtio modules), kmod,
#                     udev, dbus. No sshd, no keys, no NIC configuration, no network sources.
#                     Cached: rebuilt only when this script or the lock file changes.
#   rootfs.raw        ext4 made by `mke2fs -d` from base.tar plus the overlay (the static guest
#                     agent as a systemd unit listening on vsock, an offline package directory
#                     with its own apt source, the dummy/loop module list). Fixed UUID, hash
#                     seed and time: the same inputs give the same bytes.
#   vmlinux           the image's own kernel (its /boot/vmlinuz, xz payload uncompressed: PVH)
#   initrd.img        the image's own initramfs (its /boot/initrd.img)
#   sbom.cdx.json     CycloneDX SBOM generated from the image's dpkg database (cmd below)
#   provenance.json   what was built from what (script, lock, mirror suites' Release digests)
#   packages.lock     package=version of every installed package (the pin)
#   imagemanifest.yaml  the ImageManifest of this build (the tests apply it)
#
# and writes config/samples/08_imagemanifest-system.yaml.
#
# Pinning: hack/guest-image/system/packages.lock lists package=version for the whole set;
# when present, every listed version is pinned (apt preferences, priority 1001) and the
# build fails if the mirror no longer serves one. Delete it (or GUEST_SYSTEM_RELOCK=1) to
# re-resolve; the new lock is written back. SOURCE_DATE_EPOCH comes from the lock.
#
# The mirror is read from the machine's own /etc/apt/sources.list.d/debian.sources (no
# package host is named here). Needs root (apt-get install mmdebstrap, e2fsprogs, uidmap).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$REPO/hack/guest-image/system"
OUT="${GUEST_SYSTEM_OUT:-$REPO/bin/guest-system}"
WORK="$OUT/work"
MANIFEST="${GUEST_SYSTEM_MANIFEST:-$REPO/config/samples/08_imagemanifest-system.yaml}"
LOCK="$HERE/packages.lock"
SUITE=bookworm
KERNEL_CMDLINE="console=ttyS0 root=/dev/vda rw rootfstype=ext4 panic=-1 quiet loglevel=3 systemd.show_status=0 systemd.firstboot=off"
INCLUDE=(systemd systemd-sysv udev kmod dbus linux-image-amd64 initramfs-tools procps iproute2 e2fsprogs)
OFFLINE_DEBS=(hello)
# The fixed filesystem identity (reproducible mke2fs output).
FS_UUID=5a1c0b4e-7b1d-4c47-9d2e-000000000029
FS_HASH_SEED=5a1c0b4e-7b1d-4c47-9d2e-0000000000a5
ROOTFS_SIZE="${GUEST_SYSTEM_ROOTFS_SIZE:-1536M}"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'guest-image-system: %s\n' "$*" >&2; exit 1; }

[[ "$(uname -m)" == x86_64 ]] || die "x86_64 only (this is $(uname -m))"
[[ $EUID -eq 0 ]] || die "run as root (apt-get install, mmdebstrap)"
mkdir -p "$OUT" "$WORK"

need=()
for p in mmdebstrap e2fsprogs uidmap xz-utils dpkg-dev tar; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  log "apt-get install --no-install-recommends ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# mke2fs -d DIR with hash_seed/root_owner (e2fsprogs >= 1.47).
[[ "$(mke2fs -V 2>&1 || true)" =~ mke2fs\ 1\.(4[7-9]|[5-9][0-9]) ]] || die "mke2fs >= 1.47 needed (-d tarball)"

SOURCES=/etc/apt/sources.list.d/debian.sources
[[ -f "$SOURCES" ]] || die "no $SOURCES (the machine's Debian mirror)"

sha() { sha256sum "$1" | cut -d' ' -f1; }

# --- base (cached) --------------------------------------------------------------------------
if [[ -f "$LOCK" && "${GUEST_SYSTEM_RELOCK:-0}" != 1 ]]; then
  SOURCE_DATE_EPOCH="$(awk '/^# SOURCE_DATE_EPOCH=/ {sub(/.*=/, ""); print; exit}' "$LOCK")"
else
  SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(date -u +%s)}"
fi
export SOURCE_DATE_EPOCH
# The base is keyed by what mmdebstrap is given (suite, package list, recipe version, epoch);
# the lock check below rebuilds nothing silently: a base whose package set differs from
# the lock fails the build. Bump BASE_RECIPE when the mmdebstrap call changes.
BASE_RECIPE=1
BASE_KEY="$(echo "$SUITE ${INCLUDE[*]} $BASE_RECIPE $SOURCE_DATE_EPOCH" | sha256sum | cut -c1-16)"
BASE="$WORK/base-$BASE_KEY.tar"
if [[ ! -f "$BASE" ]]; then
  log "mmdebstrap $SUITE (unshare mode) -> $BASE"
  rm -f "$WORK"/base-*.tar
  pinhook=()
  if [[ -f "$LOCK" && "${GUEST_SYSTEM_RELOCK:-0}" != 1 ]]; then
    awk '!/^#/ && NF {split($1, a, "="); printf "Package: %s\nPin: version %s\nPin-Priority: 1001\n\n", a[1], a[2]}' "$LOCK" >"$WORK/pin.pref"
    pinhook=(--setup-hook="mkdir -p \"\$1/etc/apt/preferences.d\" && cp '$WORK/pin.pref' \"\$1/etc/apt/preferences.d/workbench-pin\"")
  fi
  # Before the kernel is installed: a small initramfs with the virtio modules, gzip.
  mmdebstrap --mode=unshare --variant=minbase --format=tar \
    --include="$(IFS=,; echo "${INCLUDE[*]}")" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    "${pinhook[@]}" \
    --setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"' \
    --setup-hook="printf 'MODULES=list\nCOMPRESS=gzip\n' >\"\$1/etc/initramfs-tools/conf.d/workbench\"" \
    --setup-hook="printf '%s\n' virtio_ring virtio virtio_mmio virtio_pci virtio_blk crc32c_generic ext4 >\"\$1/usr/share/initramfs-tools/modules.d/workbench\"" \
    --customize-hook='rm -f "$1/etc/apt/preferences.d/workbench-pin"' \
    --customize-hook='chroot "$1" dpkg-query -W -f "\${Package}=\${Version}\n" >"$1/etc/workbench-packages.lock"' \
    --customize-hook='rm -rf "$1/var/lib/apt/lists"/* "$1/var/cache/apt"/*.bin "$1/etc/apt/sources.list" "$1/etc/apt/sources.list.d"/*' \
    "$SUITE" "$BASE.tmp" "$SOURCES" \
    || die "mmdebstrap failed"
  mv "$BASE.tmp" "$BASE"
fi

# --- the pin: written back on first resolve -------------------------------------------------
tar -xOf "$BASE" ./etc/workbench-packages.lock | LC_ALL=C sort >"$WORK/packages.lock.now"
if [[ ! -f "$LOCK" || "${GUEST_SYSTEM_RELOCK:-0}" == 1 ]]; then
  { echo "# Package set of the full-system guest image (hack/guest-image/build-system.sh)."
    echo "# SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
    cat "$WORK/packages.lock.now"; } >"$LOCK"
  log "wrote $LOCK"
elif ! diff -q <(grep -v '^#' "$LOCK" | LC_ALL=C sort) "$WORK/packages.lock.now" >/dev/null; then
  diff <(grep -v '^#' "$LOCK" | LC_ALL=C sort) "$WORK/packages.lock.now" | head -20 >&2
  die "the built package set differs from $LOCK (set GUEST_SYSTEM_RELOCK=1 to re-resolve)"
fi
cp "$WORK/packages.lock.now" "$OUT/packages.lock"

# --- kernel and initramfs of the image ------------------------------------------------------
KVMLINUZ="$(tar -tf "$BASE" | grep -E '^\./boot/vmlinuz-' | head -1)"
KINITRD="$(tar -tf "$BASE" | grep -E '^\./boot/initrd\.img-' | head -1)"
[[ -n "$KVMLINUZ" && -n "$KINITRD" ]] || die "no kernel or initrd in the image"
KVER="${KVMLINUZ#./boot/vmlinuz-}"
tar -xOf "$BASE" "$KVMLINUZ" >"$WORK/vmlinuz"
tar -xOf "$BASE" "$KINITRD" >"$OUT/initrd.img.tmp" && mv "$OUT/initrd.img.tmp" "$OUT/initrd.img"
off="$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$WORK/vmlinuz" | head -1 | cut -d: -f1)"
[[ -n "$off" ]] || die "no xz payload in vmlinuz-$KVER"
tail -c +"$((off + 1))" "$WORK/vmlinuz" | xz -dc --single-stream >"$OUT/vmlinux.tmp" 2>/dev/null || true
[[ "$(head -c 4 "$OUT/vmlinux.tmp" | od -An -tx1 | tr -d ' \n')" == 7f454c46 ]] || die "vmlinux is not ELF"
mv "$OUT/vmlinux.tmp" "$OUT/vmlinux"
log "kernel $KVER"

# --- agent and overlay ----------------------------------------------------------------------
log "building the static guest agent"
(cd "$REPO" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false \
  -ldflags '-s -w -buildid=' -o "$OUT/workbench-guest" ./guest/cmd/workbench-guest)
PROTOCOL_DIGEST="$("$OUT/workbench-guest" --print-protocol-digest)"

OV="$WORK/overlay"
rm -rf "$OV"
mkdir -p "$OV/usr/local/sbin" "$OV/etc/systemd/system/multi-user.target.wants" "$OV/etc/modules-load.d" \
  "$OV/workspace" "$OV/var/lib/workbench/offline-debs" "$OV/etc/apt/sources.list.d" "$OV/etc/workbench"
install -m 0755 "$OUT/workbench-guest" "$OV/usr/local/sbin/workbench-guest"
# The agent's unit (the arm64 EFI variant adds the binding-disk drop-in: agent-unit.sh).
bash "$HERE/agent-unit.sh" amd64 "$OV"
install -m 0644 "$HERE/modules-load.conf" "$OV/etc/modules-load.d/workbench.conf"
# No console logins, no network management, no first-boot prompts.
for u in serial-getty@.service getty@.service console-getty.service systemd-networkd.service \
  systemd-networkd.socket systemd-resolved.service systemd-timesyncd.service apt-daily.timer \
  apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
  ln -s /dev/null "$OV/etc/systemd/system/$u"
done
printf '/dev/vda / ext4 rw,noatime,errors=remount-ro,x-systemd.growfs 0 1\n' >"$OV/etc/fstab"
printf 'workbench-guest\n' >"$OV/etc/hostname"
# The offline package directory: pinned .debs and an index, served by a file: source.
ODIR="$WORK/offline"
mkdir -p "$ODIR"
for p in "${OFFLINE_DEBS[@]}"; do
  ver="$(grep -E "^# offline $p=" "$LOCK" | sed 's/.*=//' || true)"
  if ! ls "$ODIR/${p}_"*.deb >/dev/null 2>&1; then
    (cd "$ODIR" && apt-get download -qq "$p${ver:+=$ver}" 2>&1 | grep -v 'unsandboxed as root' || true)
  fi
  deb="$(ls "$ODIR/${p}_"*.deb | head -1)"
  [[ -f "$deb" ]] || die "apt-get download $p failed"
  pv="$(dpkg-deb -f "$deb" Version)"
  grep -qE "^# offline $p=" "$LOCK" || echo "# offline $p=$pv" >>"$LOCK"
  cp "$deb" "$OV/var/lib/workbench/offline-debs/"
done
(cd "$OV/var/lib/workbench/offline-debs" && dpkg-scanpackages -m . 2>/dev/null >Packages)
printf 'deb [trusted=yes] file:/var/lib/workbench/offline-debs ./\n' >"$OV/etc/apt/sources.list.d/workbench-offline.list"
find "$OV" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# --- rootfs.raw: base + overlay, mke2fs -d (no mounts) --------------------------------------
log "rootfs.raw ($ROOTFS_SIZE, ext4, mke2fs -d)"
# Extracted as root with numeric owners kept (no mounts; mke2fs -d copies the tree).
RT="$WORK/rootfs"
rm -rf "$RT"
mkdir -p "$RT"
tar -C "$RT" --numeric-owner --same-owner -xpf "$BASE"
rm -f "$RT/etc/workbench-packages.lock"
cp -a --no-preserve=ownership "$OV/." "$RT/"
chown -R 0:0 "$RT/usr/local/sbin" "$RT/etc/systemd/system" "$RT/workspace" "$RT/var/lib/workbench" "$RT/etc/fstab" "$RT/etc/hostname"
rm -f "$OUT/rootfs.raw.tmp"
E2FSPROGS_FAKE_TIME="$SOURCE_DATE_EPOCH" mke2fs -q -F -t ext4 -L workbench-root -U "$FS_UUID" \
  -E "hash_seed=$FS_HASH_SEED,root_owner=0:0,lazy_itable_init=0,lazy_journal_init=0" \
  -O ^metadata_csum_seed -d "$RT" "$OUT/rootfs.raw.tmp" "$ROOTFS_SIZE" || die "mke2fs failed"
rm -rf "$RT"
mv "$OUT/rootfs.raw.tmp" "$OUT/rootfs.raw"
tar -xOf "$BASE" ./var/lib/dpkg/status >"$WORK/dpkg-status"

# --- SBOM, provenance, digests, manifest ----------------------------------------------------
R_SHA="$(sha "$OUT/rootfs.raw")"
K_SHA="$(sha "$OUT/vmlinux")"
I_SHA="$(sha "$OUT/initrd.img")"
A_SHA="$(sha "$OUT/workbench-guest")"
(cd "$REPO" && go run ./hack/guest-image/sbom -status "$WORK/dpkg-status" -name workbench-guest-system \
  -version "sha256:$R_SHA" -epoch "$SOURCE_DATE_EPOCH" -o "$OUT/sbom.cdx.json")
S_SHA="$(sha "$OUT/sbom.cdx.json")"
REF="workbench-guest-system@$(cd "$REPO" && git rev-parse HEAD 2>/dev/null || echo unknown)"
{
  printf '{\n  "builder": "hack/guest-image/build-system.sh",\n'
  printf '  "ref": "%s",\n' "$REF"
  printf '  "script": "sha256:%s",\n  "lock": "sha256:%s",\n' "$(sha "${BASH_SOURCE[0]}")" "$(sha "$LOCK")"
  printf '  "sourceDateEpoch": %s,\n  "suite": "%s",\n' "$SOURCE_DATE_EPOCH" "$SUITE"
  printf '  "base": "sha256:%s",\n  "rootfs": "sha256:%s",\n  "agent": "sha256:%s",\n' "$(sha "$BASE")" "$R_SHA" "$A_SHA"
  printf '  "kernel": "sha256:%s",\n  "initrd": "sha256:%s",\n  "sbom": "sha256:%s"\n}\n' "$K_SHA" "$I_SHA" "$S_SHA"
} >"$OUT/provenance.json"
P_SHA="$(sha "$OUT/provenance.json")"
R_SIZE="$(stat -c %s "$OUT/rootfs.raw")"
{
  echo "kernel sha256:$K_SHA guest-system/vmlinux $(stat -c %s "$OUT/vmlinux") $KVER"
  echo "initrd sha256:$I_SHA guest-system/initrd.img $(stat -c %s "$OUT/initrd.img")"
  echo "disk sha256:$R_SHA guest-system/rootfs.raw $R_SIZE"
  echo "agent sha256:$A_SHA"
  echo "protocol $PROTOCOL_DIGEST"
  echo "sbom sha256:$S_SHA"
  echo "provenance sha256:$P_SHA $REF"
  echo "cmdline $KERNEL_CMDLINE"
} >"$OUT/digests.txt"
cat "$OUT/digests.txt"

cat >"$MANIFEST" <<EOM
# The full-system Workbench guest image for qemu-microvm.v1, as built by
# \`make guest-image\` (hack/guest-image/build-system.sh): a Debian $SUITE userspace from
# mmdebstrap (pinned by hack/guest-image/system/packages.lock) with systemd as PID 1 and the
# guest agent as a systemd unit on vsock, in a raw ext4 disk cloned per environment; the
# image's own kernel ($KVER) and initramfs. Paths are relative to the node agent's image
# directory.
apiVersion: workbench.sensorium.dev/v1alpha1
kind: ImageManifest
metadata:
  name: workbench-guest-system-x86-64
spec:
  digests:
    userspace: sha256:$R_SHA
    sbom: sha256:$S_SHA
    provenance: sha256:$P_SHA
    provenanceRef: $REF
    agent: sha256:$A_SHA
    protocol: $PROTOCOL_DIGEST
  variants:
    - name: full-system
      backendID: qemu-microvm.v1
      architecture: x86_64
      bootMode: direct-kernel
      kernel:
        digest: sha256:$K_SHA
        path: guest-system/vmlinux
        size: $(stat -c %s "$OUT/vmlinux")
      initrd:
        digest: sha256:$I_SHA
        path: guest-system/initrd.img
        size: $(stat -c %s "$OUT/initrd.img")
      disk:
        digest: sha256:$R_SHA
        path: guest-system/rootfs.raw
        size: $R_SIZE
      kernelCommandLine: $KERNEL_CMDLINE
EOM
if [[ "$(realpath -m "$MANIFEST")" != "$(realpath -m "$OUT/imagemanifest.yaml")" ]]; then
  cp "$MANIFEST" "$OUT/imagemanifest.yaml"
  log "wrote $MANIFEST and $OUT/imagemanifest.yaml"
else
  log "wrote $MANIFEST"
fi

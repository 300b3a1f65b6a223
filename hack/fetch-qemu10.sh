#!/usr/bin/env bash
# Fetches QEMU 10.0 (Debian bookworm-backports: qemu-system-x86, -common, -data; pinned
# version and sha256) and unpacks it beside the machine's own QEMU, never installing it:
#
#   <out>/usr/...                  the unpacked packages (dpkg-deb -x)
#   <out>/qemu-system-x86_64       a wrapper running that QEMU with its own firmware (-L)
#
# <out> is $QEMU10_OUT, default .local/qemu10 in this checkout. The snapshot experiment
# (docs/vm-pause-snapshot.md) uses it: WORKBENCH_BENCH_QEMU=<out>/qemu-system-x86_64.
#
# Names no package host and leaves the system's apt configuration alone: a separate apt
# configuration (own sources dir, lists and cache under <out>/apt, removed afterwards)
# reuses the mirror URL of the machine's own /etc/apt/sources.list.d/debian.sources. The
# binaries' shared libraries all resolve on bookworm (checked with ldd below). Needs root
# only if apt's download sandbox user cannot write <out>.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${QEMU10_OUT:-$REPO/.local/qemu10}"
VERSION='1:10.0.2+ds-2+deb13u1~bpo12+1'
FILEVER='10.0.2+ds-2+deb13u1~bpo12+1'
declare -A SHA256=(
  [qemu-system-x86]=4a6b1856c8b0d7df4ff8e70249e12c473ccf8d516aadb4ae14d3d938faed0c65
  [qemu-system-common]=23a4672a138832d7173855e981aa8282c73ef5e04e080fa7ada9f82c6b34f507
  [qemu-system-data]=2d831088187087013b3fcbd19bdfb955b182a2d5a08f6dafa0ad1c6d2007fb4e
)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'fetch-qemu10: %s\n' "$*" >&2; exit 1; }
# shellcheck source=hack/lib/apt-side.sh
source "$REPO/hack/lib/apt-side.sh"

[[ "$(uname -m)" == x86_64 ]] || die "x86_64 only (this is $(uname -m))"
mkdir -p "$OUT/debs"

deb_of() { # the .deb apt-get download writes for package $1
  local arch=amd64
  [[ "$1" == qemu-system-data ]] && arch=all
  printf '%s/debs/%s_1%%3a%s_%s.deb' "$OUT" "$1" "$FILEVER" "$arch"
}
sha_ok() { [[ -f "$1" ]] && [[ "$(sha256sum "$1" | cut -d' ' -f1)" == "$2" ]]; }

need=()
for p in "${!SHA256[@]}"; do
  sha_ok "$(deb_of "$p")" "${SHA256[$p]}" || need+=("$p=$VERSION")
done
if ((${#need[@]})); then
  log "fetching ${need[*]} (bookworm-backports, separate apt configuration)"
  apt_side_download bookworm-backports "$OUT/apt" "$OUT/debs" "${need[@]}"
  for p in "${!SHA256[@]}"; do
    sha_ok "$(deb_of "$p")" "${SHA256[$p]}" || die "$(deb_of "$p") missing or sha256 mismatch (want ${SHA256[$p]})"
  done
fi

rm -rf "$OUT/usr"
for p in "${!SHA256[@]}"; do dpkg-deb -x "$(deb_of "$p")" "$OUT"; done
# qemu-system-data ships qboot.rom; microvm asks for bios-microvm.bin.
ln -sf qboot.rom "$OUT/usr/share/qemu/bios-microvm.bin"
missing="$(ldd "$OUT/usr/bin/qemu-system-x86_64" | grep 'not found' || true)"
[[ -z "$missing" ]] || die "shared libraries missing on this host: $missing"
cat >"$OUT/qemu-system-x86_64" <<'EOF'
#!/bin/sh
# QEMU 10 from bookworm-backports, unpacked by hack/fetch-qemu10.sh; its own firmware first.
d=$(dirname "$(readlink -f "$0")")
exec "$d/usr/bin/qemu-system-x86_64" -L "$d/usr/share/qemu" "$@"
EOF
chmod 0755 "$OUT/qemu-system-x86_64"
"$OUT/qemu-system-x86_64" --version | head -1 >&2
echo "$OUT/qemu-system-x86_64"

#!/usr/bin/env bash
# Installs the guest agent's systemd unit into an image overlay for one architecture:
#
#   agent-unit.sh amd64|arm64 OVERLAY_DIR
#
# amd64 (qemu-microvm.v1, direct kernel): the unit as is; the agent reads its binding
# from QEMU's fw_cfg (its default --binding-file).
# arm64 (vfkit-system.v1, EFI): the same unit plus the vfkit-binding.conf drop-in, which
# points --binding-file at the read-only binding disk and orders the agent after it.
# build-system.sh calls this; internal/backends/vfkitsystem's tests run it.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
arch="${1:?usage: agent-unit.sh amd64|arm64 OVERLAY_DIR}"
ov="${2:?usage: agent-unit.sh amd64|arm64 OVERLAY_DIR}"
case "$arch" in
  amd64 | arm64) ;;
  *) echo "agent-unit.sh: unknown architecture $arch (amd64 or arm64)" >&2; exit 2 ;;
esac
sys="$ov/etc/systemd/system"
mkdir -p "$sys/multi-user.target.wants"
install -m 0644 "$HERE/workbench-guest.service" "$sys/workbench-guest.service"
ln -sfn ../workbench-guest.service "$sys/multi-user.target.wants/workbench-guest.service"
if [[ "$arch" == arm64 ]]; then
  mkdir -p "$sys/workbench-guest.service.d"
  install -m 0644 "$HERE/vfkit-binding.conf" "$sys/workbench-guest.service.d/vfkit-binding.conf"
fi

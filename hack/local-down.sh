#!/usr/bin/env bash
# Stops what hack/local-up.sh started, by the pids it recorded in .local/pids/: each
# process gets SIGTERM, then SIGKILL if it has not exited within LOCAL_DOWN_TIMEOUT
# seconds (default 15). A pid is signalled only if the process still has the start time
# recorded with it, so a reused pid is never hit.
#
#   hack/local-down.sh           stop; keep .local/ (etcd data, PKI, logs) for the next run
#   hack/local-down.sh --purge   stop and delete .local/
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${LOCAL_STATE_DIR:-${ROOT}/.local}"
PIDS="${STATE}/pids"
TIMEOUT="${LOCAL_DOWN_TIMEOUT:-15}"
PURGE=0
case "${1:-}" in
  --purge) PURGE=1 ;;
  "") ;;
  *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac

log() { printf '[local-down] %s\n' "$*" >&2; }

# same_process PID STARTTIME: the pid is alive and is still the process we started.
same_process() {
  [[ -r "/proc/$1/stat" ]] || return 1
  [[ "$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20)" == "$2" ]]
}

stop_one() {
  local file="$1" pid starttime name
  read -r pid starttime name <"${file}" || true
  if [[ -z "${pid:-}" || -z "${starttime:-}" ]]; then
    log "Ignoring malformed ${file}"
    rm -f "${file}"
    return
  fi
  name="${name:-$(basename "${file}" .pid)}"
  if ! same_process "${pid}" "${starttime}"; then
    log "${name} (pid ${pid}) is not running"
    rm -f "${file}"
    return
  fi
  log "Stopping ${name} (pid ${pid})"
  kill -TERM "${pid}" 2>/dev/null || true
  local deadline=$((SECONDS + TIMEOUT))
  while same_process "${pid}" "${starttime}" && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if same_process "${pid}" "${starttime}"; then
    log "${name} (pid ${pid}) did not exit within ${TIMEOUT}s; sending SIGKILL"
    kill -KILL "${pid}" 2>/dev/null || true
    deadline=$((SECONDS + 5))
    while same_process "${pid}" "${starttime}" && ((SECONDS < deadline)); do
      sleep 0.2
    done
    if same_process "${pid}" "${starttime}"; then
      log "ERROR: ${name} (pid ${pid}) survived SIGKILL"
      return 1
    fi
  fi
  rm -f "${file}"
}

# stop_node_leftovers kills what the node agent started that outlives it by design (VMs: a
# restarted agent adopts them) but must not outlive the local run: every process whose
# command line, working directory or an open descriptor lies under the agent's state dir
# (a confined QEMU holds its VM directory as a descriptor). The next `make run-local` finds
# their records and quarantines them, as after a node reboot.
stop_node_leftovers() {
  local dir="${STATE}/node-agent/" p pid hit left=()
  [[ -d "${dir}" ]] || return 0
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [[ "${pid}" == "$$" ]] && continue
    hit=0
    if { tr '\0' ' ' <"${p}/cmdline"; } 2>/dev/null | grep -qF "${dir}"; then hit=1
    elif [[ "$(readlink "${p}/cwd" 2>/dev/null)/" == "${dir}"* ]]; then hit=1
    else
      local fd
      for fd in "${p}"/fd/*; do
        if [[ "$(readlink "${fd}" 2>/dev/null)" == "${dir}"* ]]; then hit=1; break; fi
      done
    fi
    [[ "${hit}" == "1" ]] && left+=("${pid}")
  done
  ((${#left[@]} == 0)) && return 0
  log "Stopping ${#left[@]} process(es) the node agent left under ${dir} (VMs): ${left[*]}"
  kill -KILL "${left[@]}" 2>/dev/null || true
}

# release_node_disks unmounts the environment disks the node agent mounted under its state
# dir (fixture-copy.v1: an ext4 image on an autoclear loop device each, which detaches with
# its mount). The images stay for the next run's recovery (it mounts them again) unless
# the state is purged.
release_node_disks() {
  local dir m
  dir="$(realpath -q "${STATE}/node-agent" 2>/dev/null)" || return 0
  [[ -d "${dir}" ]] || return 0
  while read -r m; do
    umount -l "${m}" 2>/dev/null || log "WARNING: could not unmount ${m}"
  done < <(awk -v d="${dir}/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
}

status=0
if [[ -d "${PIDS}" ]]; then
  # Reverse start order: clients before the API server, the API server before etcd.
  for name in node-agent manager kube-controller-manager kube-apiserver etcd; do
    if [[ -f "${PIDS}/${name}.pid" ]]; then stop_one "${PIDS}/${name}.pid" || status=1; fi
    if [[ "${name}" == "node-agent" ]]; then stop_node_leftovers; release_node_disks; fi
  done
  for file in "${PIDS}"/*.pid; do
    if [[ -f "${file}" ]]; then stop_one "${file}" || status=1; fi
  done
else
  log "Nothing to stop (no ${PIDS})"
fi

if [[ "${PURGE}" == "1" && "${status}" == "0" ]]; then
  log "Deleting ${STATE}"
  rm -rf "${STATE}"
fi
exit "${status}"

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

status=0
if [[ -d "${PIDS}" ]]; then
  # Reverse start order: clients before the API server, the API server before etcd.
  for name in node-agent manager kube-controller-manager kube-apiserver etcd; do
    if [[ -f "${PIDS}/${name}.pid" ]]; then stop_one "${PIDS}/${name}.pid" || status=1; fi
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

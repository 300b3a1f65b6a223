#!/usr/bin/env bash
# Stops the single-node cluster of hack/run-cluster.sh and removes everything it made:
# the workloads (so the kubelet and CNI tear their sandboxes down), then every process it
# recorded (and any container or shim left in its cgroups or talking to its containerd),
# kube-proxy's and the CNI plugins' iptables chains, the mounts under the state directory
# (the kubelet's bind mount of its root dir included), the bridge, the pod network
# namespaces, the cgroups below /workbench-cluster, the kernel settings the kubelet
# changed (restored), and the state directory. Ends with a check that reports (and fails
# on) anything still left.
#
#   hack/down-cluster.sh               stop and remove everything
#   CLUSTER_KEEP_LOGS=DIR hack/down-cluster.sh   copy the logs to DIR first
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=hack/cluster-lib.sh
source "${ROOT}/hack/cluster-lib.sh"
TIMEOUT="${CLUSTER_DOWN_TIMEOUT:-60}"

if [[ ! -d "${STATE}" ]]; then
  log "Nothing to stop (no ${STATE})"
  exit 0
fi

same_process() {
  [[ -r "/proc/$1/stat" ]] && [[ "$(proc_starttime "$1" 2>/dev/null)" == "$2" ]]
}

stop_one() {
  local name="$1" file="${PIDS}/$1.pid" pid starttime
  [[ -f "${file}" ]] || return 0
  read -r pid starttime _ <"${file}" || true
  if [[ -n "${pid:-}" ]] && same_process "${pid}" "${starttime}"; then
    log "Stopping ${name} (pid ${pid})"
    kill -TERM "${pid}" 2>/dev/null || true
    local deadline=$((SECONDS + 20))
    while same_process "${pid}" "${starttime}" && ((SECONDS < deadline)); do sleep 0.2; done
    if same_process "${pid}" "${starttime}"; then
      log "${name} (pid ${pid}) did not exit within 20s; SIGKILL"
      kill -KILL "${pid}" 2>/dev/null || true
      sleep 0.5
    fi
  fi
  rm -f "${file}"
}

# --- 1. Workloads, while the control plane and the kubelet still run --------------------
if [[ -n "${CLUSTER_KEEP_LOGS:-}" ]]; then
  mkdir -p "${CLUSTER_KEEP_LOGS}" && cp -r "${LOGS}/." "${CLUSTER_KEEP_LOGS}/" 2>/dev/null || true
fi
if [[ -f "${PIDS}/kube-apiserver.pid" && -f "${PIDS}/kubelet.pid" ]] && kubectl get --raw /readyz >/dev/null 2>&1; then
  if [[ -f "${STATE}/overlay/kustomization.yaml" ]]; then
    log "Deleting Sensorium Workbench (config/default) and the samples"
    kubectl delete -f "${ROOT}/config/samples" --ignore-not-found --wait=false >/dev/null 2>&1 || true
    kubectl delete -k "${STATE}/overlay" --ignore-not-found --timeout="${TIMEOUT}s" >/dev/null 2>&1 || true
  fi
  log "Deleting every remaining pod"
  kubectl delete pods --all --all-namespaces --grace-period=5 --timeout="${TIMEOUT}s" >/dev/null 2>&1 || true
  deadline=$((SECONDS + TIMEOUT))
  while [[ -n "$(ctr -n k8s.io tasks ls -q 2>/dev/null)" ]] && ((SECONDS < deadline)); do sleep 1; done
  # The kubelet removes the sandboxes (CNI DEL) shortly after their containers.
  while [[ -n "$(ctr -n k8s.io containers ls -q 2>/dev/null)" ]] && ((SECONDS < deadline)); do sleep 1; done
fi

# --- 2. Processes ----------------------------------------------------------------------------
for name in kube-proxy kubelet kube-scheduler kube-controller-manager kube-apiserver etcd; do
  stop_one "${name}"
done
# Containers the kubelet did not get to remove: kill them through containerd.
if [[ -f "${PIDS}/containerd.pid" ]]; then
  for t in $(ctr -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -n k8s.io tasks kill -s SIGKILL "${t}" >/dev/null 2>&1 || true
    ctr -n k8s.io tasks delete -f "${t}" >/dev/null 2>&1 || true
  done
fi
stop_one containerd
for f in "${PIDS}"/*.pid; do [[ -f "${f}" ]] && stop_one "$(basename "${f}" .pid)"; done
# Shims of this containerd (they outlive it by design) and any process in the pod cgroups.
for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address ${CONTAINERD_SOCK}" || true); do
  log "Killing containerd shim ${pid}"
  kill -KILL "${pid}" 2>/dev/null || true
done
for h in $(cgroup_hierarchies); do
  [[ -d "${h}${CGROUP_ROOT}" ]] || continue
  while read -r pid; do
    [[ -n "${pid}" ]] && kill -KILL "${pid}" 2>/dev/null || true
  done < <(find "${h}${CGROUP_ROOT}" -name cgroup.procs -exec cat {} + 2>/dev/null)
done
sleep 0.5

# --- 3. iptables -------------------------------------------------------------------------------
if [[ -x "${K8S_BIN}/kube-proxy" ]] && command -v iptables >/dev/null; then
  "${K8S_BIN}/kube-proxy" --cleanup >/dev/null 2>&1 || true
fi
# The bridge plugin's masquerade rules carry a comment naming the network; what remains
# of the KUBE-* (kube-proxy, kubelet canaries) and CNI-* (bridge, portmap) chains is this
# cluster's: no other kubelet or CNI runs on these machines.
for ipt in iptables ip6tables; do
  command -v "${ipt}" >/dev/null || continue
  for table in nat filter mangle; do
    "${ipt}" -t "${table}" -S 2>/dev/null | grep -F "name: \"${CNI_NETWORK}\"" | grep '^-A' | sed 's/^-A/-D/' |
      while read -r rule; do eval "${ipt} -t ${table} ${rule}" 2>/dev/null || true; done
    chains="$("${ipt}" -t "${table}" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^(KUBE|CNI)-/ {print $2}')"
    [[ -z "${chains}" ]] && continue
    # Rules jumping to them from any chain, then the chains themselves.
    "${ipt}" -t "${table}" -S 2>/dev/null | grep -E '^-A .* -j (KUBE|CNI)-' | sed 's/^-A/-D/' |
      while read -r rule; do eval "${ipt} -t ${table} ${rule}" 2>/dev/null || true; done
    for chain in ${chains}; do "${ipt}" -t "${table}" -F "${chain}" 2>/dev/null || true; done
    for chain in ${chains}; do "${ipt}" -t "${table}" -X "${chain}" 2>/dev/null || true; done
  done
done

# --- 4. Mounts, network namespaces, interfaces -----------------------------------------------------
for i in 1 2 3; do
  mounts="$(awk -v s="${STATE}/" 'index($5, s) == 1 || $5 == substr(s, 1, length(s) - 1) {print $5}' /proc/self/mountinfo | sort -r)"
  [[ -z "${mounts}" ]] && break
  while read -r m; do
    m="$(printf '%b' "${m}")" # mountinfo escapes spaces as \040
    umount "${m}" 2>/dev/null || umount -l "${m}" 2>/dev/null || true
  done <<<"${mounts}"
done
if [[ -f "${STATE}/netns.before" ]]; then
  for ns in /var/run/netns/cni-*; do
    [[ -e "${ns}" ]] || continue
    grep -qxF "${ns}" "${STATE}/netns.before" && continue
    umount "${ns}" 2>/dev/null || true
    rm -f "${ns}"
  done
fi
if ip link show "${BRIDGE}" >/dev/null 2>&1; then
  for veth in $(ip -o link show master "${BRIDGE}" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "${veth}" 2>/dev/null || true
  done
  ip link del "${BRIDGE}" 2>/dev/null || true
fi

# --- 5. cgroups and kernel settings ----------------------------------------------------------------
for h in $(cgroup_hierarchies); do
  [[ -d "${h}${CGROUP_ROOT}" ]] || continue
  find "${h}${CGROUP_ROOT}" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done
if [[ -f "${STATE}/sysctl.before" ]]; then
  while IFS='=' read -r key value; do
    [[ -n "${key}" && "$(sysctl -n "${key}" 2>/dev/null)" != "${value}" ]] && sysctl -qw "${key}=${value}" >/dev/null 2>&1
  done <"${STATE}/sysctl.before"
fi
# Directories that did not exist before run-cluster: the CNI cache, the shim sockets and
# the kubelet's log symlinks are this cluster's; the netns directory only if empty.
if [[ -f "${STATE}/paths.created" ]]; then
  while read -r p; do
    case "${p}" in
      /var/run/netns) rmdir "${p}" 2>/dev/null || true ;;
      /var/lib/cni | /run/containerd | /var/log/containers) rm -rf "${p}" ;;
    esac
  done <"${STATE}/paths.created"
fi

# --- 6. Check -------------------------------------------------------------------------------------
left=()
# Killed processes may take a moment to be reaped.
deadline=$((SECONDS + 10))
while [[ -n "$(pgrep -f "${STATE}/" || true)" ]] && ((SECONDS < deadline)); do sleep 0.5; done
[[ -n "$(pgrep -f "${STATE}/" || true)" ]] && left+=("processes: $(pgrep -af "${STATE}/" | cut -c1-120 | tr '\n' ';')")
[[ -n "$(awk -v s="${STATE}/" 'index($5, s) == 1' /proc/self/mountinfo)" ]] && left+=("mounts under ${STATE}")
ip link show "${BRIDGE}" >/dev/null 2>&1 && left+=("interface ${BRIDGE}")
for h in $(cgroup_hierarchies); do [[ -d "${h}${CGROUP_ROOT}" ]] && left+=("cgroup ${h}${CGROUP_ROOT}"); done
for ipt in iptables ip6tables; do
  command -v "${ipt}-save" >/dev/null || continue
  n="$("${ipt}-save" 2>/dev/null | grep -cE '^:(KUBE-|CNI-)' || true)"
  [[ "${n}" != "0" ]] && left+=("${n} ${ipt} chains KUBE-*/CNI-*")
done
if ((${#left[@]})); then
  log "ERROR: left behind: ${left[*]}"
  log "State kept in ${STATE} for inspection"
  exit 1
fi
rm -rf "${STATE}"
log "Stopped; nothing left behind"

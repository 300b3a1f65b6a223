# Shared by hack/run-cluster.sh and hack/down-cluster.sh (sourced, not run): the layout of
# the single-node cluster's state directory, its addresses and ports, and the writers of
# its configuration files.
# shellcheck shell=bash

ROOT="${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
STATE="${CLUSTER_STATE_DIR:-${ROOT}/.cluster}"
PKI="${STATE}/pki"
LOGS="${STATE}/logs"
PIDS="${STATE}/pids"
IMAGES="${STATE}/images"
KUBECONFIG_FILE="${STATE}/kubeconfig"
NODE_NAME="${CLUSTER_NODE_NAME:-workbench-node}"
K8S_BIN="$("${ROOT}/hack/build-control-plane.sh" path)"
CNI_BIN=/usr/lib/cni

ETCD_PORT="${CLUSTER_ETCD_PORT:-23792}"
ETCD_PEER_PORT=$((ETCD_PORT + 10))
APISERVER_PORT="${CLUSTER_APISERVER_PORT:-6445}"
KCM_PORT=10267
SCHEDULER_PORT=10269
KUBELET_PORT=10450
KUBELET_HEALTHZ_PORT=10448
PROXY_HEALTHZ_PORT=10456
PROXY_METRICS_PORT=10449
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/24
SERVICE_IP=10.96.0.1
BRIDGE=wbc0
CNI_NETWORK=workbench-cluster
# Every pod cgroup lives below this path in each hierarchy (the kubelet's cgroupRoot).
CGROUP_ROOT=/workbench-cluster

# containerd 2.1 from Debian unstable (the kubelet 1.36+ needs containerd 2.x; bookworm has
# 1.6). Pinned; CONTAINERD_DEB_VERSION= (empty) takes the suite's current version instead.
CONTAINERD_DEB_VERSION="${CONTAINERD_DEB_VERSION-2.1.9+ds1-5}"
CONTAINERD_DEB_SHA256="${CONTAINERD_DEB_SHA256-2dda86ce7033fd612fc50e136679d8174ccad680eb29cd4611e0d2a1b84cf591}"
CONTAINERD_DIR="${ROOT}/bin/node/containerd"
CONTAINERD_BIN="${CONTAINERD_DIR}/usr/bin"
CONTAINERD_SOCK="${STATE}/containerd/containerd.sock"

log() { printf '[cluster %s] %s\n' "$(date +%T)" "$*" >&2; }

# The node's address: the source address of the default route.
NODE_IP="${CLUSTER_NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')}"

kubectl() { "${K8S_BIN}/kubectl" --kubeconfig "${KUBECONFIG_FILE}" "$@"; }
ctr() { "${CONTAINERD_BIN}/ctr" --address "${CONTAINERD_SOCK}" "$@"; }

proc_starttime() { sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f20; }

# issue NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]: key + certificate from the CA.
issue() {
  local name="$1" subject="$2" eku="$3" san="${4:-}"
  local ext="basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=${eku}"
  [[ -n "${san}" ]] && ext="${ext}\nsubjectAltName=${san}"
  openssl req -new -newkey rsa:2048 -nodes -keyout "${PKI}/${name}.key" -subj "${subject}" \
    -out "${PKI}/${name}.csr" 2>/dev/null
  printf '%b\n' "${ext}" >"${PKI}/${name}.ext"
  openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" \
    -CAcreateserial -days 365 -sha256 -extfile "${PKI}/${name}.ext" -out "${PKI}/${name}.crt" 2>/dev/null
  rm -f "${PKI}/${name}.csr" "${PKI}/${name}.ext"
}

# write_kubeconfig CERT FILE: a kubeconfig for the API server with PKI/CERT.{crt,key}.
write_kubeconfig() {
  local who="$1" file="$2" k=("${K8S_BIN}/kubectl" config --kubeconfig "$2")
  rm -f "${file}"
  "${k[@]}" set-cluster workbench-cluster --server="https://${NODE_IP}:${APISERVER_PORT}" \
    --certificate-authority="${PKI}/ca.crt" --embed-certs=true >/dev/null
  "${k[@]}" set-credentials "${who}" --client-certificate="${PKI}/${who}.crt" \
    --client-key="${PKI}/${who}.key" --embed-certs=true >/dev/null
  "${k[@]}" set-context default --cluster=workbench-cluster --user="${who}" >/dev/null
  "${k[@]}" use-context default >/dev/null
  chmod 600 "${file}"
}

# ensure_containerd: containerd's binaries unpacked from the pinned .deb of Debian unstable,
# fetched with a separate apt configuration (own sources, lists and cache) that reuses the
# mirror of the machine's own debian.sources. Nothing is installed into the system.
ensure_containerd() {
  if [[ -x "${CONTAINERD_BIN}/containerd" && -x "${CONTAINERD_BIN}/containerd-shim-runc-v2" && -x "${CONTAINERD_BIN}/ctr" ]]; then
    return
  fi
  local mirror work a deb
  mirror="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  [[ -n "${mirror}" ]] || { log "no Debian mirror in /etc/apt/sources.list.d/debian.sources"; return 1; }
  work="$(mktemp -d)"
  a="${work}/apt"
  mkdir -p "${a}/sources.list.d" "${a}/preferences.d" "${a}/lists/partial" "${a}/cache/archives/partial"
  : >"${a}/status"
  printf 'Types: deb\nURIs: %s\nSuites: unstable\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "${mirror}" >"${a}/sources.list.d/unstable.sources"
  local opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=${a}/sources.list.d"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=${a}/preferences.d"
    -o "Dir::State::Lists=${a}/lists" -o "Dir::Cache=${a}/cache" -o "Dir::State::status=${a}/status")
  log "Fetching containerd ${CONTAINERD_DEB_VERSION:-(current)} from Debian unstable (separate apt configuration)"
  apt-get "${opts[@]}" update -qq
  local want=containerd
  [[ -n "${CONTAINERD_DEB_VERSION}" ]] && want="containerd=${CONTAINERD_DEB_VERSION}"
  (cd "${work}" && apt-get "${opts[@]}" download -qq "${want}" 2>&1 | grep -v 'unsandboxed as root' || true)
  deb="$(ls "${work}"/containerd_*.deb 2>/dev/null | head -n1 || true)"
  if [[ -z "${deb}" ]]; then
    log "apt-get download ${want} failed (a newer upload replaced the pinned version? set CONTAINERD_DEB_VERSION= to take the current one)"
    rm -rf "${work}"
    return 1
  fi
  if [[ -n "${CONTAINERD_DEB_VERSION}" && "$(sha256sum "${deb}" | cut -d' ' -f1)" != "${CONTAINERD_DEB_SHA256}" ]]; then
    log "sha256 of ${deb##*/} differs from the pinned ${CONTAINERD_DEB_SHA256}"
    rm -rf "${work}"
    return 1
  fi
  rm -rf "${CONTAINERD_DIR}"
  mkdir -p "${CONTAINERD_DIR}"
  dpkg-deb -x "${deb}" "${CONTAINERD_DIR}"
  rm -rf "${work}"
  "${CONTAINERD_BIN}/containerd" --version >&2
}

write_containerd_config() {
  mkdir -p "${STATE}/containerd/root" "${STATE}/containerd/state" "${STATE}/containerd/runc" "${STATE}/containerd/opt"
  cat >"${STATE}/containerd/config.toml" <<EOF
version = 3
root = '${STATE}/containerd/root'
state = '${STATE}/containerd/state'
# No NRI socket in /var/run and no tracing: nothing outside the state directory.
disabled_plugins = ['io.containerd.nri.v1.nri', 'io.containerd.tracing.processor.v1.otlp', 'io.containerd.internal.v1.tracing']

[grpc]
  address = '${CONTAINERD_SOCK}'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    # No registry is reachable: the sandbox image is imported from the tarball of hack/images.
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'workbench-pause:latest'
  [plugins.'io.containerd.cri.v1.runtime']
    # This machine refuses an oom_score_adj below the current one (the kubelet asks -998
    # for sandboxes): keep every container at or above containerd's own.
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = '${STATE}/containerd/runc'
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['${CNI_BIN}']
      conf_dir = '${STATE}/cni/net.d'
  [plugins.'io.containerd.internal.v1.opt']
    path = '${STATE}/containerd/opt'
EOF
}

write_cni_config() {
  cat >"${STATE}/cni/net.d/10-workbench.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "${CNI_NETWORK}",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${BRIDGE}",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${POD_CIDR}"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "${STATE}/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
}

# cgroup_hierarchies: the mount points of every cgroup hierarchy (v1 controllers and v2).
cgroup_hierarchies() {
  awk '$9 == "cgroup" || $9 == "cgroup2" {print $5}' /proc/self/mountinfo | sort -u
}

write_kubelet_config() {
  cat >"${STATE}/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# These machines are cgroup v1 hybrid: since 1.35 the kubelet refuses v1 unless told.
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: ${CGROUP_ROOT}
cgroupsPerQOS: true
enforceNodeAllocatable: [pods]
containerRuntimeEndpoint: unix://${CONTAINERD_SOCK}
imageServiceEndpoint: unix://${CONTAINERD_SOCK}
address: ${NODE_IP}
port: ${KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: ${KUBELET_HEALTHZ_PORT}
tlsCertFile: ${PKI}/kubelet.crt
tlsPrivateKeyFile: ${PKI}/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: ${PKI}/ca.crt}
authorization:
  mode: Webhook
podCIDR: ${POD_CIDR}
podLogsDir: ${STATE}/pod-logs
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
failSwapOn: false
registerNode: true
serializeImagePulls: false
# Imported images are never pulled again: keep image GC from removing them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 2%
  imagefs.available: 2%
EOF
}

write_kube_proxy_config() {
  cat >"${STATE}/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: ${STATE}/kube-proxy.kubeconfig
hostnameOverride: ${NODE_NAME}
mode: iptables
clusterCIDR: ${POD_CIDR}
healthzBindAddress: 127.0.0.1:${PROXY_HEALTHZ_PORT}
metricsBindAddress: 127.0.0.1:${PROXY_METRICS_PORT}
nodePortAddresses: [${NODE_IP}/32]
# Leave the host's conntrack sysctls alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
}

# vms_setup decides whether the DaemonSet pod offers qemu-microvm.v1 (CLUSTER_VMS): the
# node's QEMU comes in through the pod's read-only /usr mount, the guest image through a
# read-only hostPath of bin/guest/. Sets VMS_ON and GUEST_DIR, or says why VMs are off.
vms_setup() {
  VMS_ON=0
  GUEST_DIR="$(realpath "${ROOT}/bin/guest" 2>/dev/null || true)"
  local why="" f
  if [[ "${CLUSTER_VMS:-auto}" == "0" ]]; then
    why="CLUSTER_VMS=0"
  elif [[ ! -x /usr/bin/qemu-system-x86_64 ]]; then
    why="/usr/bin/qemu-system-x86_64 is not installed on the node (make guest-image installs it)"
  else
    for f in vmlinux initramfs.cpio vhost-device-vsock imagemanifest.yaml; do
      [[ -n "${GUEST_DIR}" && -f "${GUEST_DIR}/${f}" ]] || why="bin/guest/ holds no guest image (make guest-image builds it)"
    done
  fi
  if [[ -n "${why}" ]]; then
    log "VMs off in the cluster: ${why}"
    return 0
  fi
  VMS_ON=1
}

# write_overlay: config/default with the node agent's host paths inside the state directory
# (so down-cluster can remove them and nothing collides with make run-local), and (VMS_ON=1)
# qemu-microvm.v1 with the guest image mounted read-only.
write_overlay() {
  mkdir -p "${STATE}/overlay"
  # kustomize takes only relative paths to other kustomizations.
  local base
  base="$(realpath --relative-to="${STATE}/overlay" "${ROOT}/config/default")"
  cat >"${STATE}/overlay/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- ${base}
patches:
- path: node-agent-host-paths.yaml
- path: node-agent-config.yaml
EOF
  local qemu="" mounts="" vols=""
  if [[ "${VMS_ON:-0}" == "1" ]]; then
    qemu="    qemu:
      enabled: true
      imageDir: /var/lib/workbench/images
      accel: ${CLUSTER_VM_ACCEL:-auto}"
    # Each VM's cgroup nests under the agent container's: its memory (guest + 512 MiB)
    # counts against the pod's limit, which must hold qemu.maxVMs (4) of them.
    mounts="      containers:
      - name: node-agent
        resources:
          limits: {memory: 6Gi}
        volumeMounts:
        - {name: guest-image, mountPath: /var/lib/workbench/images/guest, readOnly: true}"
    vols="      - name: guest-image
        hostPath: {path: ${GUEST_DIR}, type: Directory}"
  fi
  cat >"${STATE}/overlay/node-agent-config.yaml" <<EOF
apiVersion: v1
kind: ConfigMap
metadata:
  name: workbench-node-agent-config
  namespace: workbench-system
data:
  node-agent.yaml: |
    stateDir: /var/lib/workbench-agent
    admittedRoots:
      workspaces: /var/lib/workbench/workspaces
    dataPlaneAddress: 0.0.0.0:10350
    heartbeatSeconds: 30
    dataPlaneForwardingCAFile: /var/run/workbench/apiserver-node-client/ca.crt
    dataPlaneForwardingNames: [workbench-apiserver]
${qemu}
EOF
  cat >"${STATE}/overlay/node-agent-host-paths.yaml" <<EOF
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: workbench-node-agent
  namespace: workbench-system
spec:
  template:
    spec:
      volumes:
      - name: state
        hostPath: {path: ${STATE}/host/node-agent, type: DirectoryOrCreate}
      - name: workspaces
        hostPath: {path: ${STATE}/host/workspaces, type: DirectoryOrCreate}
${vols}
${mounts}
EOF
}

# seed_workspace: the samples' Environment works on a small git repository.
seed_workspace() {
  local demo="${STATE}/host/workspaces/demo"
  mkdir -p "${demo}"
  [[ -e "${demo}/README.md" ]] && return
  printf '# demo\n\nA workspace of the single-node cluster.\n' >"${demo}/README.md"
  printf 'Notes.\n' >"${demo}/NOTES.md"
  git -C "${demo}" init -q && git -C "${demo}" add -A &&
    git -C "${demo}" -c user.name=workbench -c user.email=workbench@localhost commit -qm demo
}

#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster on this machine and installs Sensorium
# Workbench on it the way a user would (`kubectl apply -k config/default`):
#
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#     v1.37.2, built from the Go module proxy (hack/build-control-plane.sh node; cached)
#   containerd 2.1 (Debian unstable, fetched through a separate apt configuration that
#     reuses the mirror of the machine's own sources; unpacked under bin/node/, never
#     installed), runc and the CNI plugins (Debian bookworm packages)
#   the images built without Docker (hack/images: controller, node-agent, workbench-pause),
#     imported with `ctr -n k8s.io images import`
#   config/default applied through an overlay that moves the node agent's host paths into
#     the state directory; waits for the manager Deployment and the node-agent DaemonSet
#     to be Ready and the WorkbenchNode to report Ready; then applies config/samples.
#
# The kubelet uses the cgroupfs driver with failCgroupV1: false (these machines are cgroup
# v1 hybrid) and puts every pod cgroup under /workbench-cluster. Pods get addresses from a
# bridge CNI network (10.244.0.0/24 on bridge wbc0); Services (10.96.0.0/24) work through
# kube-proxy in iptables mode.
#
# Everything lives under .cluster/ (git-ignored): pki/, logs/, pids/, kubeconfig, the
# kubelet and containerd roots. hack/down-cluster.sh (make down-cluster) stops it and
# removes every process, mount, interface, iptables chain and cgroup it made.
#
# Environment (defaults in brackets):
#   CLUSTER_STATE_DIR        state directory [.cluster]
#   CLUSTER_NODE_NAME        the node's name [workbench-node]
#   CLUSTER_SKIP_WORKBENCH=1 stop after the cluster is up (no images, config, samples) [0]
#   CLUSTER_SKIP_SAMPLES=1   do not apply config/samples [0]
#   CLUSTER_VMS              qemu-microvm.v1 in the DaemonSet pod: auto (when the host has
#                            qemu-system-x86_64 and bin/guest/ holds the guest image, which
#                            reaches the pod through a read-only hostPath), 0 (off) [auto]
#   CLUSTER_VM_ACCEL         the VM accelerator: auto (KVM only where a probe VM boots), kvm,
#                            tcg [auto]
#   READY_TIMEOUT            seconds to wait for each component [300]; the manager is
#                            Ready 1-4 min after it starts: the kubelet refreshes the mounted
#                            certificate Secret about a minute after the manager writes it,
#                            and the rotator checks the files with an exponential backoff
#   CLUSTER_APISERVER_PORT [6445]  CLUSTER_ETCD_PORT [23792]
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
# shellcheck source=hack/cluster-lib.sh
source "${ROOT}/hack/cluster-lib.sh"

SKIP_WORKBENCH="${CLUSTER_SKIP_WORKBENCH:-0}"
SKIP_SAMPLES="${CLUSTER_SKIP_SAMPLES:-0}"
READY_TIMEOUT="${READY_TIMEOUT:-300}"

fail() {
  trap - ERR
  log "ERROR: $*"
  if [[ -d "${LOGS}" ]]; then
    {
      kubectl get nodes,pods -A -o wide
      kubectl -n workbench-system describe pods
      kubectl get events -A --sort-by=.lastTimestamp
    } >"${LOGS}/cluster-state.txt" 2>&1 || true
    cp -r "${STATE}/pod-logs" "${LOGS}/pod-logs" 2>/dev/null || true
  fi
  local keep="${CLUSTER_KEEP_LOGS:-${TMPDIR:-/tmp}/workbench-cluster-logs}"
  log "Logs copied to ${keep}; stopping what this run started"
  CLUSTER_KEEP_LOGS="${keep}" "${ROOT}/hack/down-cluster.sh" >&2 || true
  exit 1
}
trap 'fail "command failed at line ${LINENO}: ${BASH_COMMAND}"' ERR

[[ "$(id -u)" == "0" ]] || fail "run as root: the kubelet, containerd and the CNI plugins need it"
[[ "$(uname -m)" == "x86_64" ]] || fail "only x86-64 is supported by this script (the containerd package fetched is amd64)"

# port_in_use PORT: true if something accepts connections on 127.0.0.1:PORT.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start NAME CMD...: starts CMD in its own session, output in logs/NAME.log; records
# "pid starttime name" in pids/NAME.pid (down-cluster signals only that exact process).
start() {
  local name="$1"
  shift
  setsid "$@" </dev/null >"${LOGS}/${name}.log" 2>&1 &
  local pid=$!
  echo "${pid} $(proc_starttime "${pid}") ${name}" >"${PIDS}/${name}.pid"
  log "Started ${name} (pid ${pid}, log ${LOGS}/${name}.log)"
}

alive() { [[ -f "${PIDS}/$1.pid" ]] && kill -0 "$(cut -d' ' -f1 "${PIDS}/$1.pid")" 2>/dev/null; }

# wait_for NAME DESCRIPTION CMD...: runs CMD once a second until it succeeds, at most
# READY_TIMEOUT seconds, failing early with the log tail if the process NAME exits.
wait_for() {
  local name="$1" what="$2"
  shift 2
  local deadline=$((SECONDS + READY_TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if [[ -n "${name}" ]] && ! alive "${name}"; then
      tail -n 30 "${LOGS}/${name}.log" >&2 || true
      fail "${name} exited before ${what}; see ${LOGS}/${name}.log"
    fi
    if ((SECONDS >= deadline)); then
      [[ -n "${name}" ]] && { tail -n 30 "${LOGS}/${name}.log" >&2 || true; }
      fail "${what}: not within ${READY_TIMEOUT}s"
    fi
    sleep 1
  done
  log "${what}: yes"
}

# --- 0. A previous run is stopped first ----------------------------------------------------
if [[ -d "${STATE}" ]]; then
  "${ROOT}/hack/down-cluster.sh"
fi
mkdir -p "${PKI}" "${LOGS}" "${PIDS}" "${STATE}/etcd" "${STATE}/cni/net.d" "${STATE}/cni/ipam" \
  "${STATE}/containerd" "${STATE}/kubelet" "${STATE}/host/node-agent" "${STATE}/host/workspaces"
chmod 700 "${STATE}" "${PKI}"
for port in "${ETCD_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${KCM_PORT}" "${SCHEDULER_PORT}" \
  "${KUBELET_PORT}" "${KUBELET_HEALTHZ_PORT}" "${PROXY_HEALTHZ_PORT}" "${PROXY_METRICS_PORT}"; do
  port_in_use "${port}" && fail "port ${port} is already in use (another cluster, or another program)"
done
if ip link show "${BRIDGE}" >/dev/null 2>&1; then
  fail "network interface ${BRIDGE} exists already: another run-cluster is active (make down-cluster)"
fi

# --- 1. Binaries and packages ---------------------------------------------------------------
log "Kubernetes components (hack/build-control-plane.sh node; cached in ${K8S_BIN})"
"${ROOT}/hack/build-control-plane.sh" node >/dev/null
need_pkgs=()
command -v runc >/dev/null || need_pkgs+=(runc)
[[ -x "${CNI_BIN}/bridge" ]] || need_pkgs+=(containernetworking-plugins)
command -v iptables >/dev/null || need_pkgs+=(iptables)
command -v conntrack >/dev/null || need_pkgs+=(conntrack)
if ((${#need_pkgs[@]})); then
  log "apt-get install --no-install-recommends ${need_pkgs[*]} (Debian bookworm)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
ensure_containerd

# --- 2. PKI -----------------------------------------------------------------------------------
log "Generating the cluster PKI in ${PKI}"
openssl req -x509 -new -newkey rsa:2048 -nodes -days 365 -sha256 \
  -keyout "${PKI}/ca.key" -out "${PKI}/ca.crt" -subj "/CN=workbench-cluster-ca" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
issue apiserver "/CN=kube-apiserver" "serverAuth" \
  "IP:${NODE_IP},IP:127.0.0.1,IP:${SERVICE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
issue admin "/O=system:masters/CN=workbench-cluster-admin" "clientAuth"
issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "clientAuth"
issue kube-controller-manager "/CN=system:kube-controller-manager" "clientAuth"
issue kube-scheduler "/CN=system:kube-scheduler" "clientAuth"
issue kube-proxy "/CN=system:kube-proxy" "clientAuth"
issue kubelet-client "/O=system:nodes/CN=system:node:${NODE_NAME}" "clientAuth"
issue kubelet "/CN=${NODE_NAME}" "serverAuth" "IP:${NODE_IP},DNS:${NODE_NAME},DNS:localhost"
# The aggregated API (workbench-apiserver): kube-apiserver's front-proxy client (the only
# name --requestheader-allowed-names accepts). The aggregated server's serving and node-client
# certificates, the APIService's caBundle and the node agents' forwarding CA come from the
# manager's certificate rotator, as on any cluster (config/default).
issue front-proxy-client "/CN=front-proxy-client" "clientAuth"
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${PKI}/sa.key" 2>/dev/null
openssl pkey -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub"
chmod 600 "${PKI}"/*.key
for who in admin kube-controller-manager kube-scheduler kube-proxy kubelet-client; do
  write_kubeconfig "${who}" "${STATE}/${who}.kubeconfig"
done
cp "${STATE}/admin.kubeconfig" "${KUBECONFIG_FILE}"

# --- 3. Control plane -------------------------------------------------------------------------
start etcd "${K8S_BIN}/etcd" --name=workbench-cluster --data-dir="${STATE}/etcd" \
  --listen-client-urls="http://127.0.0.1:${ETCD_PORT}" --advertise-client-urls="http://127.0.0.1:${ETCD_PORT}" \
  --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster="workbench-cluster=http://127.0.0.1:${ETCD_PEER_PORT}" --listen-metrics-urls=
wait_for etcd "etcd answers" curl -sf --max-time 2 "http://127.0.0.1:${ETCD_PORT}/health"

# --enable-aggregator-routing: the API server calls webhooks (and aggregated API servers) at
# their endpoints' pod IPs, which this host reaches on the bridge, instead of through a
# Service ClusterIP. --allow-privileged: the node agent is a privileged DaemonSet.
start kube-apiserver "${K8S_BIN}/kube-apiserver" \
  --bind-address="${NODE_IP}" --advertise-address="${NODE_IP}" --secure-port="${APISERVER_PORT}" \
  --cert-dir="${STATE}/apiserver-certs" \
  --tls-cert-file="${PKI}/apiserver.crt" --tls-private-key-file="${PKI}/apiserver.key" \
  --client-ca-file="${PKI}/ca.crt" \
  --kubelet-client-certificate="${PKI}/apiserver-kubelet-client.crt" \
  --kubelet-client-key="${PKI}/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="${PKI}/ca.crt" \
  --kubelet-preferred-address-types=InternalIP \
  --etcd-servers="http://127.0.0.1:${ETCD_PORT}" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --allow-privileged=true --enable-aggregator-routing=true \
  --requestheader-client-ca-file="${PKI}/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-uid-headers=X-Remote-Uid \
  --requestheader-group-headers=X-Remote-Group --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="${PKI}/front-proxy-client.crt" --proxy-client-key-file="${PKI}/front-proxy-client.key" \
  --service-account-issuer="https://kubernetes.default.svc" \
  --service-account-key-file="${PKI}/sa.pub" --service-account-signing-key-file="${PKI}/sa.key" \
  --service-cluster-ip-range="${SERVICE_CIDR}" \
  --profiling=false
wait_for kube-apiserver "kube-apiserver ready" kubectl get --raw /readyz

start kube-controller-manager "${K8S_BIN}/kube-controller-manager" \
  --kubeconfig="${STATE}/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="${STATE}/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="${STATE}/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="${KCM_PORT}" --cert-dir="${STATE}/kcm-certs" \
  --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="${PKI}/sa.key" --root-ca-file="${PKI}/ca.crt" \
  --cluster-signing-cert-file="${PKI}/ca.crt" --cluster-signing-key-file="${PKI}/ca.key" \
  --service-cluster-ip-range="${SERVICE_CIDR}" --cluster-cidr="${POD_CIDR}" --allocate-node-cidrs=false \
  --profiling=false
start kube-scheduler "${K8S_BIN}/kube-scheduler" \
  --kubeconfig="${STATE}/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="${STATE}/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="${STATE}/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port="${SCHEDULER_PORT}" --leader-elect=false --profiling=false
wait_for kube-controller-manager "kube-controller-manager healthy" curl -skf --max-time 2 "https://127.0.0.1:${KCM_PORT}/healthz"
wait_for kube-scheduler "kube-scheduler healthy" curl -skf --max-time 2 "https://127.0.0.1:${SCHEDULER_PORT}/healthz"

# --- 4. containerd ------------------------------------------------------------------------------
write_containerd_config
start containerd env PATH="${CONTAINERD_BIN}:${PATH}" "${CONTAINERD_BIN}/containerd" --config "${STATE}/containerd/config.toml"
wait_for containerd "containerd serving" ctr version

# --- 5. CNI, cgroups, kubelet, kube-proxy ---------------------------------------------------------
write_cni_config
for h in $(cgroup_hierarchies); do mkdir -p "${h}${CGROUP_ROOT}"; done
write_kubelet_config
# What the kubelet and the CNI plugins change outside the state directory, recorded so that
# down-cluster restores it: the kernel settings the kubelet tunes, directories they create.
for key in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops \
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward net.ipv4.conf.all.route_localnet; do
  echo "${key}=$(sysctl -n "${key}")"
done >"${STATE}/sysctl.before"
for p in /var/log/containers /var/run/netns /var/lib/cni /run/containerd; do
  [[ -e "${p}" ]] || echo "${p}"
done >"${STATE}/paths.created"
ls -d /var/run/netns/cni-* >"${STATE}/netns.before" 2>/dev/null || true
start kubelet "${K8S_BIN}/kubelet" --config="${STATE}/kubelet.yaml" \
  --kubeconfig="${STATE}/kubelet-client.kubeconfig" --root-dir="${STATE}/kubelet" \
  --hostname-override="${NODE_NAME}" --node-ip="${NODE_IP}"
wait_for kubelet "node ${NODE_NAME} registered" kubectl get node "${NODE_NAME}"
write_kube_proxy_config
start kube-proxy "${K8S_BIN}/kube-proxy" --config="${STATE}/kube-proxy.yaml"
wait_for kube-proxy "kube-proxy healthy" curl -sf --max-time 2 "http://127.0.0.1:${PROXY_HEALTHZ_PORT}/healthz"
kubectl wait --for=condition=Ready "node/${NODE_NAME}" --timeout="${READY_TIMEOUT}s" >/dev/null ||
  fail "node ${NODE_NAME} not Ready; see ${LOGS}/kubelet.log"
log "Node ${NODE_NAME} is Ready ($(kubectl get node "${NODE_NAME}" -o jsonpath='{.status.nodeInfo.kubeletVersion}, {.status.nodeInfo.containerRuntimeVersion}'))"

if [[ "${SKIP_WORKBENCH}" == "1" ]]; then
  log "CLUSTER_SKIP_WORKBENCH=1: the cluster is up; nothing installed"
  exit 0
fi

# --- 6. Images ----------------------------------------------------------------------------------
log "Building the image tarballs (hack/images) into ${IMAGES}"
go run ./hack/images -out "${IMAGES}" -tag latest -only manager,node-agent,workbench-apiserver,pause >"${LOGS}/images.txt"
for tarball in "${IMAGES}"/*.tar; do
  ctr -n k8s.io images import "${tarball}" >/dev/null
done
log "Imported: $(ctr -n k8s.io images ls -q | grep -v '^sha256:' | tr '\n' ' ')"

# --- 7. Sensorium Workbench ----------------------------------------------------------------------
vms_setup
write_overlay
seed_workspace
log "Applying config/default (through ${STATE}/overlay)"
kubectl apply --server-side -k "${STATE}/overlay" >"${LOGS}/apply.txt"
kubectl -n workbench-system rollout status deployment/workbench-controller-manager --timeout="${READY_TIMEOUT}s" ||
  fail "the manager Deployment is not Ready; kubectl -n workbench-system describe pods"
kubectl -n workbench-system rollout status deployment/workbench-apiserver --timeout="${READY_TIMEOUT}s" ||
  fail "the workbench-apiserver Deployment is not Ready; kubectl -n workbench-system describe pods"
kubectl wait --for=condition=Available apiservice/v1alpha1.subresources.workbench.sensorium.dev --timeout="${READY_TIMEOUT}s" >/dev/null ||
  fail "APIService v1alpha1.subresources.workbench.sensorium.dev not Available"
log "The aggregated API subresources.workbench.sensorium.dev is Available"
kubectl -n workbench-system rollout status daemonset/workbench-node-agent --timeout="${READY_TIMEOUT}s" ||
  fail "the node-agent DaemonSet is not Ready; kubectl -n workbench-system describe pods"
wait_for "" "WorkbenchNode ${NODE_NAME} exists" kubectl get workbenchnode "${NODE_NAME}"
kubectl wait --for=condition=Ready "workbenchnode/${NODE_NAME}" --timeout="${READY_TIMEOUT}s" >/dev/null ||
  fail "WorkbenchNode ${NODE_NAME} not Ready"
log "Manager and node agent are Ready; WorkbenchNode ${NODE_NAME} is Ready"
if [[ "${VMS_ON}" == "1" ]]; then
  kubectl apply --server-side -f "${ROOT}/bin/guest/imagemanifest.yaml" >/dev/null
  log "qemu-microvm.v1 runs in the node-agent pod (image bin/guest/ through a read-only hostPath); ImageManifest registered"
fi

if [[ "${SKIP_SAMPLES}" != "1" ]]; then
  log "Applying config/samples"
  kubectl apply --server-side -f config/samples >/dev/null
  if [[ "${VMS_ON}" == "1" ]]; then
    kubectl apply --server-side -f config/samples/vm >/dev/null
  fi
fi

cat <<EOF

A single-node cluster runs here with Sensorium Workbench installed (state in ${STATE}).

  export KUBECONFIG=${KUBECONFIG_FILE}
  export PATH=${K8S_BIN}:\$PATH
  kubectl get nodes -o wide
  kubectl -n workbench-system get pods -o wide
  kubectl get workbenchnodes,environments,terminalcommands -A

Stop everything with: make down-cluster
EOF

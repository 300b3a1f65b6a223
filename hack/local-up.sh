#!/usr/bin/env bash
# Starts the embedded default of Sensorium Workbench on this machine, on loopback only:
# etcd, kube-apiserver and kube-controller-manager (built from the Go module proxy by
# hack/build-control-plane.sh; the controller manager runs garbage collection, namespace
# deletion and the ServiceAccount controllers), the CRDs and ClusterRoles, the manager as a local process with its admission webhooks
# registered by URL (https://127.0.0.1:<port>), and the samples from config/samples/.
# The node agent joins here when it exists (see "Node agent" below).
#
# Everything it makes lives under .local/ (git-ignored): pki/, etcd/ (data), logs/,
# pids/, kubeconfig. Re-running first stops a previous run; hack/local-down.sh (or
# `make down-local`) stops everything by recorded pid.
#
# Environment (defaults in brackets):
#   LOCAL_UP_FOREGROUND=1   stay in the foreground until Ctrl-C, then stop everything [0]
#   LOCAL_UP_CLEAN=0        keep etcd data and the PKI of the previous run [1: start clean]
#   LOCAL_UP_SKIP_MANAGER=1 stop after the control plane, CRDs and RBAC [0]
#   LOCAL_STATE_DIR         state directory [.local]
#   ETCD_CLIENT_PORT [23790]  ETCD_PEER_PORT [23800]  APISERVER_PORT [6443]
#   CONTROLLER_MANAGER_PORT [10257]  (kube-controller-manager's HTTPS health port)
#   WEBHOOK_PORT [9443]  MANAGER_METRICS_PORT [8080]  MANAGER_HEALTH_PORT [8081]
#   MANAGER_BIN             a manager binary to run instead of building ./cmd/manager
#   MANAGER_ARGS            extra arguments for the manager
#   LOCAL_NODE_NAME         the node agent's node name [local]
#   LOCAL_WORKSPACES        the node agent's admitted root "workspaces" [/var/lib/workbench/workspaces]
#   LOCAL_SOURCES           where the git source of the sample demo-src is served from (file://,
#                           allowlisted in the node agent's sources policy) [/var/lib/workbench/sources]
#   DATAPLANE_PORT          the node agent's HTTPS data plane on 127.0.0.1 [10350]
#   LOCAL_UP_SKIP_NODE_AGENT=1  run no node agent (it needs root for network namespaces) [0]
#   LOCAL_VMS               qemu-microvm.v1 in the node agent: auto (when QEMU and the guest
#                           image can be had; builds the image on first use), 1 (required), 0 (off) [auto]
#   LOCAL_VM_ACCEL          the VM accelerator: auto (KVM only where a probe VM boots), kvm, tcg [auto]
#   READY_TIMEOUT           seconds to wait for each component to become ready [60]
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

STATE="${LOCAL_STATE_DIR:-${ROOT}/.local}"
ETCD_CLIENT_PORT="${ETCD_CLIENT_PORT:-23790}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-23800}"
APISERVER_PORT="${APISERVER_PORT:-6443}"
CONTROLLER_MANAGER_PORT="${CONTROLLER_MANAGER_PORT:-10257}"
WEBHOOK_PORT="${WEBHOOK_PORT:-9443}"
MANAGER_METRICS_PORT="${MANAGER_METRICS_PORT:-8080}"
MANAGER_HEALTH_PORT="${MANAGER_HEALTH_PORT:-8081}"
READY_TIMEOUT="${READY_TIMEOUT:-60}"
FOREGROUND="${LOCAL_UP_FOREGROUND:-0}"
CLEAN="${LOCAL_UP_CLEAN:-1}"
SKIP_MANAGER="${LOCAL_UP_SKIP_MANAGER:-0}"
NODE_NAME="${LOCAL_NODE_NAME:-local}"
WORKSPACES="${LOCAL_WORKSPACES:-/var/lib/workbench/workspaces}"
SOURCES="${LOCAL_SOURCES:-/var/lib/workbench/sources}"
# The sample demo-src's commit: local_sources_setup makes it byte for byte.
DEMO_SRC_COMMIT=ccc2e9ef1c06981a285a720355419223a658eb0e
SOURCES_ON=0
SOURCES_CONF=""
DATAPLANE_PORT="${DATAPLANE_PORT:-10350}"
SKIP_NODE_AGENT="${LOCAL_UP_SKIP_NODE_AGENT:-0}"
# shellcheck disable=SC2206 # word splitting of MANAGER_ARGS is intended
EXTRA_MANAGER_ARGS=(${MANAGER_ARGS:-})

PKI="${STATE}/pki"
LOGS="${STATE}/logs"
PIDS="${STATE}/pids"
KUBECONFIG_FILE="${STATE}/kubeconfig"
WEBHOOK_CERTS="${STATE}/webhook-certs"
FIELD_MANAGER="workbench-local-up"

log() { printf '[local-up %s] %s\n' "$(date +%T)" "$*" >&2; }

fail() {
  trap - ERR
  log "ERROR: $*"
  log "Stopping what this run started (logs stay in ${LOGS})"
  LOCAL_STATE_DIR="${STATE}" "${ROOT}/hack/local-down.sh" >&2 || true
  exit 1
}
trap 'fail "command failed at line ${LINENO}: ${BASH_COMMAND}"' ERR

need() { command -v "$1" >/dev/null 2>&1 || fail "$1 is required (apt-get install $2)"; }
need openssl openssl
need curl curl

# port_in_use PORT: true if something accepts connections on 127.0.0.1:PORT.
# local_vms_setup decides whether the node agent offers qemu-microvm.v1 (LOCAL_VMS: auto
# (default) = when this machine can have QEMU and the guest image, 1 = required, 0 = off).
# It builds the guest image on first use (cached in bin/guest/; `make guest-image` needs
# root and apt), and sets VMS_ON and QEMU_CONF (the node agent's qemu: block), or says
# plainly why VMs are off and how to turn them on.
VMS_ON=0
QEMU_CONF=""
# local_sources_setup serves the sample demo-src's git source (issue 28): a bare repository
# at ${SOURCES}/demo.git holding one commit made with fixed names, dates and content, so its
# id is DEMO_SRC_COMMIT on every machine; and the node agent's sources policy allows file://
# URLs in ${SOURCES} only. The node materializes it (never the sandbox); without git the
# sample is not applied.
local_sources_setup() {
  if ! command -v git >/dev/null 2>&1; then
    log "No git on this machine: the git-source sample demo-src is not applied"
    return 0
  fi
  local repo="${SOURCES}/demo.git"
  if [[ "$(git -C "${repo}" rev-parse -q --verify HEAD 2>/dev/null || true)" != "${DEMO_SRC_COMMIT}" ]]; then
    local work
    work="$(mktemp -d)"
    printf '# demo-src\n\nA workspace materialized from a git commit by the node agent.\n' >"${work}/README.md"
    printf 'package main\n\nfunc main() { println("hello") }\n' >"${work}/main.go"
    (
      cd "${work}"
      export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_AUTHOR_NAME=workbench GIT_AUTHOR_EMAIL=workbench@localhost \
        GIT_COMMITTER_NAME=workbench GIT_COMMITTER_EMAIL=workbench@localhost \
        GIT_AUTHOR_DATE='2026-01-01T00:00:00Z' GIT_COMMITTER_DATE='2026-01-01T00:00:00Z'
      git init -q -b main . && git add README.md main.go && git commit -qm "demo-src"
    )
    rm -rf "${repo}"
    mkdir -p "${SOURCES}"
    git clone -q --bare "${work}" "${repo}"
    rm -rf "${work}"
    local got
    got="$(git -C "${repo}" rev-parse HEAD)"
    [[ "${got}" == "${DEMO_SRC_COMMIT}" ]] || fail "${repo} holds commit ${got}, not the sample's ${DEMO_SRC_COMMIT}"
  fi
  SOURCES_ON=1
  SOURCES_CONF="sources:
  allowedFileDirs: [${SOURCES}]"
}

local_vms_setup() {
  local want="${LOCAL_VMS:-auto}" why=""
  if [[ "${want}" == "0" ]]; then
    log "VMs off (LOCAL_VMS=0)"
    return
  fi
  if [[ "$(uname -m)" != "x86_64" ]]; then
    why="the guest image is x86_64 and this machine is $(uname -m)"
  elif [[ -z "$(command -v qemu-system-x86_64)" && "$(id -u)" != "0" ]]; then
    why="qemu-system-x86_64 is not installed and building the guest image needs root (apt-get)"
  else
    local f missing=0
    for f in vmlinux initramfs.cpio vhost-device-vsock imagemanifest.yaml; do
      [[ -s "${ROOT}/bin/guest/${f}" ]] || missing=1
    done
    if [[ "${missing}" == "1" || -z "$(command -v qemu-system-x86_64)" ]]; then
      log "Building the guest image for qemu-microvm.v1 (first use; cached in bin/guest/; LOCAL_VMS=0 skips): logs in ${LOGS}/guest-image.log"
      if ! GUEST_IMAGE_MANIFEST="${ROOT}/bin/guest/imagemanifest.yaml" GUEST_SYSTEM_MANIFEST="${ROOT}/bin/guest-system/imagemanifest.yaml" make -C "${ROOT}" guest-image >"${LOGS}/guest-image.log" 2>&1; then
        why="make guest-image failed (see ${LOGS}/guest-image.log)"
      fi
    fi
  fi
  if [[ -z "${why}" ]]; then
    VMS_ON=1
    QEMU_CONF="qemu:
  enabled: true
  imageDir: ${ROOT}/bin
  accel: ${LOCAL_VM_ACCEL:-auto}"
    log "VMs on: qemu-microvm.v1 with the image in bin/guest/ (accelerator ${LOCAL_VM_ACCEL:-auto}: KVM only where a probe VM boots under it, else TCG)"
    return
  fi
  [[ "${want}" == "1" ]] && fail "LOCAL_VMS=1 but VMs cannot run here: ${why}"
  log "VMs off: ${why}. To turn them on: run 'make guest-image' as root (it apt-installs QEMU), then 'make run-local' again"
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start NAME LOGFILE CMD...: starts CMD in its own session with stdin from /dev/null and
# its output in LOGFILE; records "pid starttime name" in pids/NAME.pid.
start() {
  local name="$1" logfile="$2"
  shift 2
  setsid "$@" </dev/null >"${logfile}" 2>&1 &
  local pid=$!
  local starttime
  starttime="$(sed 's/^.*) //' "/proc/${pid}/stat" | cut -d' ' -f20)"
  echo "${pid} ${starttime} ${name}" >"${PIDS}/${name}.pid"
  log "Started ${name} (pid ${pid}, log ${logfile})"
}

alive() { [[ -f "${PIDS}/$1.pid" ]] && kill -0 "$(cut -d' ' -f1 "${PIDS}/$1.pid")" 2>/dev/null; }

# wait_ready NAME URL CURL_ARGS...: polls URL once a second, at most READY_TIMEOUT
# seconds, failing early with the log tail if the process NAME exits.
wait_ready() {
  local name="$1" url="$2"
  shift 2
  local deadline=$((SECONDS + READY_TIMEOUT))
  until curl -sf --max-time 2 "$@" "${url}" >/dev/null 2>&1; do
    if ! alive "${name}"; then
      tail -n 30 "${LOGS}/${name}.log" >&2 || true
      fail "${name} exited before ${url} answered; see ${LOGS}/${name}.log"
    fi
    if ((SECONDS >= deadline)); then
      tail -n 30 "${LOGS}/${name}.log" >&2 || true
      fail "${name} not ready: ${url} did not answer within ${READY_TIMEOUT}s; see ${LOGS}/${name}.log"
    fi
    sleep 1
  done
  log "${name} is ready (${url})"
}

# --- kube-controller-manager ----------------------------------------------------------------
# Garbage collection (owner references), namespace deletion, the ServiceAccount and root-CA
# ConfigMap controllers: without it a deleted namespace stays Terminating for good. It signs
# nothing for nodes here (no kubelet); it uses the admin kubeconfig and the service account
# signing key the API server verifies with.
start_controller_manager() {
  start kube-controller-manager "${LOGS}/kube-controller-manager.log" "${K8S_BIN}/kube-controller-manager" \
    --kubeconfig="${KUBECONFIG_FILE}" \
    --authentication-kubeconfig="${KUBECONFIG_FILE}" \
    --authorization-kubeconfig="${KUBECONFIG_FILE}" \
    --bind-address=127.0.0.1 \
    --secure-port="${CONTROLLER_MANAGER_PORT}" \
    --cert-dir="${STATE}/controller-manager-certs" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="${PKI}/sa.key" \
    --root-ca-file="${PKI}/ca.crt" \
    --cluster-signing-cert-file="${PKI}/ca.crt" \
    --cluster-signing-key-file="${PKI}/ca.key" \
    --profiling=false
  wait_ready kube-controller-manager "https://127.0.0.1:${CONTROLLER_MANAGER_PORT}/healthz" --insecure
}

# --- workbench-apiserver (the aggregated subresource API) -----------------------------------
# kube-apiserver authenticates and authorizes every call on subresources.workbench.sensorium.dev
# and proxies it, with the caller's identity in front-proxy headers, to workbench-apiserver;
# that one forwards to the node's data plane with its own client certificate. Locally one CA
# signs everything; names pin each role: kube-apiserver's proxy client is front-proxy-client
# (--requestheader-allowed-names), the node agent accepts forwarded identities only from
# workbench-apiserver. kube-apiserver dials the EndpointSlice address directly
# (--enable-aggregator-routing, no kube-proxy), which may not be loopback: the host's first
# non-loopback IPv4 address is used.
AGG_PORT="${AGG_PORT:-8444}"
AGG_HOST_IP="${AGG_HOST_IP:-$(ip -4 -o addr show scope global 2>/dev/null | awk '{split($4,a,"/"); print a[1]; exit}')}"
aggregation_pki() {
  if ! valid_cert "${PKI}/front-proxy-client.crt"; then
    issue front-proxy-client "/CN=front-proxy-client" \
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
  fi
  if [[ -n "${AGG_HOST_IP}" ]] && { ! valid_cert "${PKI}/workbench-apiserver.crt" ||
    ! openssl x509 -in "${PKI}/workbench-apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:${AGG_HOST_IP}"; }; then
    issue workbench-apiserver "/CN=workbench-apiserver" \
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:workbench-apiserver.workbench-system.svc,IP:${AGG_HOST_IP},IP:127.0.0.1,DNS:localhost"
  fi
  if ! valid_cert "${PKI}/workbench-apiserver-node-client.crt"; then
    issue workbench-apiserver-node-client "/CN=workbench-apiserver" \
      "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
  fi
}
# kube-apiserver flags for aggregated API servers.
AGGREGATION_FLAGS=(
  --requestheader-client-ca-file="${PKI}/ca.crt"
  --requestheader-allowed-names=front-proxy-client
  --requestheader-username-headers=X-Remote-User
  --requestheader-uid-headers=X-Remote-Uid
  --requestheader-group-headers=X-Remote-Group
  --requestheader-extra-headers-prefix=X-Remote-Extra-
  --proxy-client-cert-file="${PKI}/front-proxy-client.crt"
  --proxy-client-key-file="${PKI}/front-proxy-client.key"
  --enable-aggregator-routing=true
)
start_workbench_apiserver() {
  if [[ -z "${AGG_HOST_IP}" ]]; then
    log "WARNING: no non-loopback IPv4 address: kube-apiserver cannot reach workbench-apiserver; skipping it"
    return
  fi
  log "Building bin/workbench-apiserver"
  go build -o bin/workbench-apiserver ./cmd/workbench-apiserver || fail "go build ./cmd/workbench-apiserver failed"
  port_in_use "${AGG_PORT}" && fail "port ${AGG_PORT} is already in use (AGG_PORT)"
  start workbench-apiserver "${LOGS}/workbench-apiserver.log" "${ROOT}/bin/workbench-apiserver" \
    --bind-address="${AGG_HOST_IP}" --secure-port="${AGG_PORT}" \
    --tls-cert-file="${PKI}/workbench-apiserver.crt" --tls-private-key-file="${PKI}/workbench-apiserver.key" \
    --kubeconfig="${KUBECONFIG_FILE}" --authentication-kubeconfig="${KUBECONFIG_FILE}" --authorization-kubeconfig="${KUBECONFIG_FILE}" \
    --node-client-cert-file="${PKI}/workbench-apiserver-node-client.crt" --node-client-key-file="${PKI}/workbench-apiserver-node-client.key"
  wait_ready workbench-apiserver "https://${AGG_HOST_IP}:${AGG_PORT}/readyz" --cacert "${PKI}/ca.crt"
  kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f - >/dev/null <<AGGREG
apiVersion: v1
kind: Service
metadata: {name: workbench-apiserver, namespace: workbench-system}
spec:
  ports: [{name: https, port: 443, targetPort: ${AGG_PORT}, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: workbench-apiserver
  namespace: workbench-system
  labels: {kubernetes.io/service-name: workbench-apiserver}
addressType: IPv4
endpoints: [{addresses: ["${AGG_HOST_IP}"], conditions: {ready: true}}]
ports: [{name: https, port: ${AGG_PORT}, protocol: TCP}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.subresources.workbench.sensorium.dev}
spec:
  group: subresources.workbench.sensorium.dev
  version: v1alpha1
  service: {namespace: workbench-system, name: workbench-apiserver, port: 443}
  caBundle: $(base64 -w0 "${PKI}/ca.crt")
  groupPriorityMinimum: 100
  versionPriority: 15
AGGREG
  kubectl wait --for=condition=Available apiservice/v1alpha1.subresources.workbench.sensorium.dev --timeout="${READY_TIMEOUT}s" >/dev/null ||
    fail "APIService v1alpha1.subresources.workbench.sensorium.dev not Available; see ${LOGS}/workbench-apiserver.log"
  log "workbench-apiserver serves subresources.workbench.sensorium.dev (https://${AGG_HOST_IP}:${AGG_PORT})"
}

# --- 0. Stop a previous run ---------------------------------------------------------------
if [[ -d "${PIDS}" ]]; then
  LOCAL_STATE_DIR="${STATE}" "${ROOT}/hack/local-down.sh"
fi
if [[ "${CLEAN}" == "1" ]]; then
  log "LOCAL_UP_CLEAN=1: removing ${STATE}"
  rm -rf "${STATE}"
fi
mkdir -p "${PKI}" "${LOGS}" "${PIDS}" "${WEBHOOK_CERTS}" "${STATE}/etcd"
chmod 700 "${STATE}" "${PKI}"

for port in "${ETCD_CLIENT_PORT}" "${ETCD_PEER_PORT}" "${APISERVER_PORT}" "${CONTROLLER_MANAGER_PORT}"; do
  if port_in_use "${port}"; then
    fail "127.0.0.1:${port} is already in use by another program; free it or choose another port (ETCD_CLIENT_PORT, ETCD_PEER_PORT, APISERVER_PORT, CONTROLLER_MANAGER_PORT)"
  fi
done

# --- 1. Binaries --------------------------------------------------------------------------
K8S_BIN="$("${ROOT}/hack/build-control-plane.sh" path)"
if [[ ! -x "${K8S_BIN}/etcd" || ! -x "${K8S_BIN}/kube-apiserver" || ! -x "${K8S_BIN}/kubectl" ||
  ! -x "${K8S_BIN}/kube-controller-manager" ]]; then
  log "Building etcd, kube-apiserver, kubectl and kube-controller-manager from the Go module proxy (about 15 minutes the first time)"
  "${ROOT}/hack/build-control-plane.sh" controller-manager >/dev/null
fi
KUBECTL="${K8S_BIN}/kubectl"
kubectl() { "${KUBECTL}" --kubeconfig "${KUBECONFIG_FILE}" "$@"; }

HAVE_MANAGER=0
if [[ "${SKIP_MANAGER}" == "1" ]]; then
  log "LOCAL_UP_SKIP_MANAGER=1: control plane, CRDs and RBAC only"
elif [[ -n "${MANAGER_BIN:-}" ]]; then
  [[ -x "${MANAGER_BIN}" ]] || fail "MANAGER_BIN=${MANAGER_BIN} is not an executable"
  log "Using MANAGER_BIN=${MANAGER_BIN}"
  HAVE_MANAGER=1
elif [[ ! -f cmd/manager/main.go ]]; then
  log "WARNING: cmd/manager/main.go does not exist yet: control plane, CRDs and RBAC only"
else
  log "Building bin/manager and bin/kubectl-workbench"
  go build -o bin/manager ./cmd/manager || fail "go build ./cmd/manager failed"
  go build -o bin/kubectl-workbench ./cmd/kubectl-workbench || fail "go build ./cmd/kubectl-workbench failed"
  HAVE_MANAGER=1
fi
HAVE_NODE_AGENT=0
if [[ "${HAVE_MANAGER}" == "1" && "${SKIP_NODE_AGENT}" != "1" ]]; then
  if [[ "$(id -u)" != "0" ]]; then
    log "WARNING: not root: the node agent needs root for network namespaces and Landlock; running without it"
  else
    log "Building bin/node-agent"
    go build -o bin/node-agent ./cmd/node-agent || fail "go build ./cmd/node-agent failed"
    go build -o bin/workbench-sandbox ./cmd/workbench-sandbox || fail "go build ./cmd/workbench-sandbox failed"
    HAVE_NODE_AGENT=1
  fi
fi
MANAGER_BIN="${MANAGER_BIN:-${ROOT}/bin/manager}"

# --- 2. PKI -------------------------------------------------------------------------------
# One local CA signs the API server's serving certificate, the admin client certificate
# and the webhook server's certificate; a separate key pair signs service account tokens.
# Kept across runs (so kubeconfigs stay valid) unless a certificate is about to expire.
valid_cert() { [[ -s "$1" ]] && openssl x509 -in "$1" -noout -checkend 86400 >/dev/null 2>&1; }

# issue NAME SUBJECT EXTENSIONS: key + certificate signed by the local CA.
issue() {
  local name="$1" subject="$2" ext="$3"
  openssl req -new -newkey rsa:2048 -nodes -keyout "${PKI}/${name}.key" -subj "${subject}" \
    -out "${PKI}/${name}.csr" 2>/dev/null
  printf '%b\n' "${ext}" >"${PKI}/${name}.ext"
  openssl x509 -req -in "${PKI}/${name}.csr" -CA "${PKI}/ca.crt" -CAkey "${PKI}/ca.key" \
    -CAcreateserial -days 365 -sha256 -extfile "${PKI}/${name}.ext" -out "${PKI}/${name}.crt" 2>/dev/null
  rm -f "${PKI}/${name}.csr" "${PKI}/${name}.ext"
}

if ! valid_cert "${PKI}/ca.crt"; then
  log "Generating a local CA and certificates in ${PKI}"
  rm -f "${PKI}"/*
  openssl req -x509 -new -newkey rsa:2048 -nodes -days 365 -sha256 \
    -keyout "${PKI}/ca.key" -out "${PKI}/ca.crt" -subj "/CN=workbench-local-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
fi
if ! valid_cert "${PKI}/apiserver.crt"; then
  issue apiserver "/CN=kube-apiserver" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1"
fi
if ! valid_cert "${PKI}/admin.crt"; then
  issue admin "/O=system:masters/CN=workbench-admin" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
fi
if ! valid_cert "${PKI}/webhook.crt"; then
  issue webhook "/CN=workbench-webhook" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost"
fi
# The node agent authenticates as user workbench:node:<node> in group workbench:nodes: the
# admission webhooks restrict that identity to its own node's objects.
if ! valid_cert "${PKI}/node-${NODE_NAME}.crt"; then
  issue "node-${NODE_NAME}" "/O=workbench:nodes/CN=workbench:node:${NODE_NAME}" \
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
fi
if [[ ! -s "${PKI}/sa.key" ]]; then
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "${PKI}/sa.key" 2>/dev/null
  openssl pkey -in "${PKI}/sa.key" -pubout -out "${PKI}/sa.pub"
fi
aggregation_pki
chmod 600 "${PKI}"/*.key
# controller-runtime's webhook server reads tls.crt and tls.key from --webhook-cert-dir.
cp "${PKI}/webhook.crt" "${WEBHOOK_CERTS}/tls.crt"
cp "${PKI}/webhook.key" "${WEBHOOK_CERTS}/tls.key"
chmod 600 "${WEBHOOK_CERTS}/tls.key"

# --- 3. etcd ------------------------------------------------------------------------------
start etcd "${LOGS}/etcd.log" "${K8S_BIN}/etcd" \
  --name=workbench-local \
  --data-dir="${STATE}/etcd" \
  --listen-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --advertise-client-urls="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --listen-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-advertise-peer-urls="http://127.0.0.1:${ETCD_PEER_PORT}" \
  --initial-cluster="workbench-local=http://127.0.0.1:${ETCD_PEER_PORT}"
wait_ready etcd "http://127.0.0.1:${ETCD_CLIENT_PORT}/health"

# --- 4. kube-apiserver --------------------------------------------------------------------
# The API server audit log is the host audit of the seeds (DESIGN.md §2): every request on
# the workbench group is logged with its user, verb and object.
cat >"${STATE}/audit-policy.yaml" <<'EOF'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
rules:
- level: Metadata
  resources:
  - group: workbench.sensorium.dev
  - group: subresources.workbench.sensorium.dev
- level: None
EOF
# Loopback only: --endpoint-reconciler-type=none because the reconciler refuses a loopback
# advertise address (nothing runs in-cluster, so no endpoint for the `kubernetes` Service
# is needed); the service range is a required setting, no address in it is ever contacted.
start kube-apiserver "${LOGS}/kube-apiserver.log" "${K8S_BIN}/kube-apiserver" \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="${APISERVER_PORT}" \
  --cert-dir="${STATE}/apiserver-certs" \
  --tls-cert-file="${PKI}/apiserver.crt" \
  --tls-private-key-file="${PKI}/apiserver.key" \
  --client-ca-file="${PKI}/ca.crt" \
  --etcd-servers="http://127.0.0.1:${ETCD_CLIENT_PORT}" \
  --authorization-mode=RBAC \
  --service-account-issuer="https://127.0.0.1:${APISERVER_PORT}" \
  --service-account-key-file="${PKI}/sa.pub" \
  --service-account-signing-key-file="${PKI}/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --endpoint-reconciler-type=none \
  --audit-policy-file="${STATE}/audit-policy.yaml" \
  --audit-log-path="${LOGS}/audit.log" \
  --audit-log-maxsize=50 \
  --audit-log-maxbackup=2 \
  "${AGGREGATION_FLAGS[@]}" \
  --profiling=false
wait_ready kube-apiserver "https://127.0.0.1:${APISERVER_PORT}/readyz" \
  --cacert "${PKI}/ca.crt" --cert "${PKI}/admin.crt" --key "${PKI}/admin.key"

# --- 5. kubeconfig ------------------------------------------------------------------------
rm -f "${KUBECONFIG_FILE}"
kubectl config set-cluster workbench-local --server="https://127.0.0.1:${APISERVER_PORT}" \
  --certificate-authority="${PKI}/ca.crt" --embed-certs=true >/dev/null
kubectl config set-credentials workbench-admin --client-certificate="${PKI}/admin.crt" \
  --client-key="${PKI}/admin.key" --embed-certs=true >/dev/null
kubectl config set-context workbench-local --cluster=workbench-local --user=workbench-admin >/dev/null
kubectl config use-context workbench-local >/dev/null
chmod 600 "${KUBECONFIG_FILE}"
log "Wrote ${KUBECONFIG_FILE} (user workbench-admin, group system:masters)"

start_controller_manager

# --- 6. CRDs and RBAC ---------------------------------------------------------------------
log "Installing CRDs from config/crd/bases"
kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f config/crd/bases >/dev/null
kubectl wait --for=condition=Established -f config/crd/bases --timeout="${READY_TIMEOUT}s" >/dev/null
log "CRDs established: $(kubectl get crd -o name | grep -c 'workbench.sensorium.dev')"

# The user-facing ClusterRoles, plus the manager's generated role when it exists. The
# local manager runs with the admin kubeconfig; the roles are here to bind and try out,
# e.g. kubectl auth can-i create consentgrants --as=alice --as-group=... after a binding.
rbac_files=(config/rbac/operator_role.yaml config/rbac/agent_role.yaml config/rbac/viewer_role.yaml
  config/rbac/view_observer_role.yaml config/rbac/node_agent_role.yaml config/rbac/metrics_reader_role.yaml)
[[ -f config/rbac/role.yaml ]] && rbac_files+=(config/rbac/role.yaml)
log "Installing ClusterRoles: ${rbac_files[*]}"
rbac_args=()
for f in "${rbac_files[@]}"; do rbac_args+=(-f "${f}"); done
kubectl apply --server-side --field-manager="${FIELD_MANAGER}" "${rbac_args[@]}" >/dev/null
kubectl create namespace workbench-system --dry-run=client -o yaml |
  kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f - >/dev/null

start_workbench_apiserver

# --- 7. Manager and webhooks --------------------------------------------------------------
if [[ "${HAVE_MANAGER}" == "1" ]]; then
  for port in "${WEBHOOK_PORT}" "${MANAGER_METRICS_PORT}" "${MANAGER_HEALTH_PORT}"; do
    port_in_use "${port}" && fail "127.0.0.1:${port} is already in use (WEBHOOK_PORT, MANAGER_METRICS_PORT, MANAGER_HEALTH_PORT)"
  done
  manager_args=(
    --kubeconfig "${KUBECONFIG_FILE}"
    --webhook-cert-dir "${WEBHOOK_CERTS}"
    --metrics-bind-address "127.0.0.1:${MANAGER_METRICS_PORT}"
    --health-probe-bind-address "127.0.0.1:${MANAGER_HEALTH_PORT}"
  )
  # Keep the webhook server on loopback when the manager lets us choose its address.
  # (The help text is captured first: grep -q closing the pipe early would fail the
  # pipeline under pipefail.)
  manager_help="$("${MANAGER_BIN}" --help 2>&1 || true)"
  if grep -q -- '-webhook-host' <<<"${manager_help}" && grep -q -- '-webhook-port' <<<"${manager_help}"; then
    manager_args+=(--webhook-host 127.0.0.1 --webhook-port "${WEBHOOK_PORT}")
  elif [[ "${WEBHOOK_PORT}" != "9443" ]]; then
    fail "${MANAGER_BIN} has no --webhook-host/--webhook-port flags, so its webhook server listens on :9443; WEBHOOK_PORT=${WEBHOOK_PORT} cannot be honoured"
  else
    log "WARNING: ${MANAGER_BIN} has no --webhook-host flag; its webhook server listens on all interfaces, port 9443"
  fi
  start manager "${LOGS}/manager.log" "${MANAGER_BIN}" "${manager_args[@]}" "${EXTRA_MANAGER_ARGS[@]}"
  wait_ready manager "http://127.0.0.1:${MANAGER_HEALTH_PORT}/readyz"

  # Webhooks are registered only once the manager serves them: with failurePolicy Fail,
  # a registered webhook without a server would refuse every workbench object.
  if [[ -f config/webhook/manifests.yaml ]]; then
    log "Registering webhooks at https://127.0.0.1:${WEBHOOK_PORT}"
    go run ./hack/render-webhooks -in config/webhook/manifests.yaml \
      -url "https://127.0.0.1:${WEBHOOK_PORT}" -ca-file "${PKI}/ca.crt" \
      -out "${STATE}/webhooks.yaml"
    kubectl apply --server-side --force-conflicts --field-manager="${FIELD_MANAGER}" -f "${STATE}/webhooks.yaml" >/dev/null
    # The node restriction for status writes is the API server's own policy, not a webhook.
    kubectl apply --server-side --force-conflicts --field-manager="${FIELD_MANAGER}" -f config/webhook/node_status_policy.yaml >/dev/null
  else
    log "WARNING: config/webhook/manifests.yaml does not exist (run make manifests): no admission webhooks registered"
  fi

  # --- Node agent -------------------------------------------------------------------------
  if [[ "${HAVE_NODE_AGENT}" == "1" ]]; then
    node_kubeconfig="${STATE}/node-agent.kubeconfig"
    rm -f "${node_kubeconfig}"
    "${KUBECTL}" config --kubeconfig "${node_kubeconfig}" set-cluster workbench-local --server="https://127.0.0.1:${APISERVER_PORT}" \
      --certificate-authority="${PKI}/ca.crt" --embed-certs=true >/dev/null
    "${KUBECTL}" config --kubeconfig "${node_kubeconfig}" set-credentials "node-${NODE_NAME}" --client-certificate="${PKI}/node-${NODE_NAME}.crt" \
      --client-key="${PKI}/node-${NODE_NAME}.key" --embed-certs=true >/dev/null
    "${KUBECTL}" config --kubeconfig "${node_kubeconfig}" set-context node --cluster=workbench-local --user="node-${NODE_NAME}" >/dev/null
    "${KUBECTL}" config --kubeconfig "${node_kubeconfig}" use-context node >/dev/null
    chmod 600 "${node_kubeconfig}"
    kubectl create clusterrolebinding "workbench-node-agent-${NODE_NAME}" --clusterrole=workbench-node-agent \
      --user="workbench:node:${NODE_NAME}" --dry-run=client -o yaml |
      kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f - >/dev/null
    # The samples' environment lives in the admitted root: a small git repository.
    mkdir -p "${WORKSPACES}/demo" "${STATE}/node-agent"
    if [[ ! -e "${WORKSPACES}/demo/README.md" ]]; then
      printf '# demo\n\nA workspace of the embedded default.\n' >"${WORKSPACES}/demo/README.md"
      printf 'Notes.\n' >"${WORKSPACES}/demo/NOTES.md"
      if command -v git >/dev/null 2>&1; then
        git -C "${WORKSPACES}/demo" init -q && git -C "${WORKSPACES}/demo" add -A &&
          git -C "${WORKSPACES}/demo" -c user.name=workbench -c user.email=workbench@localhost commit -qm "demo" || true
      fi
    fi
    local_vms_setup
    local_sources_setup
    cat >"${STATE}/node-agent.yaml" <<NODECONF
nodeName: ${NODE_NAME}
stateDir: ${STATE}/node-agent
admittedRoots:
  workspaces: ${WORKSPACES}
dataPlaneAddress: 127.0.0.1:${DATAPLANE_PORT}
dataPlaneHosts: [127.0.0.1, localhost]
dataPlaneForwardingCAFile: ${PKI}/ca.crt
dataPlaneForwardingNames: [workbench-apiserver]
heartbeatSeconds: 15
${QEMU_CONF}
${SOURCES_CONF}
NODECONF
    port_in_use "${DATAPLANE_PORT}" && fail "127.0.0.1:${DATAPLANE_PORT} is already in use (DATAPLANE_PORT)"
    start node-agent "${LOGS}/node-agent.log" "${ROOT}/bin/node-agent" --config "${STATE}/node-agent.yaml" --kubeconfig "${node_kubeconfig}"
    log "Waiting for WorkbenchNode ${NODE_NAME}"
    deadline=$((SECONDS + READY_TIMEOUT))
    until kubectl get workbenchnode "${NODE_NAME}" >/dev/null 2>&1; do
      alive node-agent || fail "the node agent exited; see ${LOGS}/node-agent.log"
      ((SECONDS < deadline)) || fail "WorkbenchNode ${NODE_NAME} did not appear within ${READY_TIMEOUT}s; see ${LOGS}/node-agent.log"
      sleep 0.5
    done
    kubectl wait --for=condition=Ready "workbenchnode/${NODE_NAME}" --timeout="${READY_TIMEOUT}s" >/dev/null
  fi

  # --- 8. Samples -------------------------------------------------------------------------
  if [[ "${VMS_ON}" == "1" ]]; then
    log "Registering the guest image (bin/guest/imagemanifest.yaml) and applying config/samples/vm"
    kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f "${ROOT}/bin/guest/imagemanifest.yaml" >/dev/null
    kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f config/samples/vm
  fi
  if [[ "${SOURCES_ON}" == "1" ]]; then
    log "Applying config/samples/sources (demo-src from file://${SOURCES}/demo.git)"
    sed "s|file:///var/lib/workbench/sources/|file://${SOURCES}/|" config/samples/sources/*.yaml |
      kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f -
  fi
  if [[ -f config/samples/kustomization.yaml ]]; then
    log "Applying config/samples (kustomization)"
    kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -k config/samples
  elif compgen -G 'config/samples/*.yaml' >/dev/null; then
    log "Applying config/samples"
    kubectl apply --server-side --field-manager="${FIELD_MANAGER}" -f config/samples
  fi
fi

# --- 9. What next -------------------------------------------------------------------------
cat <<EOF

Sensorium Workbench is running locally (state in ${STATE}, logs in ${LOGS}).
Next: the README's "First run" walks through the product in order (a command and its
output, a patch, consent, a wait, a microVM, a shared terminal view, a skill); every step
works as written (\`make test-first-run\` runs them). Or look around:

  export KUBECONFIG=${KUBECONFIG_FILE}
  export PATH=${K8S_BIN}:\$PATH
  kubectl get crd | grep workbench
  kubectl get environments,terminalsessions,terminalcommands,waits -A
  kubectl get terminalcommand git-status -o yaml    # outcome: phase, exitCode, outputDigest
  kubectl get consentrequests,workbenchnodes,backendcapabilities
  kubectl create -f - <<GRANT   # approve git-diff (it waits for consent)
apiVersion: workbench.sensorium.dev/v1alpha1
kind: ConsentGrant
metadata: {name: allow-git-diff, namespace: default}
spec: {requestRef: git-diff-consent, scope: remember-exact-argv}
GRANT
  kubectl patch filepatch add-note --type merge -p '{"spec":{"approval":"Approved"}}'   # apply the sample patch
  kubectl get workbench -A                  # every workbench kind (category)
  kubectl api-resources --api-group=subresources.workbench.sensorium.dev   # the streaming API
  kubectl get --raw /apis/subresources.workbench.sensorium.dev/v1alpha1/namespaces/default/terminalcommands/git-status/output
  kubectl auth can-i approve consentrequests --as=someone          # RBAC: no
  kubectl create clusterrolebinding alice-operator --clusterrole=workbench-operator --user=alice
  kubectl auth can-i approve consentrequests --as=alice           # RBAC: yes
  tail -f ${LOGS}/manager.log ${LOGS}/audit.log

Stop everything with: make down-local
EOF
if [[ "${VMS_ON}" == "1" ]]; then
  cat <<EOF
A microVM (qemu-microvm.v1) boots from bin/guest/ with a session and a command inside it:
  kubectl get environment vm-demo -w                      # Allocating -> Ready (seconds under TCG)
  kubectl get terminalcommand guest-kernel -o wide       # uname -r inside the guest: the guest's kernel
EOF
fi
if [[ "${HAVE_MANAGER}" != "1" ]]; then
  echo "(No manager is running: webhooks, samples and reconciliation are not active.)"
fi

if [[ "${FOREGROUND}" == "1" ]]; then
  trap - ERR
  trap 'echo; log "Stopping"; LOCAL_STATE_DIR="${STATE}" "${ROOT}/hack/local-down.sh"; exit 0' INT TERM
  log "Running in the foreground; Ctrl-C stops everything"
  pids=()
  for f in "${PIDS}"/*.pid; do pids+=("$(cut -d' ' -f1 "${f}")"); done
  # Returns as soon as any component exits (or on Ctrl-C through the trap above).
  wait -n "${pids[@]}" || true
  log "A component exited; stopping the rest (logs in ${LOGS})"
  LOCAL_STATE_DIR="${STATE}" "${ROOT}/hack/local-down.sh"
  exit 1
fi

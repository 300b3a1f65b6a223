#!/usr/bin/env bash
# Checks, against a running `make run-local`, what kube-controller-manager brings to the
# embedded default: garbage collection (a ConsentRequest-style dependent owned by an
# object disappears when its owner is deleted) and namespace deletion (a namespace holding
# workbench objects is deleted completely, not left Terminating). Exits non-zero on failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE="${LOCAL_STATE_DIR:-${ROOT}/.local}"
K8S_BIN="$("${ROOT}/hack/build-control-plane.sh" path)"
TIMEOUT="${CHECK_TIMEOUT:-60}"
kubectl() { "${K8S_BIN}/kubectl" --kubeconfig "${STATE}/kubeconfig" "$@"; }
log() { printf '[local-check] %s\n' "$*" >&2; }
ns="local-check-$$"

kubectl create namespace "${ns}" >/dev/null
kubectl -n "${ns}" create configmap owner >/dev/null
uid="$(kubectl -n "${ns}" get configmap owner -o jsonpath='{.metadata.uid}')"
kubectl -n "${ns}" apply -f - >/dev/null <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: ${uid}}
YAML
kubectl -n "${ns}" apply -f - >/dev/null <<'YAML'
apiVersion: workbench.sensorium.dev/v1alpha1
kind: CommandProfile
metadata: {name: echo}
spec:
  executable: /bin/echo
  allowedRoots: [repo]
  maxTimeoutSeconds: 10
  maxOutputBytes: 1024
YAML
kubectl -n "${ns}" delete configmap owner >/dev/null
deadline=$((SECONDS + TIMEOUT))
until ! kubectl -n "${ns}" get configmap dependent >/dev/null 2>&1; do
  ((SECONDS < deadline)) || { log "FAIL: garbage collection did not delete the dependent within ${TIMEOUT}s"; exit 1; }
  sleep 1
done
log "garbage collection: the dependent went with its owner"
if ! kubectl delete namespace "${ns}" --timeout="${TIMEOUT}s" >/dev/null; then
  log "FAIL: namespace ${ns} not deleted within ${TIMEOUT}s: $(kubectl get namespace "${ns}" -o jsonpath='{.status}' 2>&1)"
  exit 1
fi
log "namespace deletion: ${ns} is gone"

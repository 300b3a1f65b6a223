#!/usr/bin/env bash
# Builds kube-apiserver, kubectl and etcd from the Go module proxy into bin/k8s/<version>.
# The usual envtest binary download is unreachable on our machines; these are the same
# upstream sources, built locally and cached. Re-running is a no-op when the binaries exist.
#
#   all                 etcd, kube-apiserver, kubectl: what the tests need (make test)
#   controller-manager  kube-controller-manager (the embedded default, make run-local)
#   node                kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#                       (a real single-node cluster, make run-cluster and test/e2e)
#   path                print the directory only
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${ROOT}/bin/k8s/${K8S_VERSION}"
WORK="${ROOT}/bin/.build"
mkdir -p "${OUT}" "${WORK}"
# The throwaway modules live inside this repository's work tree: never stamp its VCS state.
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

build_etcd() {
  if [[ -x "${OUT}/etcd" ]]; then return; fi
  local dir="${WORK}/etcd-${ETCD_VERSION}"
  mkdir -p "${dir}"
  log "Building etcd v${ETCD_VERSION} in ${dir}"
  cat > "${dir}/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  (
    cd "${dir}"
    [[ -f go.mod ]] || go mod init workbench.local/etcd >/dev/null 2>&1
    go get "go.etcd.io/etcd/server/v3@v${ETCD_VERSION}"
    go mod tidy
    go build -ldflags "-s -w" -o "${OUT}/etcd.tmp" .
  )
  mv "${OUT}/etcd.tmp" "${OUT}/etcd"
}

build_k8s() {
  if [[ -x "${OUT}/kube-apiserver" && -x "${OUT}/kubectl" ]]; then return; fi
  local dir="${WORK}/k8s-${K8S_VERSION}"
  mkdir -p "${dir}/kube-apiserver" "${dir}/kubectl"
  log "Building kube-apiserver and kubectl v${K8S_VERSION} in ${dir}"
  cat > "${dir}/kube-apiserver/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() { os.Exit(cli.Run(app.NewAPIServerCommand())) }
GO
  cat > "${dir}/kubectl/main.go" <<'GO'
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
GO
  (
    cd "${dir}"
    if [[ ! -f go.mod ]]; then
      go mod init workbench.local/k8s >/dev/null 2>&1
      go mod edit -go=1.26
      go mod edit -require="k8s.io/kubernetes@v${K8S_VERSION}"
      # Every staging module k8s.io/kubernetes replaces with ./staging/... is replaced
      # here by its published version (v0.<minor>.<patch>).
      local gomod
      gomod="$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
      local staging="0.${K8S_VERSION#*.}"
      grep -E '^\s*k8s\.io/[^ ]+ => \./staging/' "${gomod}" | awk '{print $1}' | sort -u | while read -r m; do
        go mod edit -replace="${m}=${m}@v${staging}"
      done
    fi
    go mod tidy
    local ld="-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(echo "${K8S_VERSION}" | cut -d. -f2)"
    go build -ldflags "${ld}" -o "${OUT}/kube-apiserver.tmp" ./kube-apiserver
    mv "${OUT}/kube-apiserver.tmp" "${OUT}/kube-apiserver"
    go build -ldflags "${ld}" -o "${OUT}/kubectl.tmp" ./kubectl
    mv "${OUT}/kubectl.tmp" "${OUT}/kubectl"
  )
}

# --- Components beyond the test control plane ----------------------------------------------
# Each is a one-file main in its own folder of the same throwaway module as kube-apiserver
# (same requirements, so the build cache is shared), calling the command constructor of
# k8s.io/kubernetes/cmd/<name>/app exactly as upstream's own main does.
component_main() {
  case "$1" in
    kube-controller-manager) echo 'os.Exit(cli.Run(app.NewControllerManagerCommand()))' ;;
    kube-scheduler) echo 'os.Exit(cli.Run(app.NewSchedulerCommand()))' ;;
    kube-proxy) echo 'os.Exit(cli.Run(app.NewProxyCommand()))' ;;
    kubelet) echo 'os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))' ;;
    *) return 1 ;;
  esac
}

build_component() {
  local name="$1"
  if [[ -x "${OUT}/${name}" ]]; then return; fi
  # The module (go.mod with the staging replacements) is the one build_k8s prepares.
  build_k8s
  local dir="${WORK}/k8s-${K8S_VERSION}"
  mkdir -p "${dir}/${name}"
  log "Building ${name} v${K8S_VERSION} in ${dir}"
  local ctx=''
  [[ "${name}" == kubelet ]] && ctx='"context"'
  cat > "${dir}/${name}/main.go" <<GO
package main

import (
	${ctx}
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/${name}/app"
)

func main() { $(component_main "${name}") }
GO
  (
    cd "${dir}"
    go mod tidy
    local ld="-s -w -X k8s.io/component-base/version.gitVersion=v${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=${K8S_VERSION%%.*} -X k8s.io/component-base/version.gitMinor=$(echo "${K8S_VERSION}" | cut -d. -f2)"
    go build -ldflags "${ld}" -o "${OUT}/${name}.tmp" "./${name}"
  )
  mv "${OUT}/${name}.tmp" "${OUT}/${name}"
}

case "${1:-all}" in
  etcd) build_etcd ;;
  k8s) build_k8s ;;
  all) build_etcd; build_k8s ;;
  controller-manager) build_etcd; build_k8s; build_component kube-controller-manager ;;
  node)
    build_etcd; build_k8s
    for c in kube-controller-manager kube-scheduler kubelet kube-proxy; do build_component "${c}"; done
    ;;
  path) ;;
  *) echo "usage: $0 [all|etcd|k8s|controller-manager|node|path]" >&2; exit 2 ;;
esac
echo "${OUT}"

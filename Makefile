# Sensorium Workbench — build, test and local-run entry points (kubebuilder v4 layout).
#
# Every tool this Makefile needs is either the Go toolchain or built from the Go module
# proxy into ./bin with a pinned version: controller-gen (`go install`) and the test
# control plane (etcd, kube-apiserver, kubectl; hack/build-control-plane.sh).

# Image URL to use for the manager image.
IMG ?= controller:latest
# Image URL to use for the node agent image (the `node-agent` target of the Dockerfile).
NODE_AGENT_IMG ?= node-agent:latest
CONTAINER_TOOL ?= docker

# Extra flags for `go test` in `make test` (e.g. TEST_FLAGS=-race, TEST_FLAGS=-v).
# -race is off by default to keep CI within its time budget on two cores.
TEST_FLAGS ?=
# How long `make fuzz` runs each fuzz target.
FUZZTIME ?= 30s
# Extra flags for `make bench` (e.g. BENCH_FLAGS="-count=5 -benchtime=2s").
BENCH_FLAGS ?=

# Setting SHELL to bash allows bash commands to be executed by recipes.
# Options are set to exit when a recipe line exits non-zero or a piped command fails.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

# The help target prints all targets with their descriptions, grouped under their
# categories: `target: ## description` lines and `##@ Category` lines.
.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

# controller-gen fails on a path that does not exist, so only the folders that exist
# are passed (controllers/ and webhooks/ arrive with their first files).
empty :=
space := $(empty) $(empty)
MANIFEST_PATHS = $(subst $(space),;,$(strip $(foreach d,api controllers webhooks,$(if $(wildcard $(d)/*.go $(d)/*/*.go),./$(d)/...))))

.PHONY: manifests
manifests: controller-gen ## Generate CRDs (config/crd/bases), the manager ClusterRole (config/rbac/role.yaml) and webhook configurations (config/webhook/manifests.yaml).
	$(CONTROLLER_GEN) rbac:roleName=workbench-manager crd webhook paths="$(MANIFEST_PATHS)" \
		output:crd:artifacts:config=config/crd/bases \
		output:rbac:artifacts:config=config/rbac \
		output:webhook:artifacts:config=config/webhook

.PHONY: generate
generate: controller-gen ## Generate DeepCopy, DeepCopyInto and DeepCopyObject implementations.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/...;./internal/apiserver/..."

# Fingerprint of api/ and config/ relative to HEAD: tracked changes, untracked files and
# their contents. Comparing it before and after regeneration tells whether regeneration
# changed anything, also in a work tree that has uncommitted edits.
GEN_FINGERPRINT = { git status --porcelain --untracked-files=all -- api config; git diff -- api config; git ls-files -z --others --exclude-standard -- api config | xargs -0 -r sha256sum; } | sha256sum

.PHONY: lint
lint: golangci-lint lint-api darwin-check ## Run golangci-lint (.golangci.yml), kube-api-linter over api/ (lint-api) and the darwin type-check (darwin-check). CI (.ci/run) runs it first: it must report 0 issues.
	$(GOLANGCI_LINT) run ./...

# The darwin/arm64 code (vfkit-system.v1 on github.com/Code-Hex/vz/v3, and the node agent
# that runs it on a Mac) neither builds nor vets on Linux (cgo, the macOS SDK):
# hack/darwincheck type-checks it and everything of this module it imports against the real
# vz module, with go/types and a fake "C"; a pure-Go dependency that does not type-check for
# darwin (it would not build there) fails it too.
DARWIN_PACKAGES ?= ./internal/backends/vfkitsystem/... ./cmd/vfkit-smoke ./cmd/node-agent

.PHONY: darwin-check
darwin-check: ## Type-check the darwin/arm64 packages (DARWIN_PACKAGES) against the real vz module; any type error in this module's code fails.
	go run ./hack/darwincheck $(DARWIN_PACKAGES)

.PHONY: lint-api
lint-api: kube-api-linter ## Run kube-api-linter (sigs.k8s.io/kube-api-linter, .golangci-kal.yml) over api/.
	$(KUBE_API_LINTER) run --allow-parallel-runners -c .golangci-kal.yml ./api/...

.PHONY: vocabulary
vocabulary: ## Regenerate docs/vocabulary.md's refusal-code section from internal/actuation (a test fails when it is stale).
	go generate ./internal/actuation

.PHONY: verify-generated
verify-generated: ## Regenerate code and manifests; fail if that changes anything under api/ or config/.
	@if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
		echo "verify-generated: not a git work tree; cannot tell whether generated files are current" >&2; exit 1; \
	fi
	@before="$$($(GEN_FINGERPRINT))"; \
	$(MAKE) --no-print-directory generate manifests; \
	after="$$($(GEN_FINGERPRINT))"; \
	if [[ "$$before" != "$$after" ]]; then \
		echo "" >&2; \
		echo "ERROR: generated files were out of date: 'make generate manifests' changed files under api/ or config/." >&2; \
		echo "Never edit generated files by hand; regenerate and commit the result. Now changed relative to HEAD:" >&2; \
		git status --porcelain --untracked-files=all -- api config >&2; \
		exit 1; \
	fi; \
	if [[ "$${CI:-}" == "true" && -n "$$(git status --porcelain --untracked-files=all -- api config)" ]]; then \
		echo "ERROR: api/ or config/ differ from the committed tree in CI:" >&2; \
		git status --porcelain --untracked-files=all -- api config >&2; \
		exit 1; \
	fi; \
	echo "verify-generated: generated code and manifests are current"

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

##@ Test

.PHONY: control-plane
control-plane: ## Build etcd, kube-apiserver and kubectl from the Go module proxy into bin/k8s/ (cached; ~10 min the first time).
	hack/build-control-plane.sh all

.PHONY: node-components
node-components: ## Build kube-controller-manager, kube-scheduler, kubelet and kube-proxy from the Go module proxy into bin/k8s/ (cached; for run-cluster and test-e2e).
	hack/build-control-plane.sh node

# `make test` streams `go test -json` through hack/testsummary: every failing test's output,
# every test still running when its package died (a -timeout panic names it), every
# skipped test with its reason, a run/pass/fail/skip table per package, and a failure when
# a suite listed in test/required-suites.txt ran no test or skipped one. The per-package
# timeout is 45m: test/nodeagent boots real guests under TCG after its other tests (about
# 12 + 8 minutes on a fresh two-core machine). Its VM tests stay in that one process, after
# the package's compile and most other suites are done: started beside them (a trial in a
# second process) their guests missed the 60 s boot deadline under the contention.
.PHONY: test
test: control-plane verify-generated vet ## Run all tests against a real API server; print skips and per-package counts; fail if a required suite skipped.
	@go build -o bin/testsummary ./hack/testsummary
	KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh path)" go test -json ./... -count=1 -timeout 45m $(TEST_FLAGS) \
		| bin/testsummary -require test/required-suites.txt

.PHONY: chaos
chaos: control-plane ## Kill the node agent with SIGKILL at 100 seeded random points of a mixed workload (CI runs 5 in make test); WB_CHAOS_SEED replays.
	KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh path)" WB_CHAOS_KILLS=$${WB_CHAOS_KILLS:-100} \
		go test ./test/nodeagent/ -run '^TestChaosKills$$' -count=1 -v -timeout 60m

.PHONY: load
load: control-plane ## Full-size load (200 sessions, 10,000 commands on one agent created at 7/s, p50/p99 per step; WB_LOAD_SESSIONS/WB_LOAD_COMMANDS/WB_LOAD_RATE override, WB_LOAD_RATE=0 a burst), a longer soak (WB_SOAK_ROUNDS, default 20), then the control-plane simulation of docs/scale.md (WB_SIM_NODES simulated nodes, default 100, × WB_SIM_COMMANDS, default 50); CI runs the first two CI-sized in make test.
	KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh path)" WB_LOAD_SESSIONS=$${WB_LOAD_SESSIONS:-200} WB_LOAD_COMMANDS=$${WB_LOAD_COMMANDS:-10000} WB_LOAD_RATE=$${WB_LOAD_RATE:-7} \
		WB_SOAK_ROUNDS=$${WB_SOAK_ROUNDS:-20} go test ./test/nodeagent/ -run '^(TestLoad|TestSoakFootprintFlat)$$' -count=1 -v -timeout 120m
	KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh path)" WB_SIM_NODES=$${WB_SIM_NODES:-100} WB_SIM_COMMANDS=$${WB_SIM_COMMANDS:-50} \
		go test ./test/bench/scale/ -run '^TestScaleSimulation$$' -count=1 -v -timeout 60m

.PHONY: fuzz
fuzz: control-plane ## Run every Go fuzz target for FUZZTIME (default 30s) each.
	@export KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh path)"; \
	pkgs="$$(grep -rlE --include='*_test.go' '^func Fuzz[A-Z0-9_]' . 2>/dev/null | grep -v -e '^./bin/' -e '^./.local/' | xargs -r -n1 dirname | sort -u)"; \
	if [[ -z "$$pkgs" ]]; then echo "fuzz: no fuzz targets found"; exit 0; fi; \
	n=0; \
	for pkg in $$pkgs; do \
		for target in $$(go test -list '^Fuzz' "$$pkg" | grep -E '^Fuzz'); do \
			echo "==> $$pkg $$target ($(FUZZTIME))"; \
			go test -run '^$$' -fuzz "^$${target}\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
			n=$$((n+1)); \
		done; \
	done; \
	echo "fuzz: $$n targets ran for $(FUZZTIME) each"

.PHONY: bench
bench: control-plane ## Run the benchmarks (packages with Benchmark functions plus ./test/bench); output in test/bench/out/.
	@export KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh path)"; \
	pkgs="$$(grep -rlE --include='*_test.go' '^func Benchmark[A-Z0-9_]' . 2>/dev/null | grep -v -e '^./bin/' -e '^./.local/' | xargs -r -n1 dirname | sort -u)"; \
	if [[ -d test/bench ]]; then pkgs="$$(printf '%s\n' $$pkgs ./test/bench/... | sort -u)"; fi; \
	if [[ -z "$$pkgs" ]]; then echo "bench: no benchmarks found"; exit 0; fi; \
	mkdir -p test/bench/out; \
	out="test/bench/out/bench-$$(date -u +%Y%m%dT%H%M%SZ).txt"; \
	{ echo "# $$(go version) $$(uname -srm) nproc=$$(nproc)"; \
	  go test -run '^$$' -bench . -benchmem $(BENCH_FLAGS) $$pkgs; } 2>&1 | tee "$$out"; \
	cp "$$out" test/bench/out/latest.txt; \
	echo "bench: results in $$out (and test/bench/out/latest.txt)"

.PHONY: test-first-run
test-first-run: control-plane ## Run the README's "First run" block as written against a fresh `make run-local` (root).
	hack/first-run-check.sh

# Each benchmark once, briefly, so none of them rots unnoticed; figures from this run mean
# nothing (use `make bench`). Run by .ci/run.
.PHONY: bench-smoke
bench-smoke: control-plane ## Run every benchmark once (-benchtime=1x) to prove they compile and run.
	@export KUBEBUILDER_ASSETS="$$(hack/build-control-plane.sh path)"; \
	pkgs="$$(grep -rlE --include='*_test.go' '^func Benchmark[A-Z0-9_]' . 2>/dev/null | grep -v -e '^./bin/' -e '^./.local/' | xargs -r -n1 dirname | sort -u)"; \
	if [[ -z "$$pkgs" ]]; then echo "bench-smoke: no benchmarks found" >&2; exit 1; fi; \
	go test -run '^$$' -bench . -benchtime=1x -count=1 -timeout 20m $$pkgs 2>&1 | tee /tmp/bench-smoke.$$$$.log; \
	n="$$(grep -cE '^Benchmark' /tmp/bench-smoke.$$$$.log || true)"; rm -f /tmp/bench-smoke.$$$$.log; \
	echo "bench-smoke: $$n benchmark results"; \
	if [[ "$$n" -eq 0 ]]; then echo "bench-smoke: no benchmark ran" >&2; exit 1; fi

.PHONY: test-e2e
test-e2e: ## Run test/e2e on a real single-node cluster of this machine (hack/run-cluster.sh; root); E2E_PROVIDER=existing uses E2E_KUBECONFIG.
	@if [[ "$${E2E_PROVIDER:-local}" == "local" ]]; then hack/build-control-plane.sh node >/dev/null; fi
	go test -tags e2e ./test/e2e/... -count=1 -v -timeout 60m

##@ Build

.PHONY: build
build: ## Build the binaries under cmd/ (manager, node-agent, kubectl-workbench) into bin/.
	@if ! ls cmd/*/main.go >/dev/null 2>&1; then echo "build: no cmd/*/main.go yet"; exit 0; fi; \
	go build -o bin/ ./cmd/...

# Where `make images` writes the image tarballs, and their tag.
IMAGES_DIR ?= bin/images
IMAGE_TAG ?= latest

.PHONY: images
images: ## Build the image tarballs without Docker (hack/images, go-containerregistry): manager (controller:TAG), node-agent, workbench-pause into IMAGES_DIR.
	go run ./hack/images -out $(IMAGES_DIR) -tag $(IMAGE_TAG)

.PHONY: docker-build
docker-build: ## Build the manager image IMG and the node agent image NODE_AGENT_IMG (needs Docker; not available on the dev/CI machines).
	$(CONTAINER_TOOL) build -t $(IMG) .
	@if [[ -f cmd/node-agent/main.go ]]; then \
		echo "$(CONTAINER_TOOL) build --target node-agent -t $(NODE_AGENT_IMG) ."; \
		$(CONTAINER_TOOL) build --target node-agent -t $(NODE_AGENT_IMG) .; \
	else echo "docker-build: no cmd/node-agent yet; node agent image skipped"; fi

.PHONY: docker-push
docker-push: ## Push the manager and node agent images (needs Docker).
	$(CONTAINER_TOOL) push $(IMG)
	@if [[ -f cmd/node-agent/main.go ]]; then $(CONTAINER_TOOL) push $(NODE_AGENT_IMG); fi

##@ Local run

.PHONY: run-local
run-local: ## Start the embedded default on loopback: etcd + kube-apiserver + CRDs/RBAC/webhooks + manager, samples applied (hack/local-up.sh).
	hack/local-up.sh

.PHONY: run-cluster
run-cluster: ## Bring up a real single-node cluster here (etcd, apiserver, controller-manager, scheduler, containerd 2.1, kubelet, kube-proxy), install config/default from the image tarballs, apply the samples (hack/run-cluster.sh; root).
	hack/run-cluster.sh

.PHONY: down-cluster
down-cluster: ## Stop run-cluster and remove everything it made: processes, mounts, interfaces, iptables chains, cgroups (hack/down-cluster.sh).
	hack/down-cluster.sh

.PHONY: check-local
check-local: ## Against a running run-local: garbage collection and namespace deletion work (hack/local-check.sh).
	hack/local-check.sh

.PHONY: down-local
down-local: ## Stop everything `make run-local` started (hack/local-down.sh).
	hack/local-down.sh

##@ Deployment

.PHONY: render
render: ## Render config/default to stdout (pipeable) with the kustomize built into the kubectl of `make control-plane`.
	@hack/build-control-plane.sh k8s >/dev/null
	@"$$(hack/build-control-plane.sh path)/kubectl" kustomize config/default

##@ Dependencies

## Location to install dependencies to
LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p $(LOCALBIN)

## Tool binaries and versions
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
CONTROLLER_TOOLS_VERSION ?= v0.23.0

.PHONY: controller-gen
controller-gen: $(LOCALBIN) ## Install controller-gen (pinned CONTROLLER_TOOLS_VERSION, v0.23.0) into bin/ if missing or of another version.
	@if ! "$(CONTROLLER_GEN)" --version 2>/dev/null | grep -qx "Version: $(CONTROLLER_TOOLS_VERSION)"; then \
		echo "Installing controller-gen $(CONTROLLER_TOOLS_VERSION) into $(LOCALBIN)"; \
		GOBIN="$(LOCALBIN)" go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION); \
	fi

GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint
GOLANGCI_LINT_VERSION ?= v2.15.0

.PHONY: golangci-lint
golangci-lint: $(LOCALBIN) ## Install golangci-lint (pinned GOLANGCI_LINT_VERSION, v2.15.0) into bin/ if missing or of another version.
	@if ! "$(GOLANGCI_LINT)" version --short 2>/dev/null | grep -qx "$(GOLANGCI_LINT_VERSION:v%=%)"; then \
		echo "Installing golangci-lint $(GOLANGCI_LINT_VERSION) into $(LOCALBIN)"; \
		GOBIN="$(LOCALBIN)" go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); \
	fi

# kube-api-linter has no releases: the module proxy serves pseudo-versions only. Its
# standalone binary is golangci-lint with the linter compiled in; the version is in the
# file name so that a bump installs afresh.
KUBE_API_LINTER_VERSION ?= v0.0.0-20260716143926-092fe0c72997
KUBE_API_LINTER ?= $(LOCALBIN)/golangci-lint-kube-api-linter-$(KUBE_API_LINTER_VERSION)

.PHONY: kube-api-linter
kube-api-linter: $(LOCALBIN) ## Install kube-api-linter's golangci-lint build (pinned KUBE_API_LINTER_VERSION) into bin/ if missing.
	@if [[ ! -x "$(KUBE_API_LINTER)" ]]; then \
		echo "Installing kube-api-linter $(KUBE_API_LINTER_VERSION) into $(LOCALBIN)"; \
		tmp="$$(mktemp -d)"; \
		GOBIN="$$tmp" go install sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter@$(KUBE_API_LINTER_VERSION); \
		mv "$$tmp/golangci-lint-kube-api-linter" "$(KUBE_API_LINTER)"; \
		rmdir "$$tmp"; \
	fi

##@ Guest image

.PHONY: guest-image
guest-image: ## Build the qemu-microvm.v1 guest images: minimal into bin/guest/ (hack/guest-image/build.sh, config/samples/07_imagemanifest.yaml) and full-system into bin/guest-system/ (hack/guest-image/build-system.sh: mmdebstrap, cached; config/samples/08_imagemanifest-system.yaml).
	hack/guest-image/build.sh
	hack/guest-image/build-system.sh

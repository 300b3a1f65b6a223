# Images for Sensorium Workbench. Docker is not available on the project's development and
# CI machines, so this file is not built there; `make docker-build` builds both images:
#   docker build -t controller:latest .                     # the manager (default target)
#   docker build --target node-agent -t node-agent:latest . # the node agent

# Sources and modules, shared by the build stages below.
FROM golang:1.26 AS builder

WORKDIR /workspace
# Copy the Go module manifests and download the modules first, so that this layer is
# cached and rebuilt only when the dependencies change.
COPY go.mod go.mod
COPY go.sum go.sum
RUN go mod download

# Copy the Go sources (.dockerignore keeps bin/, .local/ and test output out).
COPY . .

# One build stage per binary, so that (with BuildKit) each image builds only its own.
# CGO_ENABLED=0: static binaries for distroless. GOARCH has no default so that the image
# is built for the platform of the host (or the one given with --platform).
FROM builder AS build-manager
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/manager ./cmd/manager

FROM builder AS build-node-agent
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/node-agent ./cmd/node-agent \
 && CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/workbench-sandbox ./cmd/workbench-sandbox

# The node agent (DaemonSet). It runs as root, privileged: it creates PTYs, process groups
# and network namespaces, applies Landlock and cgroup limits, and launches VMMs with
# /dev/kvm and vhost devices on its node. The VM backend adds the VMM and vsock device
# binaries to this image when it lands.
FROM gcr.io/distroless/static:latest AS node-agent
WORKDIR /
COPY --from=build-node-agent /out/node-agent /node-agent
# The sandbox helper next to the agent: every structured command starts through it.
COPY --from=build-node-agent /out/workbench-sandbox /workbench-sandbox
USER 0:0
ENTRYPOINT ["/node-agent"]

FROM builder AS build-apiserver
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/workbench-apiserver ./cmd/workbench-apiserver

# workbench-apiserver: the aggregated subresource API (config/apiserver), nonroot.
FROM gcr.io/distroless/static:nonroot AS apiserver
COPY --from=build-apiserver /out/workbench-apiserver /workbench-apiserver
USER 65532:65532
ENTRYPOINT ["/workbench-apiserver"]

# The MCP server over streamable HTTP (config/mcp): no privilege of its own, every tool call
# runs with the caller's bearer token.
FROM builder AS build-workbench-mcp
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/workbench-mcp ./cmd/workbench-mcp

FROM gcr.io/distroless/static:nonroot AS workbench-mcp
WORKDIR /
COPY --from=build-workbench-mcp /out/workbench-mcp /workbench-mcp
USER 65532:65532
ENTRYPOINT ["/workbench-mcp"]

# The manager (Deployment): no host access, runs as an unprivileged user.
# This is the last stage, so a plain `docker build` produces it.
FROM gcr.io/distroless/static:nonroot AS manager
WORKDIR /
COPY --from=build-manager /out/manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]

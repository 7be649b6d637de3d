# syntax=docker/dockerfile:1
# itlproxy's image: a static binary on distroless, run as a non-root user,
# configured from the environment only.
#
#   docker build \
#     --build-arg VERSION="$(git describe --tags --always --dirty)" \
#     --build-arg REVISION="$(git rev-parse HEAD)" \
#     -t itlproxy:dev .
#
# deploy/image's TestDockerfileBuild runs the build stage's `go build` below
# as written, in the context .dockerignore leaves: keep it one simple command.

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Stamped into `itlproxy version` and the itlproxy_build_info metric.
ARG VERSION=dev
ARG REVISION=unknown
# Set by BuildKit for each platform of the build (docker buildx build
# --platform linux/amd64,linux/arm64); empty means the builder's own.
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags="-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
      -o /out/itlproxy ./cmd/itlproxy

# No shell, no package manager: the binary, CA certificates (for an https
# upstream), /etc/passwd with the nonroot user, and tzdata.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/itlproxy /usr/local/bin/itlproxy
# The distroless "nonroot" user; Kubernetes' runAsNonRoot needs it numeric.
USER 65532:65532
# The proxy (ITLPROXY_LISTEN_ADDR) and admin (ITLPROXY_ADMIN_ADDR) ports.
EXPOSE 8080 9090
ENTRYPOINT ["/usr/local/bin/itlproxy"]

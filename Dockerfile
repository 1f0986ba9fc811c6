# Multi-stage build of the coordinator image.
#
#   docker build -t rsc-coordinator:local .
#
# Where no image registry is reachable (no golang or distroless image to pull),
# docker/build-image.sh builds the same image from binaries compiled on the host.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static binaries (no cgo): they run on an image without libc. cmd/demo, being
# written separately, is included once it is a Go package.
RUN set -eu; \
    pkgs="./cmd/coordinator ./cmd/replay"; \
    if go list ./cmd/demo >/dev/null 2>&1; then pkgs="$pkgs ./cmd/demo"; fi; \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ $pkgs

# distroless/static: CA certificates, /etc/passwd with nonroot (65532), no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /
USER 65532:65532
# The coordinator listens on 127.0.0.1 by default, which nothing outside the
# container reaches: the image listens on every interface (RSC_LISTEN, the
# environment twin of --listen, so a command that gives other flags keeps it).
# On such an address the coordinator refuses the default admin password: run
# the image with RSC_ADMIN_PASSWORD (or --users-file), or, for a throwaway
# setup, RSC_INSECURE_DEFAULT_CREDENTIALS=true.
ENV RSC_LISTEN=:8080
EXPOSE 8080
ENTRYPOINT ["/coordinator"]

#!/usr/bin/env bash
# docker/build-image.sh — builds the coordinator image without pulling anything.
#
# The Dockerfile needs the golang and distroless images from a registry. Where
# none is reachable, this script makes the same image from the host: it compiles
# static binaries (CGO_ENABLED=0) of cmd/coordinator, cmd/replay and, when it
# exists, cmd/demo, lays them in a tiny root file system with an /etc/passwd entry
# for uid 65532 and the host's CA bundle (for rediss://), and `docker import`s it.
# Like the Dockerfile's, the image listens on :8080 (RSC_LISTEN), where the
# coordinator refuses the default admin password unless RSC_ADMIN_PASSWORD (or
# RSC_INSECURE_DEFAULT_CREDENTIALS=true) is given.
#
#   bash docker/build-image.sh            # tags rsc-coordinator:local
#   RSC_COORDINATOR_IMAGE=name:tag bash docker/build-image.sh
#
# Needs go (PATH or /usr/local/go/bin) and a running docker daemon.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${RSC_COORDINATOR_IMAGE:-rsc-coordinator:local}"
if ! command -v go >/dev/null 2>&1; then
  export PATH="/usr/local/go/bin:$PATH"
fi

log() { echo "build-image: $*" >&2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp"

pkgs=(./cmd/coordinator ./cmd/replay)
# cmd/demo is written separately: included once it is a Go package.
if go list ./cmd/demo >/dev/null 2>&1; then
  pkgs+=(./cmd/demo)
fi
log "building ${pkgs[*]}"
CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags='-s -w' -o "$root/" "${pkgs[@]}"

# The same user as distroless's nonroot; a file system without shell or libc.
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
else
  log "no /etc/ssl/certs/ca-certificates.crt on this host: the image cannot verify rediss:// servers"
fi

tar -C "$root" --owner=0 --group=0 --numeric-owner -cf "$work/rootfs.tar" .

revision="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
old="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
new="$(docker import \
  --change 'USER 65532' \
  --change 'ENV RSC_LISTEN=:8080' \
  --change 'ENTRYPOINT ["/coordinator"]' \
  --change 'EXPOSE 8080' \
  --change 'WORKDIR /' \
  --change "LABEL org.opencontainers.image.revision=$revision" \
  --message "rsc coordinator ($revision) built by docker/build-image.sh" \
  "$work/rootfs.tar" "$IMAGE")"
# Drop the image this one replaced, unless a container still uses it.
if [ -n "$old" ] && [ "$old" != "$new" ]; then
  docker image rm "$old" >/dev/null 2>&1 || true
fi
log "tagged $IMAGE ($(du -h "$work/rootfs.tar" | cut -f1), revision $revision)"

#!/usr/bin/env bash
# .ci/setup.sh — installs and starts what the test suite needs, idempotently:
#   * redis-server (for redistest.StartProcess and redis-cli), redis-sentinel
#     (redistest.StartSentinel),
#   * debootstrap (.ci/engines.sh builds the engine matrix's images with it),
#   * docker.io and a running dockerd (for testcontainers-based tests),
#   * a local Redis image ${RSC_REDIS_IMAGE:-rsc-redis:7}, built from the
#     machine's own redis-server and redis-cli because no image registry is
#     reachable (an older one without redis-cli is rebuilt).
# Safe to run many times; every step is skipped when already done.
set -euo pipefail

IMAGE="${RSC_REDIS_IMAGE:-rsc-redis:7}"
DOCKER_WAIT_SECONDS="${RSC_DOCKER_WAIT_SECONDS:-60}"
APT_LOCK_WAIT_SECONDS="${RSC_APT_LOCK_WAIT_SECONDS:-600}"

log() { echo "setup: $*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

# wait_for_apt waits (bounded) while another apt/dpkg run holds the locks.
wait_for_apt() {
  local waited=0
  while pgrep -x apt-get >/dev/null 2>&1 || pgrep -x apt >/dev/null 2>&1 || pgrep -x dpkg >/dev/null 2>&1; do
    if [ "$waited" -ge "$APT_LOCK_WAIT_SECONDS" ]; then
      log "another apt/dpkg is still running after ${APT_LOCK_WAIT_SECONDS}s; trying anyway"
      return 0
    fi
    if [ $((waited % 15)) -eq 0 ]; then
      log "waiting for another apt/dpkg run to finish..."
    fi
    sleep 1
    waited=$((waited + 1))
  done
}

apt_install() {
  log "installing with apt: $*"
  export DEBIAN_FRONTEND=noninteractive
  wait_for_apt
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q
  wait_for_apt
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q "$@"
}

# --- 1. packages -------------------------------------------------------------
missing=()
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  missing+=(redis-server redis-tools)
fi
if ! command -v redis-sentinel >/dev/null 2>&1; then
  missing+=(redis-sentinel)
fi
# curl runs the README's walk-through (TestIntegrationReadmeWalkthrough).
if ! command -v curl >/dev/null 2>&1; then
  missing+=(curl)
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  missing+=(debootstrap)
fi
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
  missing+=(docker.io)
fi
# Compose for the compose stack test (Debian ships the v1 tool, not the plugin).
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  missing+=(docker-compose)
fi
# Headless Chromium for the web console's browser test.
if ! command -v chromium >/dev/null 2>&1; then
  missing+=(chromium)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  apt_install "${missing[@]}"
else
  log "redis-server and docker already installed"
fi

# The Debian package starts a system redis on 6379 when systemd runs; tests
# never use it (they pick their own ports), so it is left alone.

# --- 2. docker daemon --------------------------------------------------------
# live_proc PID NAME: true when PID is a running (not zombie) process NAME.
live_proc() {
  local pid="$1" name="$2" state comm
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  [ "$state" != "Z" ] && [ "$comm" = "$name" ]
}

# any_live_dockerd prints the pid of a running dockerd, if there is one.
any_live_dockerd() {
  local pid
  for pid in $(pgrep -x dockerd 2>/dev/null || true); do
    if live_proc "$pid" dockerd; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# remove_stale_pidfile FILE NAME: a daemon killed hard leaves its pid file
# behind, and the next one refuses to start (dockerd), or waits for a dead
# one (containerd, whose pid may also linger as a zombie for a while).
remove_stale_pidfile() {
  local file="$1" name="$2" pid
  [ -f "$file" ] || return 0
  pid="$(cat "$file" 2>/dev/null || true)"
  if ! live_proc "$pid" "$name"; then
    log "removing stale $file (pid '${pid}' is not a running $name)"
    $SUDO rm -f "$file"
  fi
}

start_dockerd() {
  remove_stale_pidfile /var/run/docker.pid dockerd
  remove_stale_pidfile /var/run/docker/containerd/containerd.pid containerd
  log "starting dockerd in the background (log: /tmp/dockerd.log)"
  # setsid + nohup: the daemon must outlive this script and make's shell.
  $SUDO setsid nohup dockerd >>/tmp/dockerd.log 2>&1 </dev/null &
}

if docker info >/dev/null 2>&1; then
  log "docker daemon already running"
else
  dpid="$(any_live_dockerd || true)"
  if [ -n "$dpid" ]; then
    log "dockerd (pid $dpid) is running but not answering yet"
  else
    start_dockerd
  fi
  log "waiting up to ${DOCKER_WAIT_SECONDS}s for the docker daemon"
  deadline=$((SECONDS + DOCKER_WAIT_SECONDS))
  starts=1
  until docker info >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "docker daemon did not come up within ${DOCKER_WAIT_SECONDS}s; last lines of /tmp/dockerd.log:"
      tail -n 30 /tmp/dockerd.log >&2 || true
      exit 1
    fi
    if ! any_live_dockerd >/dev/null; then
      if [ "$starts" -ge 3 ]; then
        log "dockerd exited $starts times; last lines of /tmp/dockerd.log:"
        tail -n 30 /tmp/dockerd.log >&2 || true
        exit 1
      fi
      log "dockerd exited; starting it again"
      sleep 2
      start_dockerd
      starts=$((starts + 1))
    fi
    sleep 1
  done
  log "docker daemon is up"
fi

# --- 3. local redis image ----------------------------------------------------
# The image holds redis-server, redis-cli (docker-compose.ha.yml's init service
# runs `redis-cli --cluster create`) and a /bin/sh with sleep for that
# service's script, each with its shared libraries. An image built by an older
# version of this script (redis-server only) is rebuilt.
image_complete() {
  docker run --rm --entrypoint redis-cli "$IMAGE" --version >/dev/null 2>&1 &&
    docker run --rm --entrypoint sh "$IMAGE" -c 'sleep 0' >/dev/null 2>&1
}

if docker image inspect "$IMAGE" >/dev/null 2>&1 && image_complete; then
  log "image $IMAGE already present"
else
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "image $IMAGE lacks redis-cli or sh (built by an older setup.sh): rebuilding it"
  fi
  log "building image $IMAGE from $(command -v redis-server) and $(command -v redis-cli)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  root="$work/rootfs"
  mkdir -p "$root/usr/bin" "$root/bin" "$root/data" "$root/tmp" "$root/etc"
  chmod 1777 "$root/tmp"
  # add_binary SRC DEST: copies the program SRC to DEST in the image, with every
  # shared library it needs and the dynamic loader, at the same paths as on the
  # host.
  add_binary() {
    local bin lib
    bin="$(readlink -f "$1")"
    cp "$bin" "$root$2"
    ldd "$bin" | grep -oE '/[^ ]+' | sort -u | while read -r lib; do
      [ -e "$lib" ] || continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  }
  add_binary "$(command -v redis-server)" /usr/bin/redis-server
  add_binary "$(command -v redis-cli)" /usr/bin/redis-cli
  add_binary /bin/sh /bin/sh
  add_binary "$(command -v sleep)" /bin/sleep
  # Redis and getaddrinfo are happier with these present.
  printf 'root:x:0:0:root:/root:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
  printf '127.0.0.1 localhost\n::1 localhost\n' >"$root/etc/hosts"
  printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
  tar -C "$root" -cf "$work/rootfs.tar" .
  old="$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)"
  docker import \
    --change 'ENTRYPOINT ["redis-server","--protected-mode","no"]' \
    --change 'ENV PATH=/usr/bin:/bin' \
    --change 'EXPOSE 6379' \
    --change 'WORKDIR /data' \
    --message "redis-server $(redis-server --version | awk '{print $3}') and redis-cli from the host, for rsc tests" \
    "$work/rootfs.tar" "$IMAGE" >/dev/null
  # Drop the image this one replaced, unless a container still uses it.
  if [ -n "$old" ]; then
    docker image rm "$old" >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  trap - EXIT
  if ! image_complete; then
    log "built image $IMAGE but it cannot run redis-cli or sh"
    exit 1
  fi
  log "built image $IMAGE"
fi

log "done"

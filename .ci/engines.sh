#!/usr/bin/env bash
# .ci/engines.sh — the Redis engines of the engine matrix (make test-engines),
# built once and cached.
#
#   engines.sh build [ENGINE...]  build what is missing (default: every engine)
#   engines.sh env ENGINE         print the exports that select ENGINE for go test
#   engines.sh version ENGINE     print the engine's server version
#   engines.sh list               print the engine names
#
# Engines:
#   redis7   Redis 7.0 of this machine (Debian 12): image rsc-redis:7, built by
#            .ci/setup.sh from the host's redis-server; processes run the host's.
#   redis8   Redis 8.0 of Debian 13 (trixie):   image rsc-redis:8
#   valkey8  Valkey 8.1 of Debian 13 (trixie):  image rsc-valkey:8
#   valkey9  Valkey 9.1 of Debian unstable (sid): image rsc-valkey:9
#   redis86  Redis 8.6 of Debian experimental:  image rsc-redis:86 (sid, then
#            redis-server from the experimental suite; the first engine with
#            XADD IDMP, the native idempotent append)
#
# No image registry is reachable, but Debian's archive is (apt): each image is
# a root file system that debootstrap --variant=minbase builds with the
# engine's Debian package from the machine's configured mirror, imported with
# docker import. Tests that start redis-server processes (internal/redistest)
# run the same binaries from that root on the host, through its own dynamic
# loader and libraries (no chroot, so data directories and ports are the
# host's): the image is exported once to $RSC_ENGINE_CACHE/<engine>/root, next
# to wrapper scripts redis-server, redis-cli and redis-sentinel in
# $RSC_ENGINE_CACHE/<engine>/bin. Both are rebuilt only when missing (the
# runner also when the image it was made from changed).
set -euo pipefail

CACHE="${RSC_ENGINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rsc-engines}"
ENGINES=(redis7 redis8 valkey8 valkey9 redis86)

log() { echo "engines: $*" >&2; }
die() { echo "engines: $*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

# spec ENGINE sets: image, suite, package, server, cli, want (expected
# major.minor of the server; another minor is a warning, another major an error)
# and extra: a suite the package is installed from with apt after debootstrap
# (apt-get install -t extra), for a package only Debian's experimental carries.
spec() {
  extra=""
  case "$1" in
    redis7) image=rsc-redis:7 suite="" package="" server=redis-server cli=redis-cli want=7.0 ;;
    redis8) image=rsc-redis:8 suite=trixie package=redis-server server=redis-server cli=redis-cli want=8.0 ;;
    valkey8) image=rsc-valkey:8 suite=trixie package=valkey-server server=valkey-server cli=valkey-cli want=8.1 ;;
    valkey9) image=rsc-valkey:9 suite=sid package=valkey-server server=valkey-server cli=valkey-cli want=9.1 ;;
    redis86) image=rsc-redis:86 suite=sid extra=experimental package=redis-server server=redis-server cli=redis-cli want=8.6 ;;
    *) die "unknown engine '$1' (engines: ${ENGINES[*]})" ;;
  esac
}

# mirror is the Debian mirror apt uses on this machine (the first URIs: line
# of a deb822 source, or the first deb line), deb.debian.org otherwise.
mirror() {
  local m=""
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    m="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
  fi
  if [ -z "$m" ] && [ -r /etc/apt/sources.list ]; then
    m="$(awk '$1 == "deb" && $2 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)"
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

# version_of BINARY... prints "x.y.z" from `server --version`.
version_of() {
  "$@" --version | grep -oE 'v=[0-9]+\.[0-9]+\.[0-9]+' | head -n1 | cut -d= -f2
}

check_version() { # ENGINE VERSION
  local engine="$1" got="$2"
  [ -n "$got" ] || die "$engine: cannot read the server's version"
  if [ "${got%%.*}" != "${want%%.*}" ]; then
    die "$engine: the server is $got, expected $want.x (has the Debian suite '$suite' moved on? update .ci/engines.sh)"
  fi
  case "$got" in
    "$want".*) ;;
    *) log "$engine: the server is $got, expected $want.x: the matrix runs it anyway" ;;
  esac
}

ensure_debootstrap() {
  command -v debootstrap >/dev/null 2>&1 && return 0
  log "installing debootstrap with apt"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap ||
    { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -q &&
      $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q debootstrap; }
}

# build_image ENGINE: debootstrap the engine's suite with its package, slim it
# and docker import it (ENTRYPOINT the server, protected mode off, as
# .ci/setup.sh's rsc-redis:7).
build_image() {
  local engine="$1" work root m started
  ensure_debootstrap
  m="$(mirror)"
  work="$(mktemp -d /tmp/rsc-engine-"$engine".XXXXXX)"
  root="$work/root"
  started=$SECONDS
  local include=(--include="$package")
  [ -z "$extra" ] || include=()
  log "$engine: debootstrap --variant=minbase ${include[*]}${include[*]:+ }$suite from $m (log: $work/debootstrap.log)"
  if ! $SUDO debootstrap --variant=minbase "${include[@]}" "$suite" "$root" "$m" >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    $SUDO rm -rf "$work"
    die "$engine: debootstrap failed"
  fi
  if [ -n "$extra" ]; then
    # The package from the extra suite, with apt inside the new root. The
    # archive's Release files may be past their Valid-Until date (an old
    # snapshot mirror): apt is told not to check it. No service is started
    # (policy-rc.d), and the root resolves names as the host does.
    log "$engine: apt-get install -t $extra $package in the new root (log: $work/apt.log)"
    echo "deb [trusted=yes] $m $extra main" | $SUDO tee "$root/etc/apt/sources.list.d/$extra.list" >/dev/null
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$root/usr/sbin/policy-rc.d" >/dev/null
    $SUDO chmod +x "$root/usr/sbin/policy-rc.d"
    $SUDO cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    if ! { $SUDO chroot "$root" env DEBIAN_FRONTEND=noninteractive \
      apt-get -o Acquire::Check-Valid-Until=false update &&
      $SUDO chroot "$root" env DEBIAN_FRONTEND=noninteractive \
        apt-get -o Acquire::Check-Valid-Until=false install -y -t "$extra" "$package"; } >"$work/apt.log" 2>&1; then
      tail -n 20 "$work/apt.log" >&2
      $SUDO rm -rf "$work"
      die "$engine: apt-get install -t $extra $package failed"
    fi
    $SUDO rm -f "$root/usr/sbin/policy-rc.d"
  fi
  # What the server never reads: package caches and lists, docs, locales.
  $SUDO rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale "$root"/usr/share/info
  $SUDO mkdir -p "$root/data" "$root/usr/local/bin"
  # The names compose files and scripts call (docker-compose.ha.yml runs
  # redis-cli --cluster create), for Valkey too.
  [ "$server" = redis-server ] || $SUDO ln -sf "/usr/bin/$server" "$root/usr/local/bin/redis-server"
  [ "$cli" = redis-cli ] || $SUDO ln -sf "/usr/bin/$cli" "$root/usr/local/bin/redis-cli"
  local v
  v="$($SUDO chroot "$root" "/usr/bin/$server" --version | grep -oE 'v=[0-9.]+' | cut -d= -f2)"
  check_version "$engine" "$v"
  $SUDO tar -C "$root" -c . | docker import \
    --change "ENTRYPOINT [\"/usr/bin/$server\",\"--protected-mode\",\"no\"]" \
    --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change 'EXPOSE 6379' \
    --change 'WORKDIR /data' \
    --message "$package $v of Debian $suite (debootstrap minbase), for rsc tests" \
    - "$image" >/dev/null
  $SUDO rm -rf "$work"
  log "$engine: built image $image ($package $v, $((SECONDS - started))s)"
}

# build_runner ENGINE: export the image's root to the cache and write the
# wrapper scripts that run its binaries on the host.
build_runner() {
  local engine="$1" dir id ctr loader libs
  dir="$CACHE/$engine"
  id="$(docker image inspect -f '{{.Id}}' "$image")"
  if [ -f "$dir/image-id" ] && [ "$(cat "$dir/image-id")" = "$id" ] && [ -x "$dir/bin/redis-server" ]; then
    return 0
  fi
  log "$engine: exporting $image to $dir/root"
  rm -rf "$dir"
  mkdir -p "$dir/root" "$dir/bin"
  ctr="$(docker create "$image")"
  docker export "$ctr" | tar -C "$dir/root" -x --exclude='dev/*' --exclude='proc/*' --exclude='sys/*'
  docker rm "$ctr" >/dev/null
  loader=""
  for f in "$dir"/root/usr/lib64/ld-linux-*.so.* "$dir"/root/usr/lib/ld-linux-*.so.* "$dir"/root/usr/lib/*-linux-gnu/ld-linux-*.so.*; do
    if [ -e "$f" ]; then
      loader="${f#"$dir/root/"}"
      break
    fi
  done
  [ -n "$loader" ] || die "$engine: no dynamic loader in $image"
  libs="$dir/root/usr/lib/$(uname -m)-linux-gnu:$dir/root/lib/$(uname -m)-linux-gnu:$dir/root/usr/lib"
  # run NAME BINARY [EXTRA]: a wrapper that execs BINARY of the root (the same
  # pid: tests signal it) with its own loader and libraries. The program path
  # is passed as given, not resolved: Valkey's binaries choose what they are
  # (server, check-rdb) by their name.
  wrapper() {
    cat >"$dir/bin/$1" <<EOF
#!/bin/sh
# $1 of $image ($engine), run from its root file system (.ci/engines.sh).
exec "$dir/root/$loader" --library-path "$libs" "$dir/root/usr/bin/$2" "\$@" $3
EOF
    chmod +x "$dir/bin/$1"
  }
  wrapper redis-server "$server" ""
  wrapper redis-cli "$cli" ""
  # A sentinel is the server with --sentinel after its config file.
  wrapper redis-sentinel "$server" "--sentinel"
  check_version "$engine" "$(version_of "$dir/bin/redis-server")"
  "$dir/bin/redis-cli" --version >/dev/null
  echo "$id" >"$dir/image-id"
  log "$engine: runner ready in $dir/bin ($(version_of "$dir/bin/redis-server"))"
}

build() {
  local engine="$1"
  spec "$engine"
  if [ "$engine" = redis7 ]; then
    docker image inspect "$image" >/dev/null 2>&1 || die "redis7: image $image is missing: run .ci/setup.sh"
    return 0
  fi
  if docker image inspect "$image" >/dev/null 2>&1; then
    log "$engine: image $image already present"
  else
    build_image "$engine"
  fi
  build_runner "$engine"
}

cmd="${1:-build}"
shift || true
case "$cmd" in
  list)
    printf '%s\n' "${ENGINES[@]}"
    ;;
  build)
    [ "$#" -gt 0 ] || set -- "${ENGINES[@]}"
    # debootstrap is mostly waiting on the mirror: build the missing images
    # side by side, each in its own process with its own log.
    pids=()
    for e in "$@"; do
      build "$e" &
      pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do
      wait "$p" || failed=1
    done
    [ "$failed" -eq 0 ] || die "some engines could not be built"
    ;;
  env)
    [ "$#" -eq 1 ] || die "usage: engines.sh env ENGINE"
    spec "$1"
    echo "export RSC_REDIS_ENGINE=$1"
    echo "export RSC_REDIS_VERSION=$want"
    echo "export RSC_REDIS_IMAGE=$image"
    if [ "$1" = redis7 ]; then
      echo "unset RSC_REDIS_BIN_DIR"
    else
      [ -x "$CACHE/$1/bin/redis-server" ] || die "$1 is not built: run .ci/engines.sh build $1"
      echo "export RSC_REDIS_BIN_DIR=$CACHE/$1/bin"
    fi
    ;;
  version)
    [ "$#" -eq 1 ] || die "usage: engines.sh version ENGINE"
    spec "$1"
    if [ "$1" = redis7 ]; then
      version_of redis-server
    else
      version_of "$CACHE/$1/bin/redis-server"
    fi
    ;;
  *)
    die "unknown command '$cmd' (build, env, version, list)"
    ;;
esac

#!/bin/sh
# docker/ha-cluster-init.sh — the one-shot redis-init service of
# docker-compose.ha.yml: makes the Redis nodes given as arguments (host:port,
# masters first) one Redis Cluster with RSC_CLUSTER_REPLICAS (1) replicas per
# master, and exits 0 once every node reports cluster_state:ok.
#
# Idempotent: a cluster already in state ok is left alone. Nodes that were in a
# cluster but are not ok (the stack was recreated over its volumes and Docker
# gave the containers new addresses, which their nodes.conf does not know) are
# introduced to each other again with CLUSTER MEET at their current addresses.
#
# Plain sh with only redis-cli and sleep: it also runs in the rsc-redis:7 image
# that .ci/setup.sh builds, which has no other tools.
set -eu

replicas="${RSC_CLUSTER_REPLICAS:-1}"
wait_seconds="${RSC_CLUSTER_WAIT_SECONDS:-60}"
cr="$(printf '\r')"

log() { echo "redis-init: $*"; }

# cli ADDR ARGS...: redis-cli against the node at ADDR (host:port).
cli() {
  _addr="$1"
  shift
  redis-cli -h "${_addr%:*}" -p "${_addr##*:}" "$@"
}

# info_field ADDR FIELD prints FIELD of ADDR's CLUSTER INFO (empty when the
# node does not answer).
info_field() {
  cli "$1" cluster info 2>/dev/null | while IFS=: read -r key value; do
    if [ "$key" = "$2" ]; then
      printf '%s\n' "${value%"$cr"}"
      break
    fi
  done
}

# wait_until WHAT COMMAND...: runs COMMAND every half second until it
# succeeds, for at most wait_seconds.
wait_until() {
  _what="$1"
  shift
  _tries=0
  until "$@"; do
    _tries=$((_tries + 1))
    if [ "$_tries" -gt $((wait_seconds * 2)) ]; then
      log "gave up after ${wait_seconds}s waiting for $_what"
      exit 1
    fi
    sleep 0.5
  done
}

answers() { [ "$(cli "$1" ping 2>/dev/null)" = PONG ]; }
state_ok() { [ "$(info_field "$1" cluster_state)" = ok ]; }

[ "$#" -ge 3 ] || {
  log "usage: ha-cluster-init.sh host:port host:port host:port [...]"
  exit 2
}
for node in "$@"; do
  wait_until "$node to answer PING" answers "$node"
done

first="$1"
if state_ok "$first"; then
  log "cluster already formed ($first reports cluster_state:ok)"
elif [ "$(info_field "$first" cluster_slots_assigned)" = 0 ] && [ "$(info_field "$first" cluster_known_nodes)" = 1 ]; then
  log "creating the cluster of $* with $replicas replica(s) per master"
  redis-cli --cluster create "$@" --cluster-replicas "$replicas" --cluster-yes
else
  log "$first was in a cluster but is not ok: introducing every node at its current address"
  for node in "$@"; do
    # The address the node answers on, as the node itself sees it (laddr).
    info="$(cli "$node" client info)"
    laddr="${info#*laddr=}"
    laddr="${laddr%% *}"
    cli "$first" cluster meet "${laddr%:*}" "${node##*:}" >/dev/null
  done
fi

for node in "$@"; do
  wait_until "$node to report cluster_state:ok" state_ok "$node"
done
log "cluster ok: $(info_field "$first" cluster_known_nodes) nodes, $(info_field "$first" cluster_slots_assigned) slots assigned"

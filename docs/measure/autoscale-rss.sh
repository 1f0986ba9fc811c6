#!/usr/bin/env bash
# RSS of a coordinator that autoscales ten 1,024-shard groups on an hour's
# window (issue #19 finding 3): starts a throwaway redis-server and the
# coordinator (--autoscale-interval 100ms), creates the groups, puts the
# policies, and prints VmRSS right after and every 20 s up to 60 s.
# Usage: bash docs/measure/autoscale-rss.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/../.."
secs="${1:-60}"
dir="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
rport=$((20000 + RANDOM % 20000))
cport=$((40000 + RANDOM % 20000))
redis-server --port "$rport" --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
go build -o "$dir/coordinator" ./cmd/coordinator
until redis-cli -p "$rport" ping >/dev/null 2>&1; do sleep 0.1; done
"$dir/coordinator" --listen "127.0.0.1:$cport" --redis "redis://127.0.0.1:$rport" \
  --autoscale-interval 100ms --rate-limit-per-minute 0 >"$dir/coordinator.log" 2>&1 &
pid=$!
base="http://127.0.0.1:$cport"
until curl -fsS "$base/readyz" >/dev/null 2>&1; do sleep 0.1; done
auth=(-u admin:password -H 'Content-Type: application/json')
rss() { awk '/VmRSS/ {print $2/1024 " MiB"}' "/proc/$pid/status"; }
echo "started: RSS $(rss)"
for i in $(seq 1 10); do
  curl -fsS "${auth[@]}" -X POST "$base/coord/v1/streams/rss$i/groups/g" \
    -d '{"initialShardCount":1024,"requestedBy":"measure","reason":"rss"}' >/dev/null
  curl -fsS "${auth[@]}" -X PUT "$base/coord/v1/streams/rss$i/groups/g/autoscaling" \
    -d '{"minShards":1,"maxShards":1024,"targetEntriesPerSecondPerShard":1000000,"evaluationWindowSeconds":3600,"requestedBy":"measure","reason":"rss"}' >/dev/null
done
echo "0 s after ten 1,024-shard groups with an hour's window: RSS $(rss)"
for t in $(seq 20 20 "$secs"); do
  sleep 20
  echo "$t s: RSS $(rss)"
done
curl -fsS -u admin:password "$base/metrics" | grep '^rsc_autoscaling_load_samples' | sort | uniq -c | head -3 || true

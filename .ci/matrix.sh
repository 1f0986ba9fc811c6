#!/usr/bin/env bash
# .ci/matrix.sh ENGINE... — the engine matrix: runs the suites below against
# each engine (.ci/engines.sh builds them; `make test-engines` does both) and
# prints a table of engine x suite x result x seconds. Engines run side by
# side, ENGINE_JOBS at a time (default 2); each engine's suites run one after
# the other. A suite that runs no test fails. Every suite's output is kept in
# $MATRIX_OUT/<engine>/<suite>.log (default: a temporary directory, printed).
#
#   ENGINE_JOBS=1 bash .ci/matrix.sh valkey9     # one engine, for a closer look
#   ENGINE_GOFLAGS=-race bash .ci/matrix.sh redis8
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v go >/dev/null 2>&1; then
  export PATH="/usr/local/go/bin:$PATH"
fi

JOBS="${ENGINE_JOBS:-2}"
GOFLAGS_MATRIX="${ENGINE_GOFLAGS:-}"
TIMEOUT="${ENGINE_TEST_TIMEOUT:-15m}"
OUT="${MATRIX_OUT:-$(mktemp -d /tmp/rsc-matrix.XXXXXX)}"

# name|package|test regexp
SUITES=(
  "event log (compare-and-append, index, trim, snapshots)|./redisstore|^TestIntegration(RedisLog.*|HistoryIndexBackfillAndTrim|TrimBefore|LogOnCluster|SnapshotStore.*|LeaseTerms|FencedLog)$"
  "log waits for replicas (WAIT)|./redisstore|^TestIntegration(LogWaitsForReplicas.*|FencedLogAndLeaseWaitForReplicas|TrimWaitsForTheArchiveReplicas)$"
  "provisioning and retirement (IDMP settings on Redis 8.6)|./redisstore|^TestIntegration(Shards|ShardsOnCluster|OffsetsSingleServerHaveNoNode|Load|IDMP.*)$"
  "lag in time (XRANGE, XPENDING, TIME; lag=null after XDEL)|./redisstore|^TestIntegrationOffsetsLagAge$"
  "drain proof (XDEL tombstones, XTRIM, promoted replica)|./redisstore|^TestIntegration(DrainProofWithTombstonesAndTrims|StaleEntriesReadCounter|DrainedOnPromotedReplica|BarrierEvidence)$"
  "engine check at start|./redisstore|^TestIntegrationCheckEngine"
  "scale-out and scale-in with the SDK under load|./client|^TestIntegrationEveryMessageConsumedThroughReshardingCrashAndLeave$"
  "ordered group resharding (0 inversions)|./client|^TestIntegrationOrderedGroupKeepsKeyOrderThroughResharding$"
  "Sentinel: primary killed mid-resharding|./client|^TestIntegrationSentinelFailoverMidResharding$"
  "TLS (rediss://, client certificates, wrong CA)|./cmd/coordinator|^TestIntegration(RedisTLS|UnsupportedRedisRefusedAtStart)$"
  "log failover (Sentinel, Cluster; --log-replicas)|./cmd/coordinator|^TestIntegrationLogFailover$"
  "eviction policy refused, FLUSHALL held and restored|./cmd/coordinator|^TestIntegration(EvictionPolicyRefused|FlushallWhileRunningIsRestored)$"
  "exactly once across layout changes (scenario, stream producers, chaos; IDMP settings)|./cmd/coordinator|^TestIntegration(ExactlyOnceAcrossLayoutChange|StreamProducerExactlyOnce|ExactlyOnceChaos|Coordinator(SetsIDMPOnItsShards|IDMPOnTheEngineUnderTest))$"
  "exactly once in the SDK (DedupWindow, idempotent publish)|./client/producer|^(TestIdempotentPublish|TestDedup)"
)

[ "$#" -gt 0 ] || { echo "usage: matrix.sh ENGINE..." >&2; exit 2; }
echo "matrix: engines $*, $JOBS at a time; logs in $OUT" >&2

# One test binary per package, built once for every engine and suite.
mkdir -p "$OUT/bin"
started=$SECONDS
for pkg in $(printf '%s\n' "${SUITES[@]}" | cut -d'|' -f2 | sort -u); do
  # shellcheck disable=SC2086
  go test -c $GOFLAGS_MATRIX -o "$OUT/bin/$(basename "$pkg").test" "$pkg"
done
echo "matrix: test binaries built in $((SECONDS - started))s" >&2

run_engine() {
  local engine="$1" dir="$OUT/$1" i=0 entry name pkg re log start res
  mkdir -p "$dir"
  : >"$dir/results"
  # shellcheck disable=SC1090
  eval "$(bash .ci/engines.sh env "$engine")"
  echo "matrix: $engine: $(bash .ci/engines.sh version "$engine")" >&2
  for entry in "${SUITES[@]}"; do
    i=$((i + 1))
    IFS='|' read -r name pkg re <<<"$entry"
    log="$dir/$i.log"
    start=$SECONDS
    # A test binary runs in its package's directory, as go test runs it.
    if (cd "$pkg" && "$OUT/bin/$(basename "$pkg").test" -test.v -test.count=1 -test.timeout "$TIMEOUT" -test.run "$re") >"$log" 2>&1; then
      res=pass
      if grep -q "no tests to run" "$log"; then
        res="FAIL (no test matched)"
      fi
    else
      res=FAIL
    fi
    echo "$engine|$name|$res|$((SECONDS - start))" >>"$dir/results"
    echo "matrix: $engine: $name: $res ($((SECONDS - start))s)" >&2
  done
}

started=$SECONDS
pids=()
for engine in "$@"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do
    wait -n || true
  done
  run_engine "$engine" &
  pids+=($!)
done
for p in "${pids[@]}"; do
  wait "$p" || true
done

failed=0
printf '\n| engine | version | suite | result | seconds |\n|---|---|---|---|---|\n'
for engine in "$@"; do
  version="$(bash .ci/engines.sh version "$engine" 2>/dev/null || echo '?')"
  while IFS='|' read -r e name res secs; do
    printf '| %s | %s | %s | %s | %s |\n' "$e" "$version" "$name" "$res" "$secs"
    [ "$res" = pass ] || failed=1
  done <"$OUT/$engine/results"
done
echo
echo "matrix: $# engines in $((SECONDS - started))s (wall clock, ENGINE_JOBS=$JOBS); logs in $OUT" >&2
if [ "$failed" -ne 0 ]; then
  for engine in "$@"; do
    i=0
    while IFS='|' read -r e name res secs; do
      i=$((i + 1))
      if [ "$res" != pass ]; then
        echo "--- $e: $name ($OUT/$e/$i.log, last lines):" >&2
        grep -E -- '--- FAIL|FAIL|_test.go:[0-9]+:' "$OUT/$e/$i.log" | tail -n 30 >&2 || tail -n 30 "$OUT/$e/$i.log" >&2
      fi
    done <"$OUT/$engine/results"
  done
  exit 1
fi

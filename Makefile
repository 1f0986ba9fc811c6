# Makefile for rsc. `make test` is what CI runs (through .ci/run): it installs
# and starts what the tests need (.ci/setup.sh), lints, runs every test with
# the race detector on this machine's Redis 7.0, then the engine matrix on
# Redis 8.0, Valkey 8.1, Valkey 9.1 and Redis 8.6 (make test-engines).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# Use go from PATH, falling back to the toolchain at /usr/local/go.
ifeq ($(shell command -v go 2>/dev/null),)
export PATH := /usr/local/go/bin:$(PATH)
endif
GO ?= go

# Test environment (see internal/redistest).
export RSC_REDIS_IMAGE ?= rsc-redis:7
export TESTCONTAINERS_RYUK_DISABLED := true
export TESTCONTAINERS_HOST_OVERRIDE := 127.0.0.1

# Tests that need Docker, or Chromium (the console browser test), fail instead
# of skipping in these targets.
test test-integration: export RSC_REQUIRE_DOCKER := 1
test test-integration: export RSC_REQUIRE_BROWSER := 1

REDIS_URL ?= redis://127.0.0.1:6379/0
TEST_TIMEOUT ?= 20m
# How many tests of one package run at once. cmd/coordinator's end-to-end tests
# that may share the machine call t.Parallel (see parallel in its harness_test.go);
# they mostly wait on Redis, ticks and leases, so 4 keep 2 cores busy.
TEST_PARALLEL ?= 4
BENCHTIME ?= 200ms
BENCH_TIMEOUT ?= 15m

# The engine matrix (.ci/engines.sh builds and caches the engines' images and
# host runners, .ci/matrix.sh runs the suites against each): ENGINES to run,
# ENGINE_JOBS engines side by side. make test runs the engines other than this
# machine's Redis 7.0, which the full run above covers.
ENGINES ?= redis7 redis8 valkey8 valkey9 redis86
TEST_ENGINES ?= redis8 valkey8 valkey9 redis86
ENGINE_JOBS ?= 2
# Engines that tests of the full run start besides the engine under test
# (redistest.OnEngine): Redis 8.6 for its idempotent XADD (redisstore/idmp_test.go).
OTHER_ENGINES ?= redis86

.PHONY: build run setup test test-unit test-integration bench lint fuzz engines test-engines

build:
	$(GO) build -o bin/ ./cmd/...

# Placeholder: builds and runs the coordinator against $(REDIS_URL).
run: build
	./bin/coordinator --redis $(REDIS_URL)

setup:
	bash .ci/setup.sh

test: setup
	$(MAKE) --no-print-directory lint
	bash .ci/engines.sh build $(OTHER_ENGINES)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) ./...
	$(MAKE) --no-print-directory fuzz FUZZTIME=2000x
	$(MAKE) --no-print-directory test-engines ENGINES="$(TEST_ENGINES)"

# Builds (once; cached) the engines of the matrix.
engines: setup
	bash .ci/engines.sh build $(ENGINES)

# The engine matrix: every engine of ENGINES against the suites of .ci/matrix.sh,
# then a table of engine x suite x result x seconds.
test-engines: export RSC_REQUIRE_DOCKER := 1
test-engines: engines
	ENGINE_JOBS=$(ENGINE_JOBS) bash .ci/matrix.sh $(ENGINES)

test-unit:
	$(GO) test -race -short -timeout $(TEST_TIMEOUT) ./...

test-integration: setup
	bash .ci/engines.sh build $(OTHER_ENGINES)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -parallel $(TEST_PARALLEL) -run Integration ./...

bench: setup
	$(GO) test -run '^$$' -bench . -benchtime=$(BENCHTIME) -timeout $(BENCH_TIMEOUT) ./...
	$(GO) run ./cmd/rscbench all --quick

lint:
	$(GO) vet ./...
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w):"; \
		echo "$$unformatted"; \
		exit 1; \
	fi; \
	echo "gofmt: ok"

# Every fuzz target for FUZZTIME each (the committed corpus under testdata/fuzz
# always runs as part of go test). make test runs a short campaign.
FUZZTIME ?= 10s
FUZZ_TARGETS := ./events:FuzzDecode ./events:FuzzDecodeFast ./routing:FuzzRouteV1 ./routing:FuzzSlot \
	./httpapi:FuzzCreate ./httpapi:FuzzScale ./httpapi:FuzzRollback ./httpapi:FuzzDelete \
	./httpapi:FuzzHeartbeat ./httpapi:FuzzLogin ./httpapi:FuzzAdopt ./httpapi:FuzzStreamRead ./httpapi:FuzzCheckKeysMatchesReference
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz: $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 50x $$pkg || exit 1; \
	done

# The demo: one command that sets up what it needs (redis-server from apt when
# missing; the demo itself starts a throwaway redis-server and the coordinator
# and removes both), then publishes and consumes through the Go SDK across a
# scale-out 4 -> 8 and a scale-in 8 -> 3, narrating as it goes, checks that
# every message was consumed and acked, and prints the replay history.
# Extra flags: make demo DEMO_FLAGS="--redis redis://127.0.0.1:6379/0".
DEMO_FLAGS ?=
.PHONY: demo
demo:
	@if ! command -v redis-server >/dev/null 2>&1; then \
		echo "demo: redis-server is missing; installing it with apt-get"; \
		SUDO=""; if [ "$$(id -u)" -ne 0 ]; then SUDO="sudo"; fi; \
		$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server || \
		{ $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
		  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server; }; \
	fi
	$(GO) build -o bin/ ./cmd/coordinator ./cmd/replay
	$(GO) run ./cmd/demo --coordinator-bin bin/coordinator --replay-bin bin/replay $(DEMO_FLAGS)

# The soak: the chaos scenario (cmd/soak/chaos) in a loop for SOAK_DURATION
# with seeded random faults (coordinator kill -9 and crashes after an event,
# member process kill -9 mid-batch, Redis restarts with AOF, random scale
# targets, rollbacks), then a summary table; exits 1 on any invariant
# violation. Not part of make test. Extra flags: SOAK_FLAGS="--seed 42 -v".
SOAK_DURATION ?= 5m
SOAK_FLAGS ?=
.PHONY: soak
soak:
	$(GO) run ./cmd/soak --duration $(SOAK_DURATION) $(SOAK_FLAGS)

# The ordered demo: a group with "ordering": "KEY" beside a plain one, the same
# per-key sequenced load, scaled 4 -> 7 -> 3 side by side with a backlog at each
# cutover; prints each group's inversions (a key's message handled after a later
# one): 0 for the ordered group, which the demo checks, and what the plain one got.
.PHONY: demo-ordered
demo-ordered:
	$(MAKE) --no-print-directory demo DEMO_FLAGS="--ordered $(DEMO_FLAGS)"

# The exactly-once demo: two groups get the same load, each event published
# again until a publish succeeds, through a proxy that loses 5% of the publish
# replies after Redis ran them, scaled 4 -> 8 -> 12 while publishing, producer
# processes restarting; one group's producers use DedupWindow, the other's do
# not. Prints, side by side, the event ids each wrote twice: 0 with
# DedupWindow (the demo fails otherwise, or when an acknowledged event is missing).
.PHONY: demo-exactly-once
demo-exactly-once:
	$(MAKE) --no-print-directory demo DEMO_FLAGS="--exactly-once $(DEMO_FLAGS)"

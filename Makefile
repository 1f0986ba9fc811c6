# Makefile for rsc. `make test` is what CI runs (through .ci/run): it installs
# and starts what the tests need (.ci/setup.sh), lints, then runs every test
# with the race detector.

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

# Tests that need Docker fail instead of skipping in these targets.
test test-integration: export RSC_REQUIRE_DOCKER := 1

REDIS_URL ?= redis://127.0.0.1:6379/0
TEST_TIMEOUT ?= 20m
BENCHTIME ?= 200ms
BENCH_TIMEOUT ?= 15m

.PHONY: build run setup test test-unit test-integration bench lint fuzz

build:
	$(GO) build -o bin/ ./cmd/...

# Placeholder: builds and runs the coordinator against $(REDIS_URL).
run: build
	./bin/coordinator --redis $(REDIS_URL)

setup:
	bash .ci/setup.sh

test: setup
	$(MAKE) --no-print-directory lint
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

test-unit:
	$(GO) test -race -short -timeout $(TEST_TIMEOUT) ./...

test-integration: setup
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run Integration ./...

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

# Placeholder: no fuzz targets yet.
fuzz:
	@echo "fuzz: no fuzz targets yet"

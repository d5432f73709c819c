# clawbed: one Makefile over the Python distribution and the Cargo workspace.
#   make setup    install what is missing (system packages, .venv, Rust build); idempotent
#   make replay   setup, then the main job on the bundled defaults
#   make test     setup, then the linters and type checks, then every test (Rust and Python)
#   make bench    setup, then the benchmarks; figures printed and written to bench-results/
#   make check-fresh  provision.sh, a smoke replay and a few tests in a fresh Debian 12 root (HEAD only)
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
# A rustup toolchain in ~/.cargo wins over a distribution cargo when both exist.
export PATH := $(HOME)/.cargo/bin:$(PATH)

VENV := .venv
CLAWBED := $(VENV)/bin/clawbed
PYTEST := $(VENV)/bin/pytest
DEFAULT_TRACE := traces/samples/busy-cell.cbt

.PHONY: setup build replay test test-slow lint-rust test-rust test-python lint-python bench clean check-fresh

setup:
	bash scripts/provision.sh

build: setup

# With CLAWBED_INGEST=1 (the Vagrant VM sets it) the run also goes into InfluxDB for the dashboards.
REPLAY_NAME := replay-$(shell date +%Y%m%d-%H%M%S)

replay: setup
	$(CLAWBED) replay --trace $(DEFAULT_TRACE) --page profile --schemes claw,cubic --runs 5 --loader browser --name $(REPLAY_NAME)
	if [ "$${CLAWBED_INGEST:-0}" = 1 ]; then $(CLAWBED) dash ingest $${CLAWBED_RUNS:-runs}/$(REPLAY_NAME); fi

test: setup lint-python lint-rust test-rust test-python

# clippy with every warning an error, and the one rustfmt config (rustfmt.toml) checked.
lint-rust:
	cargo clippy --locked --workspace --all-targets -- -D warnings
	cargo fmt --all --check

# ruff (style, imports, likely bugs) and mypy (types) over every Python file of the project.
lint-python:
	$(VENV)/bin/ruff check .
	bash scripts/typecheck.sh

test-rust:
	cargo test --release --locked --workspace

# The tests marked slow (an A/B regression that builds a revision: minutes) are left to
# `make test-slow`, which CI runs after `make test` (.ci/run), so `make test` stays under 25 min.
test-python:
	$(PYTEST) -q -m "not slow"

test-slow: setup
	$(PYTEST) -q -m slow

bench: setup
	mkdir -p bench-results
	$(VENV)/bin/python -m clawbed.traces.bench
	$(VENV)/bin/python -m clawbed.emulator.bench
	$(VENV)/bin/python -m clawbed.replay.bench
	$(VENV)/bin/python -m clawbed.orchestrator.bench
	$(VENV)/bin/python -m clawbed.claw.client.bench
	$(VENV)/bin/python -m clawbed.traces.diaglog.bench
	@echo "bench: results in bench-results/"

# Not part of `make test`: a fresh debootstrapped Debian 12 root, a clone of HEAD, provision.sh in
# it from nothing, a smoke replay and a few tests; run it before a submission that touches setup.
check-fresh:
	bash scripts/check-fresh.sh

clean:
	rm -rf target $(VENV) bench-results

# The fidelity suite's quick profile (aim: under 40 min on 2 cores): every row of
# docs/fidelity-table.md as an experiment, printed, written to runs/fidelity/<name>/report.html and
# to the result store's fidelity_rows table (`clawbed fidelity report` shows it again).
.PHONY: fidelity
fidelity: setup
	$(CLAWBED) fidelity run --quick --name fidelity-quick-$(shell date +%Y%m%d-%H%M%S)

# Everything a fresh machine needs, from a clone: `make run` (the main job on the shipped
# example), `make test` (lint, types and the whole test suite). Both create .venv on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BASE   := $(VENV)/.base-stamp
DEV    := $(VENV)/.dev-stamp

.PHONY: run test lint unit docs bench bench-quick bench-windows bench-reference bench-distributed flink clean lock tools

$(BASE): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "subgraph-monitor needs Python 3.11 or newer (found $$($(PYTHON) --version))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	@touch $@

$(DEV): $(BASE)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@touch $@

## run: the embedded main job on the shipped example (no Kafka needed)
run: $(BASE)
	$(BIN)/subgraph-monitor run --query examples/fraud.q --edges examples/transfers.txt --batch-size 25
	$(BIN)/subgraph-monitor run --query examples/payments.q --edges examples/payments.jsonl --batch-size 10 --output-fields amount

## test: ruff, mypy and every test (the same command CI runs)
test: lint unit

lint: $(DEV)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# (-n auto: a worker per core, each with its own broker; worksteal balances the long tests. A
# third worker on two cores was tried: the Ray tests, each starting a cluster, then ran 2-5x
# longer and the suite was no faster)
unit: $(DEV)
	$(BIN)/pytest -n auto --dist worksteal

## docs: the documentation site into site/ (mkdocs build --strict: a broken link fails)
docs: $(DEV)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## tools: helm, k8s-validate, promtool, prometheus and chromium for the chart and site tests (built or installed
## once, cached; the test fixtures do the same on demand)
tools:
	scripts/deploy-tools ensure

## bench: the benchmark harness (about 43 minutes, bench.kafka 14-15 of them with its Avro runs
## against a local schema registry, bench/kafka_registry.md); writes BENCHMARKS.md
bench: $(DEV)
	$(BIN)/python -m bench.persistence
	$(BIN)/python -m bench.kafka
	$(BIN)/python -m bench.kafka_output --settings --serve
	$(BIN)/python -m bench.cluster
	$(BIN)/python -m bench.consolidation
	$(BIN)/python -m bench.payments
	$(BIN)/python -m bench.run

bench-quick: $(DEV)
	$(BIN)/python -m bench.run --quick

## flink: the venv of the Flink SQL baseline, .venv-flink (apache-flink, about 1 GiB: the
## project's `flink` extra, kept out of .venv because it pins numpy and pandas); needs Java 17
FLINK := .venv-flink
$(FLINK)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(FLINK)
	$(FLINK)/bin/pip install --quiet --upgrade pip
	$(FLINK)/bin/pip install --quiet -e '.[flink]'
	@touch $@

flink: $(FLINK)/.stamp

## bench-windows: the event-time benchmark against Flink SQL, 10M events (bench/timed_payments.md)
bench-windows: $(DEV) flink
	$(BIN)/python -m bench.timed_payments

## bench-reference: the paper authors' implementation (dataflow-join, Rust) beside ours on the
## same inputs, counts checked (bench/reference.md, about 20 minutes); builds it once into
## .cache/peers, so it needs cargo and ../shared/peers (skipped with the reason without them)
bench-reference: $(DEV)
	$(BIN)/python -m bench.reference

## bench-distributed: the partitioned engine against the single process and dataflow-join
## (bench/distributed.md, about 35 minutes), events on shards (bench/distributed_events.md,
## about a minute), and the Kafka service on it beside the file job, the embedded service and
## the replicated workers, with its recovery times (bench/kafka_distributed.md)
bench-distributed: $(DEV)
	$(BIN)/python -m bench.distributed
	$(BIN)/python -m bench.distributed_events
	$(BIN)/python -m bench.kafka_distributed

## lock: regenerate the image's pinned requirements (docker/*.lock) from pyproject.toml
lock: $(DEV)
	$(BIN)/pip install --quiet pip-tools
	$(BIN)/pip-compile --quiet --generate-hashes --strip-extras --extra arrow --extra distributed --no-emit-index-url \
		--no-emit-find-links --output-file docker/requirements.lock pyproject.toml
	$(BIN)/pip-compile --quiet --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url \
		--no-emit-find-links --output-file docker/build-requirements.lock docker/build-requirements.in

clean:
	rm -rf $(VENV) $(FLINK) .mypy_cache .ruff_cache .pytest_cache .hypothesis

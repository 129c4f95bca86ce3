# Thin wrapper over CMake/CTest. The two commands a fresh machine needs:
#   make generate   set up (Debian packages, default model), build, generate text
#   make test       set up, build Release and ASan+UBSan, run every test, run the bounded fuzzer
BUILD ?= build
JOBS ?= 2
PROMPT ?= The history of the printing press
FUZZ_SECONDS ?= 60

.PHONY: all setup build install generate test test-release test-asan fuzz bench report clean

all: build

setup:
	bash scripts/setup-deps.sh
	bash scripts/fetch_model.sh
	bash scripts/fetch_gemma.sh
	bash scripts/setup-serve-venv.sh
	bash scripts/fetch_vocabs.sh
	bash scripts/setup-ref-venv.sh
	bash scripts/setup-python-venv.sh

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

# the header, libveloxquant.a/.so and veloxquant.pc under PREFIX (README: Using the library)
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

generate: setup build
	./$(BUILD)/veloxquant generate -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p "$(PROMPT)" -n 64 --temp 0 --verbose

# OpenMP's barrier spins briefly (GOMP_SPINCOUNT, as the CLI sets it): a test's threads must not spin
# for long while another process holds the cores (a loaded machine made a 2-minute test time out)
TEST_ENV = GOMP_SPINCOUNT=$${GOMP_SPINCOUNT:-1000}

test-release: build
	$(TEST_ENV) ctest --test-dir $(BUILD) --output-on-failure

test-asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVQ_SANITIZE=ON >/dev/null
	cmake --build build-asan -j$(JOBS)
	$(TEST_ENV) VQ_SANITIZER_BUILD=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure

fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh

test: setup
	$(MAKE) test-release
	$(MAKE) test-asan
	$(MAKE) fuzz

bench: build
	./$(BUILD)/veloxquant bench --kv f16 --kv q4_0 --kv turboquant_mse:k=4,v=4 --reps 5

# The measured report (scripts/report.sh): quality, memory, throughput, needle, eviction, weights, serve, kernels -> JSON in
# docs/results/<stage>/, then docs/results.md + PNGs. Stages whose JSON exists are kept; FORCE=1 reruns.
# Run it on a quiet machine: it takes hours at full size (docs/results.md says what each stage measured).
report: build
	BIN=./$(BUILD)/veloxquant bash scripts/report.sh

clean:
	rm -rf $(BUILD) build-asan build-fuzz

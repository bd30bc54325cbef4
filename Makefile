# GIFT sidecar — top-level entry points. Everything goes through CMake; this
# file only sequences install → configure → build → run.
#
#   make demo    install what is missing, build, run the main job (CPU):
#                giftd + 4 ranks training a tiny Llama (examples/demo.py)
#   make fidelity  the offline FP8 + 4-bit fidelity report on the committed gradients
#   make monitor   Prometheus with the shipped rules beside a running make demo
#   make test    install what is missing, build, run every test (ctest)
#   make soak    the fault soak, 15 minutes (SOAK_SECONDS=N to change)
#   make sanitize  ASan+UBSan, TSan and fuzzing passes (scripts/sanitize.sh;
#                build-asan, shared by ASan and the fuzzers, and
#                build-tsan), one closing line
#   make fuzz    only the fuzzers (scripts/fuzz.sh; FUZZ_SECONDS=60)
#   make bench   build and run the benchmarks (figures, no assertions)
#   make format  clang-format every C++/CUDA file in place
#   make data    regenerate tests/data with tools/gen_gradients.py

BUILD_DIR ?= build
GIFT_CUDA ?= AUTO
JOBS ?= $(shell nproc)
PYTHON := /usr/bin/python3
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps configure build demo fidelity monitor test soak sanitize fuzz bench format format-check data clean

all: build

deps:
	@scripts/install-deps.sh --check >/dev/null 2>&1 || scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -DGIFT_CUDA=$(GIFT_CUDA) \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

configure: deps
	cmake -S . -B $(BUILD_DIR) -DGIFT_CUDA=$(GIFT_CUDA) \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The demo builds only what it runs (giftd, giftctl, the Python package),
# not the test and benchmark targets.
demo: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j $(JOBS) --target giftd giftctl gift_python
	$(PYTHON) examples/demo.py --build $(BUILD_DIR)

fidelity: build
	$(PYTHON) tools/fidelity_report.py --bin $(BUILD_DIR)/tools/gift-fidelity --data tests/data

monitor: deps
	@scripts/monitor.sh

test: build
	@scripts/run-tests.sh $(BUILD_DIR) $(CTEST_FLAGS)

# The fault soak for 15 minutes (make test runs 2 of them).
soak: build
	$(PYTHON) tests/soak/soak.py --build $(BUILD_DIR) --seconds $(or $(SOAK_SECONDS),900)

sanitize: deps
	@JOBS=$(JOBS) scripts/sanitize.sh

fuzz: deps
	@JOBS=$(JOBS) scripts/fuzz.sh

bench: build
	@scripts/run-bench.sh $(BUILD_DIR)

format:
	git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i

format-check:
	git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format --dry-run -Werror

data:
	$(PYTHON) tools/gen_gradients.py --out tests/data

clean:
	rm -rf $(BUILD_DIR)

# GIFT sidecar — top-level entry points. Everything goes through CMake; this
# file only sequences install → configure → build → run.
#
#   make demo    install what is missing, build, run the main job (CPU):
#                giftd + 4 ranks training a tiny Llama (examples/demo.py)
#   make fidelity  the offline FP8 fidelity report on the committed gradients
#   make monitor   Prometheus with the shipped rules beside a running make demo
#   make test    install what is missing, build, run every test (ctest)
#   make bench   build and run the benchmarks (figures, no assertions)
#   make format  clang-format every C++/CUDA file in place
#   make data    regenerate tests/data with tools/gen_gradients.py

BUILD_DIR ?= build
GIFT_CUDA ?= AUTO
JOBS ?= $(shell nproc)
PYTHON := /usr/bin/python3
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps configure build demo fidelity monitor test bench format format-check data clean

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

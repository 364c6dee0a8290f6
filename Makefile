# trident build. `make` builds build/trident; `make run` and `make test` are the README's
# two commands. CUDA objects are built too when nvcc is found (USE_CUDA=auto|0|1).
SHELL := /bin/bash
CC ?= gcc
BUILD := build
USE_CUDA ?= auto
WERROR ?= 1

# Vector units: AVX2 + FMA where the CPU has them (every x86-64 server of the last decade).
ARCH_FLAGS ?= $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo 2>/dev/null && echo -march=x86-64-v3)
OPENBLAS_INC ?= $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/aarch64-linux-gnu/openblas-pthread /usr/include/openblas))
CFLAGS ?= -O2
CFLAGS += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp $(ARCH_FLAGS) -MMD -MP
ifeq ($(WERROR),1)
CFLAGS += -Werror
endif
# SAN=1: AddressSanitizer and UndefinedBehaviorSanitizer (make test-asan builds that way in
# build-san/, without CUDA); any report ends the process with an error.
SAN ?= 0
ifeq ($(SAN),1)
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The instrumented code defeats GCC's value-range analysis, so -Wformat-truncation reports
# sizes no path can reach; the plain build keeps it as an error for the same sources.
CFLAGS += $(SAN_FLAGS) -g -Wno-format-truncation
endif
# MPI (the CPU comm backend) and PMIx (bootstrap), located by pkg-config.
MPI_PMIX_CFLAGS := $(shell pkg-config --cflags ompi-c pmix 2>/dev/null)
MPI_PMIX_LIBS := $(shell pkg-config --libs ompi-c pmix 2>/dev/null)
CPPFLAGS += -iquote src $(if $(OPENBLAS_INC),-I$(OPENBLAS_INC)) $(MPI_PMIX_CFLAGS)
LDLIBS += -lyaml -lopenblas $(MPI_PMIX_LIBS) -lm -fopenmp $(SAN_FLAGS)

# ---- CUDA (USE_CUDA=auto|0|1) ----
# auto builds cuda/ when nvcc is on PATH or at /usr/local/cuda/bin/nvcc; 0 never; 1 always
# (an error without nvcc). Without CUDA, src/*/*_nocuda.c stand in for cuda/: the same symbols,
# each failing with "this build of trident has no CUDA support". Exactly one of the two is
# linked.
comma := ,
NVCC ?= $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/bin/,%,$(dir $(NVCC))),/usr/local/cuda)
# Real code for each arch in CUDA_ARCH (A100 = sm_80, H100/H200 = sm_90), plus the PTX of
# CUDA_PTX, which the driver compiles at load time on newer GPUs (Blackwell and on), so
# that one binary starts on all of them. CUDA_ARCH=sm_90 CUDA_PTX= builds one arch only.
CUDA_ARCH ?= sm_80 sm_90
CUDA_PTX ?= compute_90
ifeq ($(USE_CUDA),auto)
BUILD_CUDA := $(if $(NVCC),1,0)
else ifeq ($(USE_CUDA),1)
BUILD_CUDA := 1
else ifeq ($(USE_CUDA),0)
BUILD_CUDA := 0
else
$(error USE_CUDA must be auto, 0 or 1, not '$(USE_CUDA)')
endif
# USE_CUDA=1 without nvcc stops every goal that builds (clean and deps still run).
ifeq ($(BUILD_CUDA)$(NVCC),1)
ifneq ($(or $(filter-out clean deps deps-check format format-check,$(MAKECMDGOALS)),$(if $(MAKECMDGOALS),,all)),)
$(error USE_CUDA=1, but nvcc is neither on PATH nor at /usr/local/cuda/bin/nvcc. Install \
	the CUDA toolkit (with NCCL and cuBLASLt), put its bin/ on PATH or pass \
	NVCC=/path/to/nvcc, or build without CUDA: make USE_CUDA=0)
endif
endif
NVCCFLAGS ?= -O2
NVCC_GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=$(patsubst sm_%,compute_%,$(a)),code=$(a)) \
	$(if $(CUDA_PTX),-gencode arch=$(CUDA_PTX)$(comma)code=$(CUDA_PTX))
NVCCFLAGS += -std=c++17 $(NVCC_GENCODE) \
	-Xcompiler -Wall,-Wextra$(if $(filter 1,$(WERROR)),$(comma)-Werror --Werror all-warnings) \
	-Xcompiler -iquote,src -MMD -MP
CUDA_SRCS := $(sort $(wildcard cuda/*/*.cu))
CUDA_OBJS := $(CUDA_SRCS:cuda/%.cu=$(BUILD)/obj/cuda/%.o)

# src/LAYER/*.c: one folder per layer (README "Architecture"); the stand-ins for cuda/ end
# in _nocuda.c and are linked only in a build without CUDA.
NOCUDA_SRCS := $(sort $(wildcard src/*/*_nocuda.c))
SRCS := $(filter-out $(NOCUDA_SRCS),$(sort $(wildcard src/*/*.c)))
OBJS := $(SRCS:src/%.c=$(BUILD)/obj/%.o)
ifeq ($(BUILD_CUDA),1)
OBJS += $(CUDA_OBJS)
# nvcc's host objects need the C++ runtime when gcc links them.
LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart -lnccl -lcublasLt -lstdc++ -Wl,-rpath,$(CUDA_HOME)/lib64
BUILD_KIND = with CUDA ($(NVCC), $(CUDA_ARCH)$(if $(CUDA_PTX), + $(CUDA_PTX) PTX), USE_CUDA=$(USE_CUDA))
else
OBJS += $(NOCUDA_SRCS:src/%.c=$(BUILD)/obj/%.o)
BUILD_KIND = without CUDA (USE_CUDA=$(USE_CUDA)$(if $(NVCC),,$(comma) no nvcc found))
endif
LIB_OBJS := $(filter-out $(BUILD)/obj/app/main.o,$(OBJS))
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
# Tools of the tests: ref_dump (test_reference.sh), ckpt_fuzz (test_ckpt_fuzz.sh),
# fuzz_config_check (tests/fuzz_config.py), fork_tokenize (tests/fuzz_tokenizer.py), fuzz_cli
# (test_fuzz_cli.sh).
TEST_TOOLS := $(BUILD)/tests/ref_dump $(BUILD)/tests/ckpt_fuzz $(BUILD)/tests/fuzz_config_check \
              $(BUILD)/tests/fork_tokenize $(BUILD)/tests/fuzz_cli
# GPU tests (tests/gpu/): built with every CUDA build, so that CI catches their compile and
# link errors; run only by `make test-gpu`, on a machine with a GPU (never by `make test`).
GPU_TEST_SRCS := $(sort $(wildcard tests/gpu/test_*.c))
GPU_TEST_BINS := $(GPU_TEST_SRCS:tests/gpu/%.c=$(BUILD)/tests/gpu/%)

.PHONY: all deps deps-check run test test-asan test-full test-gpu test-perf clean data format \
	format-check
all: $(BUILD)/trident data $(if $(filter 1,$(BUILD_CUDA)),$(GPU_TEST_BINS))

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/cuda/%.o: cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/trident: $(OBJS)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)
	@echo "trident: built $@ $(BUILD_KIND)"

$(BUILD)/tests/%: tests/%.c $(LIB_OBJS) | $(BUILD)/tests
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

# fuzz_cli links main.c as trident_main: it parses with the very tables of the binary and runs
# `trident CMD ARGS` in forked children (tests/fuzz_cli.c).
$(BUILD)/tests/fuzz_cli: tests/fuzz_cli.c src/app/main.c $(LIB_OBJS) | $(BUILD)/tests
	$(CC) $(CPPFLAGS) $(CFLAGS) -Dmain=trident_main -c src/app/main.c -o $@-main.o
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $@-main.o $(LIB_OBJS) -o $@ $(LDLIBS)

# fork_tokenize links only what `tokenize` uses: a fork of it is cheap, with no CUDA or MPI
# library mapped (tests/fork_tokenize.c); libyaml for base/yaml_limit.c.
TOKENIZE_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,src/app/tokenize.c src/app/cli.c src/io/data.c \
	src/io/json.c $(wildcard src/io/tokenizer*.c) $(wildcard src/base/*.c))
$(BUILD)/tests/fork_tokenize: tests/fork_tokenize.c $(TOKENIZE_OBJS) | $(BUILD)/tests
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(TOKENIZE_OBJS) -o $@ -lyaml -lm -fopenmp $(SAN_FLAGS)

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(LIB_OBJS) | $(BUILD)/tests/gpu
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

$(BUILD)/tools/%: scripts/%.c $(LIB_OBJS) | $(BUILD)/tools
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

$(BUILD)/tests $(BUILD)/tests/gpu $(BUILD)/tools:
	@mkdir -p $@

# The embedded corpus: data/kjv.txt (King James Bible, public domain, from Debian's
# bible-kjv-text) as byte-level llm.c shards, the last 5% held out for validation. Also
# split at Matthew 1:1 into the Old and New Testaments, each with its own 5% held out: the
# two sources and two validation sets of configs/blend.yaml.
data: data/kjv_train_000.bin data/kjv_ot_train_000.bin
data/kjv_train_000.bin: data/kjv.txt | $(BUILD)/tools/make_byte_shards
	$(BUILD)/tools/make_byte_shards data/kjv.txt data/kjv 0.05
data/kjv_ot_train_000.bin: data/kjv.txt | $(BUILD)/tools/make_byte_shards
	awk '/^Mat1:1 /{nt = 1} {print > (nt ? "$(BUILD)/kjv_nt.txt" : "$(BUILD)/kjv_ot.txt")}' \
		data/kjv.txt
	$(BUILD)/tools/make_byte_shards $(BUILD)/kjv_nt.txt data/kjv_nt 0.05
	$(BUILD)/tools/make_byte_shards $(BUILD)/kjv_ot.txt data/kjv_ot 0.05

# `run` and `test` install the dependencies first, then build in a second make so that the
# flags found by pkg-config see the freshly installed libraries.
run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/trident train configs/default.yaml
	$(BUILD)/trident sample runs/kjv-tiny --prompt "And God said" --tokens 200 --temperature 0.5

# `make test T=PATTERN` runs only the tests whose name matches (tests/run_all.sh: a glob such
# as 'test_ops*', or a substring such as dp). T is not exported: the test scripts use T for
# the trident binary.
unexport T
test: deps
	@$(MAKE) --no-print-directory all $(TEST_BINS) $(TEST_TOOLS)
	@tests/run_all.sh $(T)

# Sanitizers: a second build in build-san/ (SAN=1: ASan + UBSan, no CUDA: nvcc objects do not
# link with the sanitizer runtimes) and tests/sanitize.sh on it.
SAN_BUILD := build-san
test-asan: deps
	@$(MAKE) --no-print-directory SAN=1 USE_CUDA=0 BUILD=$(SAN_BUILD) $(SAN_BUILD)/trident \
		$(TEST_SRCS:tests/%.c=$(SAN_BUILD)/tests/%) $(SAN_BUILD)/tests/fork_tokenize data
	@bash tests/sanitize.sh $(SAN_BUILD) | tee $(SAN_BUILD)/sanitize.log; \
		echo "$$(grep -c '^PASS ' $(SAN_BUILD)/sanitize.log) passed, $$(grep -c '^FAIL ' $(SAN_BUILD)/sanitize.log) failed"; \
		grep -q "^PASS " $(SAN_BUILD)/sanitize.log && ! grep -q "^FAIL " $(SAN_BUILD)/sanitize.log

# What CI runs besides make test: the suites that do not fit its 10 minutes (the sanitizers;
# the blend test on every layout; the Llama layouts beyond make test's; a SmolLM-shaped HF import;
# the planner against the 8-rank runs beyond make test's; the flight recorder's stalled and
# killed jobs repeated and
# its ring fuzzer at 1000 cases a family).
test-full: test-asan
	@$(MAKE) --no-print-directory all && bash tests/test_blend.sh --all-layouts && \
		bash tests/test_llama.sh --all && bash tests/test_hf_llama.sh --all && \
		bash tests/test_plan.sh --all
	@$(MAKE) --no-print-directory $(BUILD)/tests/test_diagnose && \
		$(BUILD)/tests/test_diagnose --cases 1000 && bash tests/test_diagnose.sh --full

# Speed measurements, never run by `make test` (which asserts no timing): the tokenizer
# against Hugging Face tokenizers (scripts/bench-tokenize.sh [THREADS] [MB]), the step
# time's spread on oversubscribed cores (scripts/bench-threads.sh [STEPS] [REPEATS]), the
# planner's predicted step against measured ones after --calibrate (scripts/perf-plan.sh), a
# calibrated --search whose picks are run (scripts/search-local.sh, on perf-plan's profile),
# and the pipeline schedules side by side (scripts/bench-pipeline.sh [CONFIG] [STEPS]).
test-perf: all
	@scripts/bench-tokenize.sh
	@scripts/bench-threads.sh
	@scripts/perf-plan.sh $(BUILD)
	@scripts/search-local.sh $(BUILD)
	@scripts/bench-pipeline.sh

# The GPU checks (issue 9): each op on CUDA against the CPU backend, and a training run on
# each backend; tests/gpu/run.sh says what runs. Needs a CUDA build and a GPU.
test-gpu:
ifneq ($(BUILD_CUDA),1)
	@echo "make test-gpu needs a CUDA build; this one is $(BUILD_KIND)" >&2; exit 2
else
	@$(MAKE) --no-print-directory all $(GPU_TEST_BINS)
	@tests/gpu/run.sh $(BUILD)
endif

# The include rules of README "Architecture": layers lowest first, private headers kept in
# their folder, no module cycles (scripts/deps-check.py says which).
deps-check:
	@/usr/bin/python3 scripts/deps-check.py

# .clang-format (clang-format 14) on every C and CUDA file of src/, cuda/ and tests/: `format`
# rewrites them in place, `format-check` lists the files it would change (exit 1 if any).
CLANG_FORMAT ?= clang-format
FORMAT_SRCS := $(sort $(wildcard src/*/*.[ch] cuda/*/*.cu cuda/*/*.cuh cuda/*/*.h \
	tests/*.[ch] tests/*/*.[ch]))
FORMAT_TOOL = @command -v $(CLANG_FORMAT) >/dev/null || { echo "make $@ needs $(CLANG_FORMAT) \
	(Debian: apt-get install clang-format; CLANG_FORMAT=PATH names another)" >&2; exit 2; }
format:
	$(FORMAT_TOOL)
	$(CLANG_FORMAT) -i --style=file $(FORMAT_SRCS)

format-check:
	$(FORMAT_TOOL)
	@n=0; for f in $(FORMAT_SRCS); do \
		d=$$($(CLANG_FORMAT) --style=file "$$f" | diff "$$f" - | grep -c '^[<>]'); \
		[ "$$d" = 0 ] || { echo "$$f: $$d lines would change"; n=$$((n + 1)); }; \
	done; \
	[ $$n = 0 ] || { echo "format-check: $$n of $(words $(FORMAT_SRCS)) files would change" \
		"(make format rewrites them)"; exit 1; }; \
	echo "format-check: all $(words $(FORMAT_SRCS)) files as clang-format writes them"

clean:
	rm -rf $(BUILD) data/*.bin

-include $(OBJS:.o=.d) $(TEST_BINS:=.d) $(GPU_TEST_BINS:=.d)

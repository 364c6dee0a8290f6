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
# MPI (the CPU comm backend) and PMIx (bootstrap), located by pkg-config.
MPI_PMIX_CFLAGS := $(shell pkg-config --cflags ompi-c pmix 2>/dev/null)
MPI_PMIX_LIBS := $(shell pkg-config --libs ompi-c pmix 2>/dev/null)
CPPFLAGS += -iquote src $(if $(OPENBLAS_INC),-I$(OPENBLAS_INC)) $(MPI_PMIX_CFLAGS)
LDLIBS += -lyaml -lopenblas $(MPI_PMIX_LIBS) -lm -fopenmp

SRCS := $(sort $(wildcard src/*.c))
OBJS := $(SRCS:src/%.c=$(BUILD)/obj/%.o)
LIB_OBJS := $(filter-out $(BUILD)/obj/main.o,$(OBJS))
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_TOOLS := $(BUILD)/tests/ref_dump

.PHONY: all deps run test clean data format
all: $(BUILD)/trident data

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: src/%.c | $(BUILD)/obj
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/trident: $(OBJS)
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(LIB_OBJS) | $(BUILD)/tests
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

$(BUILD)/tools/%: scripts/%.c $(LIB_OBJS) | $(BUILD)/tools
	$(CC) $(CPPFLAGS) $(CFLAGS) $< $(LIB_OBJS) -o $@ $(LDLIBS)

$(BUILD)/obj $(BUILD)/tests $(BUILD)/tools:
	@mkdir -p $@

# The embedded corpus: data/kjv.txt (King James Bible, public domain, from Debian's
# bible-kjv-text) as byte-level llm.c shards, the last 5% held out for validation.
data: data/kjv_train_000.bin
data/kjv_train_000.bin: data/kjv.txt | $(BUILD)/tools/make_byte_shards
	$(BUILD)/tools/make_byte_shards data/kjv.txt data/kjv 0.05

# `run` and `test` install the dependencies first, then build in a second make so that the
# flags found by pkg-config see the freshly installed libraries.
run: deps
	@$(MAKE) --no-print-directory all
	$(BUILD)/trident train configs/default.yaml
	$(BUILD)/trident sample runs/kjv-tiny --prompt "And God said" --tokens 200

test: deps
	@$(MAKE) --no-print-directory all $(TEST_BINS) $(TEST_TOOLS)
	@tests/run_all.sh

clean:
	rm -rf $(BUILD) data/*.bin

-include $(OBJS:.o=.d) $(TEST_BINS:=.d)

# seqkv - build, test, bench, install.
#   make                  library (static + shared), CLI, tests
#   make demo             the main job on the bundled model (scripts/demo.sh)
#   make test             run the test suite (summary line "N passed, M failed")
#   make san              build + test under AddressSanitizer + UBSan (build-san/)
#   make bench            benchmarks; results in bench/results/
#   make fuzz             libFuzzer targets (clang) in build-fuzz/
#   make install PREFIX=/usr/local
#   make CUDA=1           the same with the CUDA backend (src/cuda/*.cu, docs/cuda.md) in build-cuda/
# Every module in src/ is compiled into the library; every tests/test_*.c is a
# test binary; every fuzz/fuzz_*.c is a fuzz target whose corpus in
# fuzz/corpus/<name>/ is replayed by the test suite.

CC      ?= cc
# CUDA=1: src/cuda/*.cu compiled by nvcc into the library (docs/cuda.md), in its own build folder.
CUDA    ?= 0
ifeq ($(CUDA),1)
BUILD   ?= build-cuda
endif
BUILD   ?= build
PREFIX  ?= /usr/local
# plain `make` builds everything, whatever rule comes first below
.DEFAULT_GOAL := all
VERSION := 0.1.0
# The bundled default model (models/), used when a command gets no -m.
DEFAULT_MODEL ?= kjv-4m.gguf
OPT     ?= -O2 -g
WERROR  ?=
SANFLAGS ?=

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wformat=2 -Wvla -Wundef -Wcast-qual -Wnull-dereference
# Determinism: ISO C11 (no GNU contraction), no FMA contraction, no fast-math.
# Every fused multiply-add in the numeric kernels is written explicitly.
# -fno-math-errno only lets fmaf/sqrtf compile to single instructions (same results).
BASE := -std=c11 -D_DEFAULT_SOURCE -D_FILE_OFFSET_BITS=64 -ffp-contract=off -fno-math-errno \
        -fno-fast-math -fno-strict-aliasing -fvisibility=hidden -fPIC \
        -Iinclude -Isrc
# PIN comes after the user's CFLAGS so that it always wins (-ffp-contract=fast in CFLAGS
# is overridden, not obeyed). Flags that break the contract stop the build: the
# preprocessor guard src/core/fpguard.h catches those that announce themselves
# (-ffast-math, -Ofast, ...); UNSAFE_FP names the rest, which announce nothing.
PIN := -ffp-contract=off
ALL_CFLAGS = $(BASE) $(WARN) $(WERROR) $(OPT) $(SANFLAGS) $(CFLAGS) $(PIN)
UNSAFE_FP := -ffast-math -Ofast -ffinite-math-only -funsafe-math-optimizations \
        -fassociative-math -freciprocal-math -fno-signed-zeros -fno-honor-nans \
        -fno-honor-infinities -ffp-model=fast -ffp-model=aggressive
ifneq ($(filter $(UNSAFE_FP),$(OPT) $(SANFLAGS) $(CFLAGS)),)
$(error $(filter $(UNSAFE_FP),$(OPT) $(SANFLAGS) $(CFLAGS)) breaks the determinism contract (docs/determinism.md): build without it)
endif
LIBS := -llmdb -lhiredis -lzstd -lxxhash -lpthread -lm

# src/ is layered (README "Layout"); every src/<layer>/*.c is part of the library.
LAYERS  := core tokenizer quant coder grammar cuda engine container store
SRC     := $(sort $(foreach l,$(LAYERS),$(wildcard src/$(l)/*.c)))
ifeq ($(CUDA),1)
SRC     := $(filter-out src/cuda/cu_stub.c,$(SRC))
endif
OBJ     := $(SRC:src/%.c=$(BUILD)/obj/%.o)
DEP     := $(OBJ:.o=.d)
TESTSRC := $(sort $(wildcard tests/test_*.c))
TESTBIN := $(TESTSRC:tests/%.c=$(BUILD)/tests/%)
FUZZSRC := $(sort $(wildcard fuzz/fuzz_*.c))
REPLAYBIN := $(FUZZSRC:fuzz/fuzz_%.c=$(BUILD)/tests/test_fuzz_%)
# tools/: cli/ (the CLI's plumbing: option parser, outputs, main), cmd/ (the commands),
# bench/ (seqkv bench and its programs); a .c directly in tools/ is built too.
TOOLSRC := $(sort $(wildcard tools/*.c tools/*/*.c))
TOOLINC := -Itools -Itools/cli -Itools/bench
# The Python package's extension (python/; its rule and why sanitizer builds skip it: below).
PYTHON ?= /usr/bin/python3
PYEXT := $(BUILD)/python/.built
PYSRC := python/setup.py $(wildcard python/seqkv/*.c python/seqkv/*.py python/seqkv/*.pyi)
# The HTTP server (src/server/): linked into the seqkv binary only, not into libseqkv.
# The HTTP server is linked into the seqkv binary only; its chat templates (template*.c)
# are in the library (see the end of this file).
SERVERSRC := $(filter-out src/server/template%.c,$(sort $(wildcard src/server/*.c)))
SERVERLIBS := -lmicrohttpd -ljansson -lcurl
BENCHSRC := $(sort $(wildcard bench/*.c))
BENCHBIN := $(BENCHSRC:bench/%.c=$(BUILD)/bench/%)

# The CUDA backend (CUDA=1; docs/cuda.md): nvcc for one architecture (CUDA_ARCH: sm_90a is
# H100 / H200), no fused multiply-add it was not told to make (-fmad=false), IEEE division and
# square root, no flush to zero, never fast math; the runtime linked statically (a machine
# needs only the driver). Without CUDA=1, src/cuda/cu_stub.c answers "built without CUDA".
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= sm_90a
NVCCFLAGS ?=
UNSAFE_NV := -use_fast_math --use_fast_math -fmad=true --fmad=true -ftz=true --ftz=true \
        -prec-div=false --prec-div=false -prec-sqrt=false --prec-sqrt=false
ifneq ($(filter $(UNSAFE_NV),$(NVCCFLAGS)),)
$(error $(filter $(UNSAFE_NV),$(NVCCFLAGS)) breaks the determinism contract (docs/determinism.md): build without it)
endif
comma   := ,
NV_PIN  := -fmad=false -prec-div=true -prec-sqrt=true -ftz=false
NV_HOST := -fPIC,-Wall,-Wextra,-Wshadow,-ffp-contract=off,-fno-fast-math,-fvisibility=hidden$(if $(WERROR),$(comma)-Werror)
ifeq ($(CUDA),1)
CUSRC   := $(sort $(wildcard src/cuda/*.cu))
OBJ     += $(CUSRC:src/%.cu=$(BUILD)/obj/%.o)
LIBS    += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
endif
NV_ALL   = -std=c++17 -O2 -arch=$(CUDA_ARCH) $(if $(WERROR),-Werror all-warnings) $(NVCCFLAGS) $(NV_PIN) \
        -Xcompiler $(NV_HOST) -Iinclude -Isrc
NV_DEPS := $(wildcard src/cuda/*.h) src/core/fpguard.h src/core/f16.h src/core/detf32.h Makefile
$(BUILD)/obj/cuda/%.o: src/cuda/%.cu $(NV_DEPS)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NV_ALL) -c $< -o $@
# The kernels' PTX, read by scripts/cuda_ptx_check.sh (every f32 multiply and add rounded
# on its own, no approximations, no flush to zero): `make CUDA=1 cuda-ptx-check`.
$(BUILD)/cuda/%.ptx: src/cuda/%.cu $(NV_DEPS)
	@mkdir -p $(dir $@)
	$(Q)$(NVCC) $(NV_ALL) -ptx $< -o $@
.PHONY: cuda-ptx-check
cuda-ptx-check: $(patsubst src/cuda/%.cu,$(BUILD)/cuda/%.ptx,$(wildcard src/cuda/*.cu))
	scripts/cuda_ptx_check.sh $^

# Kernels compiled for AVX2+FMA+F16C; chosen at run time by CPU detection.
$(BUILD)/obj/%_avx2.o: ALL_CFLAGS += -mavx2 -mfma -mf16c
$(BUILD)/obj/%_avx512.o: ALL_CFLAGS += -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni

.PHONY: all lib test san bench fuzz install uninstall clean demo check-layers funclen metrics
all: lib $(BUILD)/seqkv $(TESTBIN) $(REPLAYBIN) $(BENCHBIN) $(PYEXT)
lib: $(BUILD)/libseqkv.a $(BUILD)/libseqkv.so $(BUILD)/seqkv.pc

# V=1 shows full command lines.
Q := $(if $(V),,@)

# Header dependencies come from the compiler (-MMD -MP), one .d file per object.
$(BUILD)/obj/%.o: src/%.c Makefile
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

-include $(DEP)

$(BUILD)/libseqkv.a: $(OBJ)
	rm -f $@; ar rcs $@ $^

$(BUILD)/libseqkv.so: $(OBJ)
	$(CC) -shared -Wl,-soname,libseqkv.so.0 $(SANFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/seqkv: $(TOOLSRC) $(SERVERSRC) $(wildcard tools/*.h tools/*/*.h) $(wildcard src/*/*.h) include/seqkv.h $(BUILD)/libseqkv.a Makefile
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -fvisibility=default $(TOOLINC) -DSEQKV_DEFAULT_MODEL='"$(DEFAULT_MODEL)"' -o $@ $(TOOLSRC) $(SERVERSRC) $(BUILD)/libseqkv.a $(SERVERLIBS) $(LIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(wildcard src/*/*.h) include/seqkv.h $(BUILD)/libseqkv.a | $(BUILD)/tests
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -o $@ $< $(BUILD)/libseqkv.a $(LIBS)

$(BUILD)/tests/test_fuzz_%: fuzz/fuzz_%.c tests/fuzz_replay.c tests/kvtc_fixture.h $(wildcard src/*/*.h) include/seqkv.h $(BUILD)/libseqkv.a | $(BUILD)/tests
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -DFUZZ_NAME='"$*"' -o $@ $< tests/fuzz_replay.c $(FUZZ_EXTRA) $(BUILD)/libseqkv.a $(LIBS)

# tests/test_grammar and fuzz/fuzz_grammar also check the JSON-schema converter
# (src/server/schema*.c, jansson), which is linked into the seqkv binary only.
SCHEMASRC := $(sort $(wildcard src/server/schema*.c))
$(BUILD)/tests/test_grammar: tests/test_grammar.c tests/test.h $(SCHEMASRC) $(wildcard src/*/*.h) include/seqkv.h $(BUILD)/libseqkv.a | $(BUILD)/tests
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -o $@ $< $(SCHEMASRC) $(BUILD)/libseqkv.a -ljansson $(LIBS)
# tests/test_sample checks the server's sampling chain (src/server/sample.c, seqkv binary only)
$(BUILD)/tests/test_sample: tests/test_sample.c tests/test.h src/server/sample.c $(wildcard src/*/*.h) include/seqkv.h $(BUILD)/libseqkv.a | $(BUILD)/tests
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -o $@ $< src/server/sample.c $(BUILD)/libseqkv.a $(LIBS)
# tests/test_think checks how a chat reply's thoughts split from its content (src/server/think.c)
$(BUILD)/tests/test_think: tests/test_think.c tests/test.h src/server/think.c $(wildcard src/*/*.h) include/seqkv.h $(BUILD)/libseqkv.a | $(BUILD)/tests
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -o $@ $< src/server/think.c $(BUILD)/libseqkv.a $(LIBS)
$(BUILD)/tests/test_fuzz_grammar: FUZZ_EXTRA = $(SCHEMASRC) -ljansson
$(BUILD)/tests/test_fuzz_grammar: $(SCHEMASRC)

# The HTTP fuzzers (fuzz/fuzz_http.c: the request path; fuzz_http_mhd.c: through
# libmicrohttpd) and the tool-call fuzzer (fuzz_tools.c) link the server, like the seqkv binary.
$(BUILD)/tests/test_fuzz_http $(BUILD)/tests/test_fuzz_http_mhd $(BUILD)/tests/test_fuzz_tools: FUZZ_EXTRA = $(SERVERSRC) $(SERVERLIBS)
$(BUILD)/tests/test_fuzz_http $(BUILD)/tests/test_fuzz_http_mhd $(BUILD)/tests/test_fuzz_tools: $(SERVERSRC) fuzz/http_server.h

$(BUILD)/bench/%: bench/%.c $(wildcard bench/*.h) $(wildcard src/*/*.h) include/seqkv.h $(BUILD)/libseqkv.a | $(BUILD)/bench
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -o $@ $< $(BUILD)/libseqkv.a $(LIBS)

# pkg-config files. seqkv.pc links the shared library, with an rpath when PREFIX is not a
# system prefix (so a program built against it starts without LD_LIBRARY_PATH);
# seqkv-static.pc links libseqkv.a itself: `pkg-config --static seqkv` cannot, since its
# -lseqkv finds libseqkv.so first.
SYSTEM_PREFIXES := /usr /usr/local
PC_RPATH = $(if $(filter $(SYSTEM_PREFIXES),$(PREFIX)),, -Wl,-rpath,$${libdir})
PC_HEAD = prefix=$(PREFIX)\nlibdir=$${prefix}/lib\nincludedir=$${prefix}/include\n\n
PC_TEXT = $(PC_HEAD)Name: seqkv\nDescription: Sequential KV-cache compression\nVersion: $(VERSION)\nLibs: -L$${libdir} -lseqkv$(PC_RPATH)\nLibs.private: $(LIBS)\nCflags: -I$${includedir}\n
PC_STATIC_TEXT = $(PC_HEAD)Name: seqkv-static\nDescription: Sequential KV-cache compression (static library)\nVersion: $(VERSION)\nLibs: $${libdir}/libseqkv.a $(LIBS)\nCflags: -I$${includedir}\n
# `make install` to a system prefix refreshes the dynamic linker's cache; not to a user
# PREFIX, nor with DESTDIR (a package build).
LDCONFIG ?= ldconfig
INSTALL_LDCONFIG = $(if $(DESTDIR),,$(filter $(SYSTEM_PREFIXES),$(PREFIX)))
# The Python package (python/, README "Python"): the extension seqkv._seqkv linked with
# this build's libseqkv.a, built by python/setup.py with Debian's python3 into
# $(BUILD)/python (tests/test_python.py imports it from there). Sanitizer builds do not
# build it: a sanitized extension loads into python only with the sanitizer runtime
# preloaded, so they leave $(BUILD)/python/SKIP saying so and the test skips.
$(PYEXT): $(PYSRC) include/seqkv.h $(BUILD)/libseqkv.a
	@mkdir -p $(BUILD)/python && rm -f $(BUILD)/python/SKIP
ifeq ($(SANFLAGS)$(filter 1,$(CUDA)),)
	@$(if $(Q),echo "  PYEXT   $(BUILD)/python/seqkv")
	$(Q)cd python && SEQKV_LIB=$(abspath $(BUILD))/libseqkv.a SEQKV_CFLAGS='$(WERROR)' $(PYTHON) setup.py -q \
	    build_py -d $(abspath $(BUILD))/python build_ext -b $(abspath $(BUILD))/python \
	    -t $(abspath $(BUILD))/python/tmp >$(abspath $(BUILD))/python/build.log 2>&1 || \
	    { cat $(abspath $(BUILD))/python/build.log; echo "python extension: build failed (scripts/install-deps.sh installs python3-dev, python3-setuptools, python3-numpy)"; exit 1; }
	$(Q)grep -E '\.c:[0-9]+:[0-9]+: (warning|error)' $(BUILD)/python/build.log || true
else ifneq ($(SANFLAGS),)
	@echo "sanitizer build ($(SANFLAGS)): the Python extension is not built (a sanitized extension needs the sanitizer runtime preloaded into python); make test runs it" >$(BUILD)/python/SKIP
else
	@echo "CUDA build: the Python extension is not built (python/setup.py does not link the CUDA runtime); make test runs it" >$(BUILD)/python/SKIP
endif
	@touch $@

$(BUILD)/seqkv.pc: Makefile | $(BUILD)
	printf '$(PC_TEXT)' > $@
	printf '$(PC_STATIC_TEXT)' > $(BUILD)/seqkv-static.pc

$(BUILD) $(BUILD)/tests $(BUILD)/bench:
	mkdir -p $@

test: all
	tests/run.sh $(BUILD)

# Fails when a file includes a header of a higher layer (scripts/check_layers.sh).
check-layers: $(BUILD)/libseqkv.a
	scripts/check_layers.sh . $(BUILD)

# Function-length figures of src/ and tools/; `make metrics` rewrites docs/metrics.md with them.
funclen:
	scripts/funclen.py --list 20 src tools

metrics:
	scripts/funclen.py --list 20 --doc docs/metrics.md src tools

# The main job on the bundled model: store a session both ways, restore it verified.
demo: all
	scripts/demo.sh $(BUILD)

# AddressSanitizer + UndefinedBehaviorSanitizer build of everything, then the suite.
san:
	$(MAKE) BUILD=build-san OPT='-O1 -g' \
	    SANFLAGS='-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer' all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh build-san

# clang's UndefinedBehaviorSanitizer (it checks float-to-int overflow, gcc's does not), every
# finding fatal, then the suite: the clang build CI tests (issue 41).
ubsan:
	$(MAKE) CC=clang BUILD=build-clang SANFLAGS='-fsanitize=undefined -fno-sanitize-recover=all' all
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 tests/run.sh build-clang

bench: all
	bench/run.sh $(BUILD)

# seqkv bench (issue 8): every KV representation compared, report + CSVs + plots in
# bench/results/report/ (docs/bench.md); a few minutes on 2 cores.
.PHONY: report
report: $(BUILD)/seqkv
	nice $(BUILD)/seqkv bench -o bench/results/report
	scripts/sync_readme_results.py bench/results/report/report.md README.md

fuzz:
	$(MAKE) BUILD=build-fuzz CC=clang OPT='-O1 -g' \
	    SANFLAGS='-fsanitize=address,undefined,fuzzer-no-link -fno-sanitize-recover=all -fsanitize-coverage-ignorelist=fuzz/coverage_ignore.txt' lib
	mkdir -p build-fuzz/fuzz
	for f in $(FUZZSRC); do n=$$(basename $$f .c); \
	    x=; case $$n in fuzz_http*|fuzz_tools) x="$(SERVERSRC) $(SERVERLIBS)";; fuzz_grammar) x="$(SCHEMASRC) -ljansson";; esac; \
	    clang $(BASE) -O1 -g -fsanitize=address,undefined,fuzzer -fno-sanitize-recover=all -o build-fuzz/fuzz/$$n $$f $$x build-fuzz/libseqkv.a $(LIBS) || exit 1; done
	@echo "fuzzers in build-fuzz/fuzz/; run e.g. build-fuzz/fuzz/fuzz_gguf fuzz/corpus/gguf"

install: lib $(BUILD)/seqkv
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/seqkv $(DESTDIR)$(PREFIX)/bin/seqkv
	install -m 644 $(BUILD)/libseqkv.a $(DESTDIR)$(PREFIX)/lib/libseqkv.a
	install -m 755 $(BUILD)/libseqkv.so $(DESTDIR)$(PREFIX)/lib/libseqkv.so.0
	ln -sf libseqkv.so.0 $(DESTDIR)$(PREFIX)/lib/libseqkv.so
	install -m 644 include/seqkv.h $(DESTDIR)$(PREFIX)/include/seqkv.h
	install -d $(DESTDIR)$(PREFIX)/share/seqkv
	install -m 644 models/$(DEFAULT_MODEL) $(DESTDIR)$(PREFIX)/share/seqkv/$(DEFAULT_MODEL)
	printf '$(PC_TEXT)' > $(DESTDIR)$(PREFIX)/lib/pkgconfig/seqkv.pc
	printf '$(PC_STATIC_TEXT)' > $(DESTDIR)$(PREFIX)/lib/pkgconfig/seqkv-static.pc
	install -d $(DESTDIR)$(PREFIX)/share/man/man1 && install -m 644 docs/seqkv.1 $(DESTDIR)$(PREFIX)/share/man/man1/seqkv.1
	$(if $(INSTALL_LDCONFIG),$(LDCONFIG))

uninstall:
	rm -rf $(DESTDIR)$(PREFIX)/share/seqkv
	rm -f $(DESTDIR)$(PREFIX)/bin/seqkv $(DESTDIR)$(PREFIX)/lib/libseqkv.* \
	    $(DESTDIR)$(PREFIX)/include/seqkv.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/seqkv.pc \
	    $(DESTDIR)$(PREFIX)/lib/pkgconfig/seqkv-static.pc
	rm -f $(DESTDIR)$(PREFIX)/share/man/man1/seqkv.1

clean:
	rm -rf build build-san build-fuzz build-cuda

# Fault injection (tests/test_store_faults.c): the library's allocations in this one test
# binary go through the test's wrappers, which can fail them on purpose.
$(BUILD)/tests/test_store_faults: private ALL_CFLAGS += -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=mmap64

# Crash safety (docs/reliability.md): 1,000 SIGKILLs during concurrent puts, gets and gcs,
# then every committed session restores verified. Minutes; not part of `make test`.
.PHONY: crashtest ubsan
crashtest: $(BUILD)/crashtest
	nice $(BUILD)/crashtest 1000

$(BUILD)/crashtest: tests/crashtest/crashtest.c include/seqkv.h $(BUILD)/libseqkv.a
	$(CC) $(ALL_CFLAGS) -Wno-missing-prototypes -o $@ $< $(BUILD)/libseqkv.a $(LIBS)

# Chat templates (src/server/template*.c, docs/templates.md): libc-only, compiled into the
# library so tests/test_template and fuzz/fuzz_template link them like any other module.
TMPL_SRC := $(sort $(wildcard src/server/template*.c))
TMPL_OBJ := $(TMPL_SRC:src/%.c=$(BUILD)/obj/%.o)
-include $(TMPL_OBJ:.o=.d)
$(BUILD)/libseqkv.a $(BUILD)/libseqkv.so: $(TMPL_OBJ)

# Reliability campaign (docs/reliability.md, scripts/reliability.sh): every fuzz target for
# FUZZ_SECONDS in turn under ASan+UBSan (rows in fuzz/results.tsv, table regenerated), and
# the CLI tests with seqkv under Valgrind memcheck (VALGRIND_TESTS: which tests/*.py).
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= $(FUZZSRC:fuzz/fuzz_%.c=%)
.PHONY: fuzz-long valgrind-cli
fuzz-long: fuzz
	for t in $(FUZZ_TARGETS); do scripts/reliability.sh run $$t $(FUZZ_SECONDS) || exit 1; done
	scripts/reliability.sh doc

valgrind-cli: $(BUILD)/seqkv
	SEQKV_BUILD=$(BUILD) scripts/reliability.sh valgrind $(VALGRIND_TESTS)

# Side by side with llama.cpp (issue 15; docs/bench.md): random-weight GGUFs of 1B geometries,
# llama.cpp's llama-bench built once outside the repository, and seqkv on the same files.
# Results: bench/results/peer.md and peer.csv. An hour or more on 2 cores; PEER_* narrow it.
.PHONY: bench-peer
bench-peer: $(BUILD)/peer_seqkv
	scripts/peer/run.sh $(BUILD)/peer_seqkv

$(BUILD)/peer_seqkv: scripts/peer/peer_seqkv.c include/seqkv.h $(BUILD)/libseqkv.a
	$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libseqkv.a $(LIBS)

# glimpse -- build, test, demo.  `make` builds; `make test` installs what is missing (Debian
# packages, as root), builds and runs every test; `make asan` does the same under
# AddressSanitizer and UBSan; `make fuzz` runs the fuzzers (FUZZ_SECONDS, default 120) under
# both; `make demo` trains a small model and shows its loss and maps.  `make reproduce` trains
# the papers' tables (hours; QUICK=1 minutes) and keeps their checkpoints in models/reproduce/;
# `make verify` re-scores those checkpoints against results/*.json (minutes, no training).
#
# BUILD names the build folder, so several builds (plain, asan) can live side by side.
#
# `make install` puts everything under PREFIX (DESTDIR before it for staging); `make
# uninstall` removes what it wrote.  The folders can be named one by one: a LuaRocks build
# (glimpse-scm-1.rockspec) sets BINDIR, LUA_CDIR (glimpse.so) and LUA_DIR (the Lua library)
# to its tree's folders.

BUILD    ?= build
PREFIX   ?= /usr/local
LUA_VER  := 5.4
VERSION  := 0.1.0
SOVERSION := 0
BINDIR   ?= $(PREFIX)/bin
LIBDIR   ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
LUA_CDIR ?= $(PREFIX)/lib/lua/$(LUA_VER)
LUA_DIR  ?= $(PREFIX)/share/lua/$(LUA_VER)
DATADIR  ?= $(PREFIX)/share/glimpse
PLUGINDIR ?= $(LIBDIR)/glimpse
CC       ?= cc
OPT      ?= -O3 -march=native -fno-math-errno
CFLAGS   ?= $(OPT) -g
WARN     := -std=c11 -Wall -Wextra -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L
LUA_INC  := -I/usr/include/lua$(LUA_VER)
INC      := -Iengine -Ibindings $(LUA_INC) -I/usr/include/stb
SAN      ?=
ALL_CFLAGS = $(WARN) $(CFLAGS) $(SAN) -fPIC $(INC) -DGLIMPSE_ROOT='"$(CURDIR)"' \
             -DGLIMPSE_LUA_DIR='"$(LUA_DIR)"' \
             -DGLIMPSE_MPI_PLUGIN='"$(abspath $(BUILD))/libglimpse_mpi.so"' \
             -DGLIMPSE_MPI_PLUGIN_INSTALLED='"$(PLUGINDIR)/libglimpse_mpi.so"'
LIBS     := -lm -ldl -lz -lpng -ljpeg -lpthread
# the engine as a shared library for C programs (OpenBLAS is dlopen()ed at run time)
SONAME   := libglimpse.so.$(SOVERSION)
SOLIB    := libglimpse.so.$(VERSION)

# MPI, for glimpse.dist: found through mpicc (Open MPI's --showme, MPICH's -compile_info),
# else a Debian mpi.h, when the plugin $(BUILD)/libglimpse_mpi.so is built (after the
# packages are installed, so a fresh machine gets it on its first `make test`).  glimpse
# loads the plugin with dlopen only when a run under mpirun/srun calls glimpse.dist
# (bindings/l_dist.c says why); without MPI there is no plugin and glimpse.dist is one rank.
# `make MPICC= MPI_H=` builds without it.
MPICC    ?= mpicc
MPI_H    ?= /usr/include/$(shell $(CC) -print-multiarch 2>/dev/null)/mpi/mpi.h

ENGINE_SRC   := $(sort $(wildcard engine/*.c))
# the executable's own sources (they use readline); the others make glimpse.so too
EXE_SRC      := bindings/main.c bindings/completion.c
BINDING_SRC  := $(sort $(filter-out $(EXE_SRC),$(wildcard bindings/*.c)))
ENGINE_OBJ   := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
BINDING_OBJ  := $(BINDING_SRC:%.c=$(BUILD)/%.o)
EXE_OBJ      := $(EXE_SRC:%.c=$(BUILD)/%.o)
HEADERS      := $(wildcard engine/*.h bindings/*.h)

# Debian packages the build, the tests and the demo need (chromium: tests/test_report.lua
# renders a report headless and checks its layout; libpng and libjpeg-turbo read PNG and
# JPEG, see engine/image_load.c; clang and its runtime build the fuzzers of `make fuzz`;
# luarocks: tests/test_install.lua installs the rockspec into a temporary tree)
DEB_PKGS := lua5.4 liblua5.4-dev libopenblas-dev libstb-dev lua-unit zlib1g-dev \
            libpng-dev libjpeg62-turbo-dev clang libclang-rt-14-dev \
            dataset-fashion-mnist lua-cjson lua-argparse libreadline-dev chromium \
            libopenmpi-dev openmpi-bin luarocks
STAMP    := $(BUILD)/.deps-ok

.PHONY: all deps test asan fuzz demo install uninstall examples clean bench fixtures check-warnings
all: $(BUILD)/glimpse $(BUILD)/glimpse.so $(BUILD)/$(SOLIB) $(BUILD)/libglimpse_mpi.so

# Install missing packages once per build folder (apt-get needs root; without it we say
# which packages are missing and stop).
$(STAMP):
	@mkdir -p $(BUILD)
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || exit 1; \
	  else \
	    sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || \
	    { echo "missing Debian packages:$$missing (run as root or install them)"; exit 1; }; \
	  fi; \
	fi
	@touch $@
deps: $(STAMP)

$(BUILD)/%.o: %.c $(HEADERS) | $(STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libglimpse.a: $(ENGINE_OBJ)
	ar rcs $@ $^

# the engine alone for C programs (engine/glimpse.h; docs/api/c.md), with a soname; the
# links libglimpse.so.0 and libglimpse.so beside it, as `make install` makes them.
# --no-undefined only without sanitizers: their runtime is linked into the program, not here
$(BUILD)/$(SOLIB): $(ENGINE_OBJ)
	$(CC) $(CFLAGS) $(SAN) -shared -Wl,-soname,$(SONAME) $(if $(SAN),,-Wl,--no-undefined) -o $@ $^ $(LIBS)
	ln -sf $(SOLIB) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libglimpse.so

# the C examples, linked with the static engine: `make examples` -> $(BUILD)/examples/NAME
EXAMPLES := $(patsubst %.c,$(BUILD)/%,$(wildcard examples/*.c))
examples: $(EXAMPLES)
$(BUILD)/examples/%: examples/%.c engine/glimpse.h $(BUILD)/libglimpse.a
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(CFLAGS) -Iengine -o $@ $< $(BUILD)/libglimpse.a $(LIBS)

# the executable: REPL and script runner, with the module built in
$(BUILD)/glimpse: $(EXE_OBJ) $(BINDING_OBJ) $(BUILD)/libglimpse.a
	$(CC) $(CFLAGS) $(SAN) -Wl,-E -o $@ $^ -llua$(LUA_VER) -lreadline $(LIBS)

# the module for a stock lua5.4: require "glimpse"
$(BUILD)/glimpse.so: $(BINDING_OBJ) $(BUILD)/libglimpse.a
	$(CC) $(CFLAGS) $(SAN) -shared -o $@ $^ $(LIBS)

# the MPI plugin: dist_mpi.c alone, linked with libmpi (nothing of glimpse or Lua in it)
$(BUILD)/libglimpse_mpi.so: bindings/mpi/dist_mpi.c bindings/mpi/dist_mpi.h | $(STAMP)
	@mkdir -p $(dir $@)
	@if [ -n "$(MPICC)" ] && command -v "$(MPICC)" > /dev/null 2>&1; then \
	  flags="$$($(MPICC) --showme:compile 2>/dev/null || $(MPICC) -compile_info | cut -d' ' -f2-)"; \
	  libs="$$($(MPICC) --showme:link 2>/dev/null || $(MPICC) -link_info | cut -d' ' -f2-)"; \
	elif [ -n "$(MPI_H)" ] && [ -f "$(MPI_H)" ]; then \
	  flags="-I$(dir $(MPI_H))"; libs="-lmpi"; \
	else \
	  echo "no MPI (no mpicc, no mpi.h): glimpse.dist will be one rank"; exit 0; \
	fi; \
	echo "$(CC) $(WARN) $(CFLAGS) $(SAN) -fPIC -shared $$flags -o $@ $< $$libs"; \
	$(CC) $(WARN) $(CFLAGS) $(SAN) -fPIC -shared $$flags -o $@ $< $$libs

TEST_ARGS ?=
# the whole suite also runs a short fuzzing smoke (a report there is a real bug)
FUZZ_SMOKE_SECONDS ?= 60
test: all
	@if [ -z "$(TEST_ARGS)" ]; then $(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS) FUZZ_SEED=1; fi
	$(BUILD)/glimpse tests/run.lua $(TEST_ARGS)

asan:
	$(MAKE) BUILD=build-asan OPT="-O1 -fno-omit-frame-pointer" \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-sanitize=shift-base" all
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  GLIMPSE_SANITIZED=1 build-asan/glimpse tests/run.lua $(TEST_ARGS)

# Fuzzing: libFuzzer targets for the safetensors, image and gzip/IDX readers, and a Lua
# driver calling the public API with hostile arguments, all under ASan + UBSan (clang).
# tests/fuzz/run.sh splits FUZZ_SECONDS between them; seeds are tests/corpus/*/.
FUZZ_SECONDS ?= 120
FUZZ_SEED    ?=
FUZZ_BUILD   := build-fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-sanitize=shift-base
FUZZ_TARGETS := $(FUZZ_BUILD)/fuzz_safetensors $(FUZZ_BUILD)/fuzz_image $(FUZZ_BUILD)/fuzz_idx
fuzz:
	@mkdir -p $(FUZZ_BUILD) && $(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=clang OPT="-O1 -fno-omit-frame-pointer" \
	  SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" all $(FUZZ_TARGETS) > $(FUZZ_BUILD)/build.log 2>&1 || \
	  { tail -30 $(FUZZ_BUILD)/build.log; exit 1; }
	tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_SEED)

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_file.h $(FUZZ_BUILD)/libglimpse.a
	clang -g -O1 $(FUZZ_SAN) -fsanitize=fuzzer $(INC) -o $@ $< $(FUZZ_BUILD)/libglimpse.a $(LIBS)

demo: all
	$(BUILD)/glimpse scripts/demo.lua

# the papers' tables: results/<table>.json and docs/results.md (hours; QUICK=1: minutes, into
# out/reproduce-quick; TINY=1: seconds, into out/reproduce-tiny: each mode its own checkpoints
# and records).  A killed run resumes: finished runs are kept.
.PHONY: reproduce
reproduce: all
	$(BUILD)/glimpse scripts/reproduce.lua $(if $(QUICK),--quick) $(if $(TINY),--tiny) $(REPRODUCE_ARGS)

# the published numbers checked without training: every checkpoint kept in models/reproduce/
# (QUICK=1, TINY=1: that mode's out/reproduce-<mode>/models) re-evaluated by its run's own
# command and compared with results/*.json row by row; exits non-zero on a mismatch or when
# models/reproduce/ is above 25 MB.  VERIFY_ARGS: e.g. --tables ntm_copy
.PHONY: verify
verify: all
	$(BUILD)/glimpse scripts/reproduce.lua --verify $(if $(QUICK),--quick) $(if $(TINY),--tiny) $(VERIFY_ARGS)

# install: install-lua, the executable, glimpse.so (require "glimpse" from a stock lua5.4),
# the Lua library with the datasets (as glimpse.datasets.*), the MPI plugin, the shipped
# models and the docs (what the rockspec installs); and install-c, the engine for C:
# libglimpse.a, libglimpse.so (soname libglimpse.so.0), glimpse.h (the public header only)
# and glimpse.pc
.PHONY: install-lua install-c
install: install-lua install-c
install-lua: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LUA_CDIR) $(DESTDIR)$(LUA_DIR)/glimpse
	install -m 755 $(BUILD)/glimpse $(DESTDIR)$(BINDIR)/glimpse
	install -m 644 $(BUILD)/glimpse.so $(DESTDIR)$(LUA_CDIR)/glimpse.so
	if [ -f $(BUILD)/libglimpse_mpi.so ]; then install -d $(DESTDIR)$(PLUGINDIR) && \
	  install -m 644 $(BUILD)/libglimpse_mpi.so $(DESTDIR)$(PLUGINDIR)/; fi
	cp -r bindings/glimpse/. $(DESTDIR)$(LUA_DIR)/glimpse/
	# files of older layouts that would shadow the packages of this one
	cd $(DESTDIR)$(LUA_DIR)/glimpse && rm -f nn.lua nn_rnn.lua nn_attention.lua \
	  models.lua optim.lua attention.lua data.lua captioner.lua
	if [ -d datasets ]; then cp -r datasets $(DESTDIR)$(LUA_DIR)/glimpse/; fi
	if ls models/*.safetensors > /dev/null 2>&1; then install -d $(DESTDIR)$(DATADIR)/models && \
	  cp models/*.safetensors $(DESTDIR)$(DATADIR)/models/; fi
	if [ -d docs ]; then install -d $(DESTDIR)$(DATADIR) && cp -r docs $(DESTDIR)$(DATADIR)/; fi
install-c: $(BUILD)/libglimpse.a $(BUILD)/$(SOLIB)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 $(BUILD)/libglimpse.a $(DESTDIR)$(LIBDIR)/libglimpse.a
	install -m 755 $(BUILD)/$(SOLIB) $(DESTDIR)$(LIBDIR)/$(SOLIB)
	ln -sf $(SOLIB) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libglimpse.so
	install -m 644 engine/glimpse.h $(DESTDIR)$(INCLUDEDIR)/glimpse.h
	# pkg-config's file, made for this PREFIX: libdir and includedir under $${prefix} where
	# they are, so that `pkg-config --define-prefix` finds a staged copy (DESTDIR) too
	sed -e 's|@PREFIX@|$(PREFIX)|' \
	  -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
	  -e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|' \
	  -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS@|$(LIBS)|' glimpse.pc.in > $(BUILD)/glimpse.pc
	install -m 644 $(BUILD)/glimpse.pc $(DESTDIR)$(PKGCONFIGDIR)/glimpse.pc

# uninstall: what install wrote (the same variables name the same places); folders of
# glimpse's own go whole, shared ones (bin, lib, include ...) stay
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/glimpse $(DESTDIR)$(LUA_CDIR)/glimpse.so \
	  $(DESTDIR)$(LIBDIR)/libglimpse.a $(DESTDIR)$(LIBDIR)/$(SOLIB) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	  $(DESTDIR)$(LIBDIR)/libglimpse.so $(DESTDIR)$(INCLUDEDIR)/glimpse.h \
	  $(DESTDIR)$(PKGCONFIGDIR)/glimpse.pc
	rm -rf $(DESTDIR)$(LUA_DIR)/glimpse $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(DATADIR)

check-warnings:
	$(MAKE) -B BUILD=build-warn CFLAGS="-O2 -Werror" all

clean:
	rm -rf build build-asan build-warn build-fuzz

# side-by-side benchmark against PyTorch 1.13 on the CPU (needs python3-torch, and
# python3-torchvision for W5, for /usr/bin/python3); --profile adds where glimpse's time goes.
# BENCH_ROUNDS rounds (median, best and spread of each side kept); BENCH_QUICK=1: 1 round,
# small sizes, a check of the machinery only
BENCH_PKGS := python3-torch python3-torchvision
BENCH_ROUNDS ?= 5
bench: all
	@missing=""; for p in $(BENCH_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing || exit 1; \
	  else echo "missing:$$missing (run as root or install them)"; exit 1; fi; \
	fi
	BENCH_ROUNDS=$(BENCH_ROUNDS) $(BUILD)/glimpse bench/run.lua --profile $(BENCH_ARGS)

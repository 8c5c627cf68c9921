# SPDX-License-Identifier: MIT
# verity build. GNU Make, out-of-tree builds into build/<type>/.
#
#   make                  release build of build/release/verity
#   make TYPE=debug       debug | release | asan (ASan+UBSan) | ubsan | tsan | faults
#   make test             release and ASan+UBSan suites, the TSan build on the concurrency
#                         tests, and the fault build; last line "N passed, N failed"
#   make check TYPE=tsan  one build type's suite
#   make check-deps       the include rule of docs/architecture.md (scripts/check_deps.sh)
#   make fuzz             libFuzzer targets (clang) into build/fuzz/
#   make format           clang-format every C file
#   make install          PREFIX=/usr/local DESTDIR= : build/<type>/verity, verity(1), the Grafana
#                         dashboard, the systemd unit and an example environment file
#   make uninstall        removes exactly what install put there (same PREFIX and DESTDIR)
#
# ISA flags are applied only to kernel files named *_avx2.c / *_avx512.c; everything else is
# built for baseline x86-64 and the kernels are picked at start-up (src/kernels/kn_dispatch.c).
# -ffp-contract=off everywhere: a*b+c is never silently fused, so the scalar references and the
# SIMD kernels perform the same IEEE operations and produce the same bits (P1, design.md).

TYPE ?= release
CC ?= gcc
V ?= 0
ifeq ($(V),0)
  Q := @
  SAY = @echo "  $(1) $@"
else
  Q :=
  SAY =
endif
BUILD := build/$(TYPE)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wpointer-arith -Wformat=2 -Wundef -Wno-unused-parameter
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -Isrc -pthread -ffp-contract=off -fno-math-errno \
               -fno-strict-aliasing -MMD -MP $(WARN)

ifeq ($(TYPE),release)
  OPT := -O2 -g -DNDEBUG
else ifeq ($(TYPE),debug)
  OPT := -O0 -g3
else ifeq ($(TYPE),asan)
  OPT := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
else ifeq ($(TYPE),ubsan)
  OPT := -O1 -g -fsanitize=undefined -fno-sanitize-recover=all
else ifeq ($(TYPE),tsan)
  OPT := -O1 -g -fsanitize=thread
else ifeq ($(TYPE),faults)
  OPT := -O2 -g -DNDEBUG -DVERITY_FAULTS=1
else
  $(error unknown TYPE '$(TYPE)': use debug, release, asan, ubsan, tsan or faults)
endif

CFLAGS_ALL := $(BASE_CFLAGS) $(OPT) $(EXTRA_CFLAGS)
LDLIBS := -lm -pthread -lpcre2-8 -lcurl -lxxhash -lhiredis
# the ucx KV transport (src/disagg/kv_xfer_ucx.c): Debian's libucx-dev, linked --as-needed so only
# a binary that uses the KV transfer loads it. Under TSan such a binary runs with
# UCX_MEM_EVENTS=no (tests/run.sh does): libucm's mmap/madvise hooks crash in TSan's interceptors.
LDLIBS += -Wl,--as-needed -lucp -lucs -Wl,--no-as-needed
LDFLAGS_ALL := $(filter -fsanitize%,$(OPT)) $(EXTRA_LDFLAGS)

ISA_AVX2 := -mavx2 -mfma -mf16c -mbmi2
ISA_AVX512 := $(ISA_AVX2) -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16

LIB_SRCS := $(sort $(shell find src -name '*.c' ! -path 'src/cli/*'))
CLI_SRCS := $(sort $(wildcard src/cli/*.c))
TEST_UTIL := tests/test_util.c
TEST_SRCS := $(sort $(wildcard tests/test_*.c))
TEST_SRCS := $(filter-out $(TEST_UTIL),$(TEST_SRCS))
FUZZ_SRCS := $(sort $(wildcard fuzz/fuzz_*.c))

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
CLI_OBJS := $(CLI_SRCS:%.c=$(BUILD)/%.o)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
REPLAY_BINS := $(FUZZ_SRCS:fuzz/fuzz_%.c=$(BUILD)/tests/replay_%)
# Test-only helper programs (a mock OpenAI-compatible server for the hunt tests, an independent
# dequantizer for the quantize tests), one per file.
TOOL_SRCS := $(sort $(wildcard tests/tools/*.c))
TOOL_BINS := $(TOOL_SRCS:tests/tools/%.c=$(BUILD)/tools/%)
LIB := $(BUILD)/libverity.a
BIN := $(BUILD)/verity

MAN := $(BUILD)/verity.1

.PHONY: all tests test check check-deps fuzz format clean bench faults install uninstall

all: $(BIN) $(MAN)

$(BUILD)/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(call SAY,CC)
	$(Q)$(CC) $(CFLAGS_ALL) $(ISA_AVX2) -c $< -o $@

$(BUILD)/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(call SAY,CC)
	$(Q)$(CC) $(CFLAGS_ALL) $(ISA_AVX512) -c $< -o $@

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(call SAY,CC)
	$(Q)$(CC) $(CFLAGS_ALL) -c $< -o $@

# The embedded default model: the assembler's .incbin reads the GGUF, which -MMD does not see.
$(BUILD)/src/cli/cli_default_model.o: models/stories260K.gguf

$(LIB): $(LIB_OBJS)
	@rm -f $@
	$(call SAY,AR)
	$(Q)ar rcs $@ $^

$(BIN): $(CLI_OBJS) $(LIB)
	$(call SAY,LD)
	$(Q)$(CC) $(LDFLAGS_ALL) $(CLI_OBJS) $(LIB) $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/tests/test_util.o $(LIB)
	$(call SAY,LD)
	$(Q)$(CC) $(LDFLAGS_ALL) $< $(BUILD)/tests/test_util.o $(LIB) $(LDLIBS) -o $@

$(BUILD)/tests/replay_%: $(BUILD)/fuzz/fuzz_%.o $(BUILD)/fuzz/replay_main.o $(LIB)
	$(call SAY,LD)
	$(Q)$(CC) $(LDFLAGS_ALL) $^ $(LDLIBS) -o $@

$(BUILD)/tools/%: $(BUILD)/tests/tools/%.o $(LIB)
	@mkdir -p $(dir $@)
	$(call SAY,LD)
	$(Q)$(CC) $(LDFLAGS_ALL) $< $(LIB) $(LDLIBS) -o $@

# The man page comes from the built binary, from the same tables as --help and `verity flags`.
$(MAN): $(BIN)
	$(call SAY,MAN)
	$(Q)$(BIN) flags --man > $@.tmp && mv $@.tmp $@

tests: $(BIN) $(MAN) $(TEST_BINS) $(REPLAY_BINS) $(TOOL_BINS)

# One build type's suite (used by `make test` and by hand: make check TYPE=tsan).
check: tests
	@tests/run.sh $(BUILD)

# The whole suite: release, then ASan+UBSan. Each prints its own summary; the last line sums both.
NPROC := $(shell nproc 2>/dev/null || echo 2)

# The dependency rule first: its PASS/FAIL lines also come from tests/cli/check_deps.sh in the
# suites, with a planted upward include that must fail.
test:
	@tests/cli/check_deps.sh
	@$(MAKE) --no-print-directory -j$(NPROC) TYPE=release tests
	@$(MAKE) --no-print-directory -j$(NPROC) TYPE=faults all
	@$(MAKE) --no-print-directory -j$(NPROC) TYPE=asan tests
	@$(MAKE) --no-print-directory -j$(NPROC) TYPE=tsan tests
	@tests/run.sh build/release build/asan build/tsan

# Fails on any #include "x/..." in src/ that docs/architecture.md does not allow, naming the
# file, line and edge.
check-deps:
	@scripts/check_deps.sh src && echo "check-deps: every include in src/ follows docs/architecture.md"

# libFuzzer builds (clang): each target links the subsystems it exercises, built without ISA
# flags (scalar kernels only). FUZZ_DEPS_<name> lists them; default: base only. FUZZ_FILES_<name>
# adds single files (from a subsystem that cannot be linked whole without ISA flags).
FUZZ_CC := clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -Isrc -g -O1 -fsanitize=fuzzer,address,undefined
FUZZ_DEPS_gguf := src/base src/gguf
FUZZ_FILES_gguf := src/kernels/kn_type_table.c
FUZZ_DEPS_chat_template := src/base src/template src/gguf src/tokenizer
FUZZ_FILES_chat_template := src/kernels/kn_type_table.c
FUZZ_DEPS_chat_tools := src/base src/toolcall src/gguf src/tokenizer
FUZZ_FILES_chat_tools := src/sample/grammar.c src/sample/grammar_vocab.c src/kernels/kn_type_table.c
FUZZ_DEPS_tokenizer := src/base src/gguf src/tokenizer
FUZZ_FILES_tokenizer := src/kernels/kn_type_table.c
FUZZ_DEPS_tool_grammar := src/base src/toolcall src/gguf src/tokenizer
FUZZ_FILES_tool_grammar := src/sample/grammar.c src/sample/grammar_vocab.c src/kernels/kn_type_table.c
# "all": every library source except the per-ISA kernel files, with scalar kernels only
FUZZ_DEPS_request := all
FUZZ_ALL := $(filter-out %_avx2.c %_avx512.c,$(LIB_SRCS))
FUZZ_DEPS_sse := src/base src/hunt
FUZZ_FILES_http := src/server/srv_http_parse.c
build/fuzz/fuzz_%: fuzz/fuzz_%.c FORCE
	@mkdir -p build/fuzz
	$(FUZZ_CC) $(FUZZ_FLAGS) $(if $(filter all,$(FUZZ_DEPS_$*)),-DVERITY_NO_SIMD=1) $< \
	  $(if $(filter all,$(FUZZ_DEPS_$*)),$(FUZZ_ALL),$(wildcard $(addsuffix /*.c,$(or $(FUZZ_DEPS_$*),src/base)))) \
	  $(FUZZ_FILES_$*) $(LDLIBS) -o $@

FORCE:

# The fault-injection build (build/faults/verity): release flags plus the FAULT toggles of
# flags.h. Never part of release builds.
faults:
	@$(MAKE) --no-print-directory TYPE=faults all

fuzz: $(FUZZ_SRCS:fuzz/fuzz_%.c=build/fuzz/fuzz_%)

bench: $(BIN)
	@bench/run.sh

# Installs the TYPE build as it is (never rebuilding another type): DESTDIR stages, PREFIX is
# where it runs from (also written into the unit's ExecStart).
PREFIX ?= /usr/local
BINDIR := $(PREFIX)/bin
MANDIR := $(PREFIX)/share/man/man1
DATADIR := $(PREFIX)/share/verity
UNITDIR ?= $(PREFIX)/lib/systemd/system
INSTALLED := $(BINDIR)/verity $(MANDIR)/verity.1 $(DATADIR)/grafana/verity.json \
             $(DATADIR)/verity.env.example $(UNITDIR)/verity.service

install: $(BIN) $(MAN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR) $(DESTDIR)$(DATADIR)/grafana \
	  $(DESTDIR)$(UNITDIR)
	install -m 755 $(BIN) $(DESTDIR)$(BINDIR)/verity
	install -m 644 $(MAN) $(DESTDIR)$(MANDIR)/verity.1
	install -m 644 contrib/grafana/verity.json $(DESTDIR)$(DATADIR)/grafana/verity.json
	install -m 644 contrib/systemd/verity.env.example $(DESTDIR)$(DATADIR)/verity.env.example
	sed 's|/usr/local/bin/verity|$(BINDIR)/verity|' contrib/systemd/verity.service \
	  > $(DESTDIR)$(UNITDIR)/verity.service
	chmod 644 $(DESTDIR)$(UNITDIR)/verity.service

uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(DATADIR)/grafana $(DESTDIR)$(DATADIR) 2>/dev/null

format:
	clang-format -i $$(find src tests fuzz bench -name '*.[ch]')

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

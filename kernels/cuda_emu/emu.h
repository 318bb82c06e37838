/* emu.h — what the parts of the host emulator of the CUDA backend's C API share
 * (kernels/cuda_emu/, README.md): every tcu_* function of kernels/cuda/cuda_ops.h, on host
 * memory, computed by the fp32 CPU ops (kernels/ops.h) with bf16 storage. It is for testing the
 * GPU code path's orchestration (bf16 activations, fp32 master weights and gradients, the
 * sequence of tcu_* calls, buffer sizes and lifetimes) on machines without a GPU; it proves
 * nothing about the CUDA kernels themselves (tests/gpu/test_gpu_ops.c on a GPU does). Link its
 * parts instead of libtessera-cuda.a: one emu_X.c per kernels/cuda/cuda_X.cu, with that file's
 * functions (emu_common.c also what the parts share), so that the SIMT build links the parts
 * whose .cu it does not run itself (Makefile EMU_SIMT_OBJ).
 *
 * File-wide conventions:
 *   - "device memory" is host memory: tcu_malloc returns 256-byte aligned blocks with a header
 *     (magic, size) in the 256 bytes before them, filled with 0xff bytes (NaN in bf16 and fp32),
 *     so that reading memory nobody wrote shows as NaN (the contract: memory is not zeroed). The
 *     emulated capacity is TSR_EMU_MEM bytes (a plain integer) or 8 GiB; live bytes are the sizes
 *     asked for (0 counts 1); tcu_malloc dies past it, tcu_try_malloc returns NULL;
 *   - 8 devices, or TSR_EMU_DEVICES (each process's capacity of this host's memory: ranks of a
 *     test take one each, or share them), no real streams: every op has finished when it returns,
 *     so streams and events are dummy handles and record, wait and sync do nothing, and a host
 *     function (tcu_launch_host) runs at once; pinned host memory is malloc; the NULL stream is
 *     accepted;
 *   - each op widens its bf16 inputs to fp32 temporaries (exact), computes with tsr_cpu_ops or a
 *     direct loop, and rounds to bf16 (nearest even, NaN stays NaN) where the real kernels round:
 *     a bf16 input gradient += is round(widen(old) + fp32 increment), an fp32 gradient += is an
 *     fp32 add (mostly the CPU op's own); GELU after a matmul reads the rounded pre_gelu;
 *   - preconditions the real ops check (shapes, NULL pointers, head size, 16-byte alignment for
 *     attention, tcu_init before the ops that need the context) exit 1 with
 *     "tessera cuda: WHAT: MSG (emulator)", as tcu_fail does;
 *   - attention backward reads the forward's lse (P = exp(s - lse)), as the real kernel does, so a
 *     stale lse shows; out is not read (the CPU op forms rowsum(dout * out) from P), except for
 *     the sinks' gradient, which reads it as the kernel does;
 *   - deterministic run to run, tokens_host or not (each output is made by one thread in a fixed
 *     order; sgemm for a fixed thread count, which the caller's cpu_ops_set_threads sets, never
 *     the emulator). Temporaries are host malloc, not counted as device memory.
 */
#ifndef TSR_CUDA_EMU_H
#define TSR_CUDA_EMU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cuda_ops.h"
#include "ops.h"
#include "tcu_args.h"  /* the argument rules the CUDA backend shares */
#include "tcu_index.h" /* the index arithmetic the CUDA backend shares */

/* every op has finished when it returns: the streams (and a few inputs, said where) go unread */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* "tessera cuda: WHAT: MSG (emulator)" on stderr, the fail hook (tcu_set_fail_hook), exit 1: as
 * tcu_fail does */
__attribute__((format(printf, 2, 3))) _Noreturn void emu_fail(const char *what, const char *fmt,
                                                              ...);
void emu_set_fail_hook(void (*hook)(int status));
#define REQUIRE(cond, what, ...) do { if (!(cond)) emu_fail(what, __VA_ARGS__); } while (0)
/* one of tcu_args.h's rules, shared with the CUDA backend: rule(buffer, its size, args...) */
#define REQUIRE_RULE(what, rule, ...)                                                           \
    do {                                                                                        \
        char rule_m_[256];                                                                      \
        const char *rule_why_ = rule(rule_m_, sizeof rule_m_, __VA_ARGS__);                     \
        if (rule_why_) emu_fail((what), "%s", rule_why_);                                       \
    } while (0)
/* the ops whose real twins use the context (cuBLASLt, scratch) die without tcu_init, as they do
 * (emu_context.c) */
void emu_need_context(const char *what);

/* fp32 -> bf16, round to nearest even; NaN -> a quiet NaN of the same sign (never Inf) */
static inline tsr_bf16 bf16_round(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (tsr_bf16)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (tsr_bf16)(x >> 16);
}

/* bf16 -> fp32, exact */
static inline float bf16_widen(tsr_bf16 h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* fp32 host temporaries: dies naming what when the host has no memory */
void *emu_host_alloc(size_t bytes, const char *what);
float *emu_host_zeros(size_t n, const char *what);
void emu_widen_into(float *f, const tsr_bf16 *x, size_t n);
/* a new fp32 copy of x (n) */
float *emu_widen(const tsr_bf16 *x, size_t n, const char *what);
void emu_round_into(tsr_bf16 *x, const float *f, size_t n);
/* x (bf16) += inc (fp32): one rounding of the fp32 sum */
void emu_add_round_into(tsr_bf16 *x, const float *inc, size_t n);
/* an input gradient by its mode (ops.h): TSR_GRAD_ADD += as emu_add_round_into, TSR_GRAD_SET =
 * round (x unread) */
void emu_grad_round_into(tsr_bf16 *x, const float *inc, size_t n, tsr_grad_mode mode);

/* The input of a norm, widened: a, or (fused) residual = round(a + b), written, then read back as
 * stored (the fused op is bit for bit the residual op and the norm op) */
float *emu_norm_input(const char *what, int fused, tsr_bf16 *residual, const tsr_bf16 *a,
                      const tsr_bf16 *b, size_t n);
static inline int emu_gelu_kind_ok(tsr_gelu_kind k) {
    return (unsigned)k < (unsigned)TSR_GELU_COUNT;
}
/* The layer's variants for the CPU ops: var (or NULL) with its sinks, bf16 on this backend
 * (cuda_ops.h tcu_attention_forward_var), widened into *sk (NH floats; free it after), in *v */
const tsr_attn_var *emu_var(const tsr_attn_var *var, int NH, tsr_attn_var *v, float **sk,
                            const char *what);

#endif

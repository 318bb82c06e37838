/* cuda_ops.h — the CUDA backend's op interface (C API; the .cu files of kernels/cuda/ implement it).
 *
 * The same ops and the same maths as kernels/ops.h (the fp32 CPU oracle), in the precisions a GPU
 * trains in: activations and the weights the matmuls read are bf16; parameter gradients, master
 * weights and AdamW moments are fp32; every reduction (LayerNorm statistics, softmax, attention's
 * online softmax, matmul accumulation, bias and weight gradients) accumulates in fp32.
 * Dimension vocabulary as in ops.h: B T C NH KVH hs (C/NH unless the model sets head_dim)
 * QKV=(NH+2KVH)hs F V Vp N=B*T.
 *
 * Conventions (as ops.h, so each op can be checked against its CPU twin):
 *   - every pointer is device memory unless its name ends in _host;
 *   - backward ops ACCUMULATE (+=) into parameter gradients (fp32) and into input gradients (bf16,
 *     read-modify-write); the exception is tcu_softmax_xent, which WRITES dlogits over the logits;
 *   - optional pointers are marked "or NULL": NULL drops that term (no bias, no learned positions,
 *     no ALiBi, no segments);
 *   - frozen parameters (ops.h): every fp32 parameter-gradient output of a backward op (dwte, dwpe,
 *     dw, db, dbias, dqw, dkw) may be NULL; the op then skips that gradient's work (its GEMM, its
 *     partial sums and their reduction) and gives dinp (and the other gradients) the same bits as
 *     with it;
 *   - every op takes an explicit stream; every launch is followed by a check of the last error and
 *     a failure exits the process with the op's name and CUDA's message (tcu_check);
 *   - preconditions an op cannot handle (a head size it has no kernel for, C not a multiple of 8
 *     where a vector width needs it) exit with a message naming the op and the value.
 *   - one stream per process at a time: the ops share process-wide scratch (the cuBLASLt
 *     workspace, reduction partials), so two streams running ops concurrently would race
 *     (tcu_add_f32, tcu_zero and tcu_memcpy_d2d, which use none, are the exceptions: any
 *     stream, concurrently; the trainer's communication stream uses them);
 *   - device pointers come from tcu_malloc (256-byte aligned); attention requires its bf16
 *     tensors 16-byte aligned and exits naming the op otherwise.
 * Deterministic: every op gives the same bits run to run on one GPU for the same inputs (no
 * floating-point atomics; fixed cuBLASLt algorithms), except tcu_encoder_backward when given no
 * host copy of the tokens (see there). docs/cuda.md says what that costs.
 */
#ifndef TSR_CUDA_OPS_H
#define TSR_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cuda_shapes.h" /* tcu_attention_head_size_ok: the head sizes hs may take */

#include "ops.h" /* tsr_gelu_kind, TSR_LN_EPS */
#include "tcu_fp8.h" /* tsr_fp8, tcu_fp8_format: the formats and the scale */

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t tsr_bf16;            /* bf16 bits (__nv_bfloat16 on the device side) */
typedef struct CUstream_st *tcu_stream; /* = cudaStream_t */

/* ---- device, memory, context ---- */

/* Number of usable CUDA devices; 0 (never an error) when there is no driver, no device, or the
 * runtime cannot start: callers skip GPU work on 0. */
int tcu_device_count(void);
/* "NVIDIA H100 80GB HBM3", sm major*10+minor in *sm, free and total bytes of the current device. */
void tcu_device_info(char *name, size_t n, int *sm, size_t *free_bytes, size_t *total_bytes);

/* Allocations die (exit 1) naming the size, what it was for, and the free memory; tcu_try_malloc
 * returns NULL instead (auto microbatch and the memory plan check use it). Memory is not zeroed
 * (tcu_zero does). */
void *tcu_malloc(size_t bytes, const char *what);
void *tcu_try_malloc(size_t bytes);
/* p from tcu_malloc / tcu_try_malloc, or NULL; any other pointer dies (freed twice, host memory). */
void tcu_free(void *p);
/* Bytes held through tcu_malloc / tcu_try_malloc now, and the most held at once since the process
 * started (sizes as asked, 0 counting 1): the allocator's figure, like PyTorch's
 * torch.cuda.memory_allocated / max_memory_allocated. The CUDA context and the memory NCCL and
 * cuBLASLt allocate for themselves are not in it; the cuBLASLt workspace and the ops' scratch are.
 * Either pointer may be NULL. */
void tcu_mem_stats(size_t *live, size_t *peak);
/* Page-locks (pins) host memory [p, p + bytes) for the device's copies (cudaHostRegister): copies
 * to and from it run at the bus's speed, without the driver staging them through its own pinned
 * buffer. 0, or -1 when CUDA refused (memlock limit, already registered, no memory): the memory
 * stays pageable and works as before. tcu_host_unregister undoes one registration (NULL: nothing);
 * do it before the memory is freed. */
int tcu_host_register(void *p, size_t bytes);
void tcu_host_unregister(void *p);
void tcu_zero(void *p, size_t bytes, tcu_stream s);
void tcu_memcpy_h2d(void *dst, const void *src_host, size_t bytes, tcu_stream s);
void tcu_memcpy_d2h(void *dst_host, const void *src, size_t bytes, tcu_stream s);
/* Device-to-device copy of `bytes` bytes, stream-ordered (async) on s; bytes 0 does nothing.
 * dst and src must not overlap. */
void tcu_memcpy_d2d(void *dst, const void *src, size_t bytes, tcu_stream s);
void tcu_sync(tcu_stream s);
/* Page-locked (pinned) host memory, for copies that stay asynchronous (the host-staged transport
 * of src/gpu/gpu_comm_staged.c); dies naming `what` when the host has none left. The emulator:
 * malloc. tcu_host_free(NULL) does nothing. */
void *tcu_host_alloc(size_t bytes, const char *what);
void tcu_host_free(void *p);
/* Device-to-host copy into pinned memory (tcu_host_alloc), stream-ordered and NOT waited for:
 * dst_host holds the data once the stream has reached it (an event, a later host function). */
void tcu_memcpy_d2h_async(void *dst_host, const void *src, size_t bytes, tcu_stream s);
/* fn(arg) on a thread of the CUDA runtime once stream s reaches this point; the stream's later work
 * waits until fn returns (cudaLaunchHostFunc). fn must not call CUDA. The emulator, whose streams
 * are synchronous, calls fn(arg) before returning. */
void tcu_launch_host(tcu_stream s, void (*fn)(void *), void *arg);
tcu_stream tcu_stream_create(void);
void tcu_stream_destroy(tcu_stream s);
/* Events order two streams (the trainer's gradient communication runs on its own stream, so the
 * one-stream rule above is about ops; collectives touch no op scratch): record on one stream, make
 * another wait for it. Timing is disabled (cheaper). */
typedef struct CUevent_st *tcu_event; /* = cudaEvent_t */
tcu_event tcu_event_create(void);
void tcu_event_destroy(tcu_event e);
void tcu_event_record(tcu_event e, tcu_stream s);
void tcu_stream_wait_event(tcu_stream s, tcu_event e);
/* Timing events (TSR_PROFILE=1: src/gpu/gpu_profile.c): tcu_event_create_timed makes one with
 * timing on (record and destroy as above); tcu_event_elapsed_ms waits for `end` to complete and
 * gives the device time from `start` to `end` in milliseconds (both recorded, timed). */
tcu_event tcu_event_create_timed(void);
float tcu_event_elapsed_ms(tcu_event start, tcu_event end);

/* The cuBLASLt handle, its workspace and scratch reused across ops; one per process (one rank per
 * GPU). tcu_init selects device `device`, creates them; tcu_shutdown frees them. */
void tcu_init(int device);
void tcu_shutdown(void);
/* cuBLASLt is opened at its first call (kernels/cuda/cuda_lt_load.cu), not with this library:
 * NULL when every function the backend calls resolves, else why not (the loader's message) */
const char *tcu_lt_missing(void);
/* Called (when set) after a failure is reported, instead of exit(1): an MPI program passes a
 * function that aborts every rank (one rank exiting alone leaves the others hung in a
 * collective). It must not return. */
void tcu_set_fail_hook(void (*hook)(int status));

/* fp32 <-> bf16 (round to nearest even), n elements */
void tcu_f32_to_bf16(tsr_bf16 *out, const float *inp, size_t n, tcu_stream s);
void tcu_bf16_to_f32(float *out, const tsr_bf16 *inp, size_t n, tcu_stream s);

/* ---- ops: the math of kernels/ops.h, precisions as above ---- */

/* out[b,t,:] = wte[tokens[b,t],:] + wpe[pos[b,t] or t,:].  out (B,T,C) bf16; tokens (B,T);
 * wte (Vp,C) bf16; wpe (T_max,C) bf16 or NULL; pos (B,T) or NULL */
void tcu_encoder_forward(tsr_bf16 *out, const int32_t *tokens, const tsr_bf16 *wte,
                         const tsr_bf16 *wpe, const int32_t *pos, int B, int T, int C,
                         tcu_stream s);
/* dwte (Vp,C) fp32 += or NULL (frozen), dwpe (T_max,C) fp32 += or NULL, dout (B,T,C) bf16.
 * tokens_host (B,T) on the host, or NULL: with it the rows of dwte are summed in a fixed order
 * (tokens grouped on the host, deterministic); without it by atomics (order varies run to run).
 * Without dwte neither tokens nor tokens_host is read (either may be NULL). */
void tcu_encoder_backward(float *dwte, float *dwpe, const tsr_bf16 *dout, const int32_t *tokens,
                          const int32_t *tokens_host, const int32_t *pos, int B, int T, int C,
                          tcu_stream s);

/* LayerNorm over the last axis, eps TSR_LN_EPS, biased variance.
 * out (N,C) bf16; mean, rstd (N) fp32 saved for backward (or NULL: not saved); inp (N,C) bf16;
 * w (C) bf16;
 * b (C) bf16 or NULL */
void tcu_layernorm_forward(tsr_bf16 *out, float *mean, float *rstd, const tsr_bf16 *inp,
                           const tsr_bf16 *w, const tsr_bf16 *b, int N, int C, tcu_stream s);
/* Fused residual add + LayerNorm: residual = a + b (written, bf16), then out = LN(residual). */
void tcu_residual_layernorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *mean, float *rstd,
                                    const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w,
                                    const tsr_bf16 *bias, int N, int C, tcu_stream s);
/* dinp (N,C) bf16 +=; dw (C) fp32 += or NULL (frozen); db (C) fp32 += or NULL; dout (N,C) bf16;
 * inp, w, mean, rstd as in forward. */
void tcu_layernorm_backward(tsr_bf16 *dinp, float *dw, float *db, const tsr_bf16 *dout,
                            const tsr_bf16 *inp, const tsr_bf16 *w, const float *mean,
                            const float *rstd, int N, int C, tcu_stream s);

/* out = inp @ w^T + bias through cuBLASLt (bf16 in, fp32 accumulate, bf16 out; bias in the
 * epilogue).  out (N,OC); inp (N,IC); w (OC,IC); bias (OC) or NULL.
 * pre_gelu (N,OC) or NULL: when given, out = gelu(inp @ w^T + bias) of kind `gelu` and pre_gelu
 * keeps the argument for backward (tanh: cuBLASLt's GELU_AUX epilogue; exact: bias epilogue into
 * pre_gelu, then the erf GELU kernel). */
void tcu_matmul_forward(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                        const tsr_bf16 *w, const tsr_bf16 *bias, int N, int IC, int OC,
                        tsr_gelu_kind gelu, tcu_stream s);
/* dinp (N,IC) bf16 += dout @ w (TSR_GRAD_SET: =, ops.h); dw (OC,IC) fp32 += dout^T @ inp; dbias
 * (OC) fp32 += column sums of dout. Each of dinp, dw, dbias may be NULL (skipped: dw frozen, no
 * bias, no input gradient; inp is read only for dw, w only for dinp).  dout (N,OC) bf16, inp
 * (N,IC) bf16, w (OC,IC) bf16. */
void tcu_matmul_backward(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *w, int N, int IC, int OC,
                         tsr_grad_mode mode, tcu_stream s);
/* The split-K reduction schemes the matmul heuristic may pick from (issue 25, item 4; measured
 * through TSR_GEMM_REDUCTION, docs/cuda.md): COMPUTE, the default (fp32 partial sums in the
 * workspace, reduced in a fixed step: deterministic, fp32 accumulate), NONE (no split-K) or ANY
 * (cuBLASLt's whole choice, partial sums possibly added in the bf16 output: for measuring only).
 * A change forgets the algorithms chosen so far: set it before the first matmul, none in flight. */
typedef enum { TCU_REDUCTION_COMPUTE, TCU_REDUCTION_NONE, TCU_REDUCTION_ANY } tcu_reduction;
void tcu_matmul_set_reduction(tcu_reduction r);
/* TSR_GEMM_TUNE (issue 25, item 4; docs/cuda.md, "GEMM choice by the clock"): after tcu_init, reads path's
 * GEMM choices (kernels/cuda/tcu_gemm_tune.h; a missing file is an empty one) and forgets the
 * algorithms chosen so far. From then on a shape's first call runs the file's algorithm when the
 * file has its key (found among the heuristic's answers by its bytes, else by its configuration
 * where exactly one answer has it). Otherwise, with timing,
 * it times the usable ones among the heuristic's first 8 answers on the call's own operands (the
 * median of 3 measurements of 5 runs each; the host waits for each) and keeps the fastest when
 * it is under 98% of the first answer's time, else the first, adding the choice to the table;
 * without timing (a run on several ranks, which would choose differently on each) it runs the
 * first answer. The call then runs as before. A choice from the file gives the same bits as
 * the run that made it; a choice by the clock may differ from one timing run to the next. With
 * timing, path's directory must be writable. 0, or -1 with err (n bytes) naming the file and
 * line: another GPU model or cuBLASLt version, a malformed line, an unwritable directory
 * (tuning is then off). The emulator has no cuBLASLt: it reads and checks the file (device
 * "tessera CUDA emulator (host memory)", version 0) and adds nothing. */
int tcu_matmul_tune_open(const char *path, int timing, char *err, size_t n);
/* A hash of the table read (tcu_gemm_tune.h's tcu_tune_hash): ranks compare it. */
uint64_t tcu_matmul_tune_hash(void);
typedef struct tcu_tune_stats {
    int loaded;    /* entries the file had */
    int added;     /* entries added since (timed or single), which tcu_matmul_tune_save writes */
    int timed, single, from_file; /* the cached shapes: timed here, one answer only, from the file */
    int unmatched; /* the file's algorithm not among the heuristic's answers: its first ran */
    int untimed;   /* no device memory for the copy of an accumulated D, or no answer ran: the
                      first */
    int by_config; /* of from_file: found by the configuration only one answer has, not bytes */
    int missing;   /* not in the file, and no timing (several ranks): the first */
    long long overflow_missing;   /* calls of shapes past the algorithm cache (128 shapes), which
                                     read the file but are never timed: not in the file */
    long long overflow_unmatched; /* and those whose file algorithm was not among the answers */
    double saved_us; /* over the timed shapes: the first answer's time less the choice's, per call */
} tcu_tune_stats;
void tcu_matmul_tune_stats(tcu_tune_stats *st);
/* Writes the table to path (tcu_gemm_tune.h: a temporary file, then rename) when this process
 * times (tcu_matmul_tune_open's timing) and entries were added since: 1 written, 0 nothing to
 * write, -1 with err (the old file untouched). Call it before tcu_shutdown, which forgets the
 * table. */
int tcu_matmul_tune_save(const char *path, char *err, size_t n);
/* The algorithms the matmuls run (the cache of cuBLASLt's heuristic answers, one per shape, op,
 * epilogue and alignment): to f, when not NULL, a header, one line per shape (op, m x n x k,
 * epilogue, algorithm id, tile, stages, split-K count and reduction scheme, CTA swizzle, custom
 * option, where the choice came from: TSR_GEMM_TUNE's timing or file, with the times; "none"
 * where the heuristic had no answer) and a last line "cuBLASLt: S shape(s), K
 * split-K, N without an algorithm (rule R)". Returns K, the shapes whose algorithm splits K. The
 * emulator has no cuBLASLt: it says so and returns 0. */
int tcu_matmul_report(FILE *f);
/* The matmul backward of a tanh-GELU MLP's output projection fused with the GELU's backward
 * (issue 25, item 1): dinp (N,IC) bf16 = gelu_tanh'(pre_gelu) * (dout @ w), written (never read);
 * dw, dbias as tcu_matmul_backward (+=, each or NULL). pre_gelu (N,IC) bf16: the forward's
 * GELU input. cuBLASLt's DGELU epilogue applies gelu' to the fp32 product and rounds once (IC %
 * 8 == 0, its aux ld rule); without such an algorithm, tcu_matmul_backward (TSR_GRAD_SET) then
 * tcu_gelu_backward in place: the unfused sequence's bits. */
void tcu_matmul_backward_dgelu(tsr_bf16 *dinp, float *dw, float *dbias, const tsr_bf16 *dout,
                               const tsr_bf16 *inp, const tsr_bf16 *w, const tsr_bf16 *pre_gelu,
                               int N, int IC, int OC, tcu_stream s);

/* ---- FP8 (issue 51; docs/cuda.md "FP8"): E4M3 / E5M2 as kernels/cuda/tcu_fp8.h defines them
 * (rounding, saturation, NaN, the tensorwise scale), the same functions on the host and the
 * device. Needs compute capability 8.9 or newer for the GEMM (cuBLASLt's FP8 kernels); the casts
 * run anywhere. ---- */

/* amax (1) fp32 = the largest |x[i]| of n bf16 elements (0 for n = 0; NaN when one is NaN).
 * Deterministic (a maximum). */
void tcu_amax_bf16(float *amax, const tsr_bf16 *x, size_t n, tcu_stream s);
/* Tensorwise current scaling: q (n) = tcu_fp8_quantize_one(x[i], tcu_fp8_scale(*amax, fmt), fmt)
 * (x * scale rounded to fp32, then encoded to nearest even with saturation); scale_inv (1) =
 * tcu_fp8_scale_inv(*amax, fmt), the factor that reads q back. amax (1) from tcu_amax_bf16 (or any
 * bound >= the largest |x|). */
void tcu_fp8_quantize(tsr_fp8 *q, float *scale_inv, const tsr_bf16 *x, const float *amax,
                      size_t n, tcu_fp8_format fmt, tcu_stream s);
/* The reverse (model.activation_compression = "fp8"): x (n) bf16 = tcu_fp8_dequantize_one(q[i],
 * *scale_inv, fmt) rounded to nearest even; scale_inv (1) a device scalar (tcu_fp8_quantize's). */
void tcu_fp8_dequantize(tsr_bf16 *x, const tsr_fp8 *q, const float *scale_inv, size_t n,
                        tcu_fp8_format fmt, tcu_stream s);
/* The FP8 GEMM: out (N,OC) bf16 = round((qx @ qw^T) * (*sx_inv) * (*sw_inv) + bias), qx (N,IC)
 * and qw (OC,IC) E4M3 (row-major: cuBLASLt's TN layout as they are), sx_inv and sw_inv (1) fp32
 * device scalars (tcu_fp8_quantize's), bias (OC) bf16 or NULL; fp32 accumulation (cuBLASLt's
 * FP8 matmul, fast accumulation off). cuBLASLt's FP8 rules (tcu_fp8_gemm_check, the backend and
 * the emulator alike; exit naming the rule and the call): IC and OC multiples of 16, out, qx, qw
 * and sx_inv, sw_inv 16-byte aligned. A bias that is not 16-byte aligned is added after the GEMM
 * (a second rounding). The emulator: the decoded products summed in fp32 (sgemm), times
 * sx_inv * sw_inv, plus bias, rounded once. */
void tcu_matmul_fp8(tsr_bf16 *out, const tsr_fp8 *qx, const float *sx_inv, const tsr_fp8 *qw,
                    const float *sw_inv, const tsr_bf16 *bias, int N, int IC, int OC,
                    tcu_stream s);
/* tcu_matmul_forward in FP8 (precision.fp8 = "tensorwise"): inp and w each scaled by their own
 * amax and cast to E4M3 (process-wide scratch of N*IC + OC*IC bytes), then tcu_matmul_fp8; with
 * pre_gelu (not out), the product (+ bias) goes there and out = gelu(pre_gelu). One definition
 * for the backend and the emulator: kernels/cuda/tcu_fp8_linear.c. tcu_fp8_release frees the
 * scratch (tcu_shutdown calls it). */
void tcu_matmul_forward_fp8(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                            const tsr_bf16 *w, const tsr_bf16 *bias, int N, int IC, int OC,
                            tsr_gelu_kind gelu, tcu_stream s);
/* tcu_matmul_forward_fp8 with the weight already in E4M3: qw (OC,IC) and its scale_inv sw_inv (a
 * 16-byte aligned device fp32), as zero3 / hsdp's FP8 all-gather delivers them (docs/cuda.md
 * "FP8"); only inp is scaled and cast (the scratch's first N*IC bytes). tcu_matmul_forward_fp8
 * is this after casting w. */
void tcu_matmul_forward_fp8_qw(tsr_bf16 *out, tsr_bf16 *pre_gelu, const tsr_bf16 *inp,
                               const tsr_fp8 *qw, const float *sw_inv, const tsr_bf16 *bias,
                               int N, int IC, int OC, tsr_gelu_kind gelu, tcu_stream s);
void tcu_fp8_release(void);

/* GELU of kind `kind`.  out, inp (n) bf16;  backward: dinp (n) bf16 += (SET: =) gelu'(inp) *
 * dout */
void tcu_gelu_forward(tsr_bf16 *out, const tsr_bf16 *inp, size_t n, tsr_gelu_kind kind,
                      tcu_stream s);
void tcu_gelu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, size_t n,
                       tsr_gelu_kind kind, tsr_grad_mode mode, tcu_stream s);

/* out = a + b;  backward: da += dout, db += dout.  all (n) bf16 */
void tcu_residual_forward(tsr_bf16 *out, const tsr_bf16 *a, const tsr_bf16 *b, size_t n,
                          tcu_stream s);
void tcu_residual_backward(tsr_bf16 *da, tsr_bf16 *db, const tsr_bf16 *dout, size_t n,
                           tcu_stream s);

/* Fused causal attention (FlashAttention style: tiles of q, k, v in shared memory, online
 * softmax, no (T,T) matrix in device memory), the maths of ops.h attention_forward:
 *   s[i,j] = q_i.k_j / sqrt(hs) - slope_h (i - j), j in [lo(i), i] (segments as in ops.h).
 * out (B,T,NH*hs) bf16; lse (B,NH,T) fp32 = log sum_j exp(s[i,j]), saved for backward (replaces
 * the CPU's att); qkv (B,T,QKV) bf16 laid out [q|k|v] with KVH key/value heads (query head h
 * reads key/value head h / (NH/KVH)); alibi_slopes (NH) fp32 or NULL; seq (B,T) or NULL. hs must
 * pass tcu_attention_head_size_ok (cuda_shapes.h: 32, 64, 128 or 256). */
void tcu_attention_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                           const float *alibi_slopes, const int32_t *seq, int B, int T, int NH,
                           int KVH, int hs, tcu_stream s);
/* dqkv (B,T,QKV) bf16 += (SET: =); dout, out (B,T,NH*hs) bf16 and lse from the forward pass; qkv, slopes,
 * seq as given to it. scratch: tcu_attention_scratch_bytes(B,T,NH,KVH,hs) bytes of device memory (the fp32
 * row sums D = rowsum(dout * out), (B,NH,T); dq, dk, dv stay in registers until added into dqkv;
 * with tcu_attention_set_dq_fused(1) also dq's fp32 sums, below); deterministic (dk,dv parallel
 * over key tiles, dq over query tiles or in a fixed order: no atomics). */
size_t tcu_attention_scratch_bytes(int B, int T, int NH, int KVH, int hs);
void tcu_attention_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                            const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                            const int32_t *seq, void *scratch, int B, int T, int NH, int KVH,
                            int hs, tsr_grad_mode mode, tcu_stream s);
/* ---- attention variants (issue 67, cuattn67; docs/cuda.md "Attention variants") ----
 * tcu_attention_forward / _backward / _decode with a layer's variants (ops.h tsr_attn_var, or
 * NULL: the calls above): a sliding window W (row i sees keys i - W + 1 .. i, with the causal and
 * the segment masks; the kernels never visit a key tile wholly left of the band), the score
 * scale (var->scale > 0: instead of 1/sqrt(hs)), the soft cap (var->softcap > 0: s = cap tanh(s
 * scale / cap) before ALiBi and the softmax) and sinks (NH bf16 on the device, the weights' bf16
 * copy: var->sinks, typed float * for the CPU's fp32, is read as tsr_bf16 here; e^sink_h joins
 * each row's softmax denominator, so lse counts it; the backward adds var->dsinks[h] +=
 * -sum_rows exp(sink_h - lse) D, fp32, when var->dsinks is given). The decode's cache is a ring
 * of cap positions (position p at index p % cap: a sliding layer's cap is its window). */
void tcu_attention_forward_var(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv,
                               const float *alibi_slopes, const int32_t *seq,
                               const tsr_attn_var *var, int B, int T, int NH, int KVH, int hs,
                               tcu_stream s);
void tcu_attention_backward_var(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                                const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                                const int32_t *seq, const tsr_attn_var *var, void *scratch, int B,
                                int T, int NH, int KVH, int hs, tsr_grad_mode mode, tcu_stream s);
void tcu_attention_decode_var(tsr_bf16 *out, tsr_bf16 *kt, tsr_bf16 *v, const tsr_bf16 *qkv,
                              const float *alibi_slopes, const tsr_attn_var *var,
                              const int32_t *slot, const int32_t *pos, const int32_t *seg, int p0,
                              int seg0, int n, size_t slot_stride, int cap, int NH, int KVH,
                              int hs, tcu_stream s);
/* ---- end of attention variants ---- */

/* Ring attention's blocks (context parallelism: ops.h tsr_ring_block and its ring_forward,
 * ring_backward; src/model/model_ring.c), on the attention kernels above (kernels/cuda/
 * cuda_ring.cu): the block's q and kv bf16 (rows 16-byte aligned), lo (B,T) int32 or NULL; acc,
 * lse, dq, dkv fp32; dout, out bf16. A block is either a diagonal one (qoff = koff, Tq = Tk: q's
 * rows carry their own keys and values at kv) or one whose keys all lie before its queries (koff
 * + Tk <= qoff); the kernels run on a sequence of the block's keys, then its queries, with the
 * queries' own keys masked (tcu_attention_forward_keys), and small kernels merge the block into
 * acc by its log-sum-exp (the forward) or add its bf16 gradients into the fp32 sums (the
 * backward). scratch: tcu_ring_scratch_bytes(B, T, ...) bytes for blocks of Tq + Tk <= T rows. */
size_t tcu_ring_scratch_bytes(int B, int T, int NH, int KVH, int hs);
void tcu_ring_forward(float *acc, float *lse, const tsr_ring_block *k, int merge, void *scratch,
                      tcu_stream s);
void tcu_ring_backward(float *dq, int lddq, float *dkv, int lddkv, const tsr_bf16 *dout,
                       const tsr_bf16 *out, const float *lse, const tsr_ring_block *k,
                       void *scratch, tcu_stream s);
/* rows of width bytes from src (spitch bytes apart) to dst (dpitch apart), on the device
 * (cudaMemcpy2DAsync): the ring's packing of keys and values */
void tcu_memcpy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t rows, tcu_stream s);
/* Batched decoding (cuda_decode.cu; ops.h attention_decode and attention_decode_rows): n rows of
 * qkv (n, QKV) bf16, row i the next token of the sequence in cache slot slot[i] at cache position
 * pos[i], its segment from seg[i] (slot, pos, seg device arrays, or NULL: slot 0, position
 * p0 + i, segment seg0: a chunk of one sequence). Stores each row's key and value into its slot
 * (kt (KVH, hs, cap) keys transposed, v (KVH, cap, hs) bf16; slots slot_stride elements apart;
 * position p at index p % cap, a ring: tcu_attention_decode_var below),
 * then out (n, NH*hs) bf16 = attention of each row over positions seg..pos, fp32 scores and
 * softmax. Each (row, head) is one block with a fixed reduction order: a row's output does not
 * depend on the other rows. Needs (cap + hs + 32) floats of shared memory per block. The
 * variants' call without them, here once for the backend and its emulator. */
static inline void tcu_attention_decode(tsr_bf16 *out, tsr_bf16 *kt, tsr_bf16 *v,
                                        const tsr_bf16 *qkv, const float *alibi_slopes,
                                        const int32_t *slot, const int32_t *pos,
                                        const int32_t *seg, int p0, int seg0, int n,
                                        size_t slot_stride, int cap, int NH, int KVH, int hs,
                                        tcu_stream s) {
    tcu_attention_decode_var(out, kt, v, qkv, alibi_slopes, NULL, slot, pos, seg, p0, seg0, n,
                             slot_stride, cap, NH, KVH, hs, s);
}
/* out (N,OC) bf16 = inp (N,IC) @ w^T + bias (or NULL), each element one warp's fp32 dot product
 * in a fixed order (ops.h matmul_rows: a row's bits do not depend on N or the other rows, unlike
 * cuBLASLt's, whose algorithm depends on the shape). For decode steps: w is read once per row. */
void tcu_matmul_rows(tsr_bf16 *out, const tsr_bf16 *inp, const tsr_bf16 *w, const tsr_bf16 *bias,
                     int N, int IC, int OC, tcu_stream s);
/* The rows each warp of the attention kernels owns (issue 25, item 2; measured through
 * TSR_ATT_WARP_ROWS, docs/cuda.md): 16, the default, or 32, where each shared-memory operand
 * fragment feeds two 16-row mma slabs (half the shared-memory reads per mma, twice the
 * accumulator registers: for hs <= 64 only; hs 128 keeps 16). Process-wide; set it before the
 * first attention call, none in flight. Either gives deterministic results, not the same bits
 * as the other (the backward's query and key tiles differ). tcu_attention_warp_rows(hs) says
 * which one runs for head size hs, except where the wgmma kernels run (tcu_attention_wgmma(hs),
 * below: 16 rows a warp, whatever this says; the trainer refuses the two switches together). */
void tcu_attention_set_warp_rows(int rows);
int tcu_attention_warp_rows(int hs);
/* Where dq is computed (issue 25; measured through TSR_ATT_DQ_FUSED, docs/cuda.md): 0, the
 * default, a kernel of its own per query tile that recomputes S and dP; 1, inside the dk/dv
 * kernel from its dS, added by the key blocks of a query tile in a fixed order (highest first)
 * through an fp32 sum in the scratch, which grows by (B,NH,T rounded up to the query tile,hs)
 * fp32: five tile products a step instead of seven. Deterministic either way, and the same bits
 * as each other with 16 rows a warp and no seq. Process-wide, like tcu_attention_set_warp_rows:
 * set both before sizing the scratch (tcu_attention_scratch_bytes depends on them).
 * tcu_attention_dq_fused says whether the fused path runs. */
void tcu_attention_set_dq_fused(int on);
int tcu_attention_dq_fused(void);
/* The attention kernels on Hopper's warpgroup products (issue 25, item 2; measured through
 * TSR_ATT_WGMMA, docs/cuda.md): 0, the default, the mma.sync kernels; 1, the forward's and the
 * backward's tile products by wgmma (sm_90a) where the head size is 64 or 128 and the device has
 * compute capability 9.0 (16 rows a warp's tiles; the fused dq keeps the mma.sync kernels), the
 * mma.sync kernels elsewhere. The same maths, outputs and determinism (not the same bits: the
 * products sum in another order). Process-wide, like tcu_attention_set_warp_rows.
 * tcu_attention_wgmma(hs) says whether head size hs runs on it now,
 * tcu_attention_wgmma_possible(hs) whether it could (the head size, the device; it asks the
 * current device once). */
void tcu_attention_set_wgmma(int on);
int tcu_attention_wgmma(int hs);
int tcu_attention_wgmma_possible(int hs);

/* The LayerNorm and RMSNorm backwards' warp-per-row kernel with each row's x, dout and dinp loaded
 * at once and kept in registers (issue 25, TSR_NORM_HOLD, docs/cuda.md): a mask of
 * TCU_NORM_HOLD_LAYERNORM and TCU_NORM_HOLD_RMSNORM (the norms held, for C <= 768) and
 * TCU_NORM_HOLD_WIDE (theirs for 768 < C <= 1024 too, where the held kernel has 1 block an SM
 * instead of 2); the rest read x and dout again in the second pass. The same bits either way.
 * The default, TCU_NORM_HOLD_DEFAULT, holds LayerNorm's rows up to C = 768: 25 % faster at
 * C = 768 on an H200 (gpt2-124m, 2026-11-26); RMSNorm's held kernel has half the blocks an SM
 * and the wide ones 1 block an SM: none timed yet. Process-wide; tcu_norm_hold gives
 * the mask in force (0 on a backend without the variant). */
#define TCU_NORM_HOLD_LAYERNORM 1
#define TCU_NORM_HOLD_RMSNORM 2
#define TCU_NORM_HOLD_WIDE 4
#define TCU_NORM_HOLD_ALL (TCU_NORM_HOLD_LAYERNORM | TCU_NORM_HOLD_RMSNORM | TCU_NORM_HOLD_WIDE)
#define TCU_NORM_HOLD_DEFAULT TCU_NORM_HOLD_LAYERNORM
void tcu_norm_set_hold(int mask);
int tcu_norm_hold(void);

/* ---- the Llama-style blocks: the maths of the ops.h ops of the same names; bf16 activations and
 * weights, fp32 statistics, weight gradients and arithmetic ---- */
/* out (N,C) bf16; rstd (N) fp32 or NULL (not saved); inp (N,C) bf16; w (C) bf16 */
void tcu_rmsnorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *w,
                         int N, int C, float eps, tcu_stream s);
/* residual = a + b (written, bf16), then out = RMSNorm(residual) */
void tcu_residual_rmsnorm_forward(tsr_bf16 *residual, tsr_bf16 *out, float *rstd,
                                  const tsr_bf16 *a, const tsr_bf16 *b, const tsr_bf16 *w, int N,
                                  int C, float eps, tcu_stream s);
/* dinp (N,C) bf16 +=; dw (C) fp32 += (deterministic: no atomics across rows) or NULL (frozen) */
void tcu_rmsnorm_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout, const tsr_bf16 *inp,
                          const tsr_bf16 *w, const float *rstd, int N, int C, tcu_stream s);
/* out, inp (N,QKV) bf16; rstd (N,NH+KVH) fp32; qw, kw (hs) bf16; backward dinp bf16 +=,
 * dqw, dkw fp32 += (each or NULL: frozen) */
void tcu_qknorm_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                        const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                        tcu_stream s);
void tcu_qknorm_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                         const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                         const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s);
/* in place on qkv / dqkv (B,T,QKV) bf16; pos (B,T) device or NULL (t + p0); inv_freq (hs/2)
 * fp32 device */
void tcu_rope_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                      int T, int NH, int KVH, int hs, tcu_stream s);
void tcu_rope_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq, int B,
                       int T, int NH, int KVH, int hs, tcu_stream s);
/* out (N,F) bf16 = silu(inp[:, :F]) * inp[:, F:], inp (N,2F) bf16; backward dinp (N,2F) +=
 * (SET: =) */
void tcu_swiglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s);
void tcu_swiglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                         tsr_grad_mode mode, tcu_stream s);

/* ---- mixture of experts (cuda_moe.cu): the maths and orders of the ops.h moe_* ops (docs/moe.md;
 * E experts, K per row, NK = N*K). bf16: logits, x, xg, dx, dxg, inp, dinp, out, dout, base, y,
 * dy, dlogits, w; fp32: probs, lse, wts, dwts, stats, dw; int32: idx, offs, rows, slot; all on
 * the device. No op waits for the host: the grouped products read offs on the device. ---- */
/* probs (N,E), lse (N), idx (N,K), wts (N,K), offs (E+1), rows (NK), slot (NK), stats (2) from
 * logits (N,E): softmax in fp32, top-k with ties to the lower expert, the stable grouping (no
 * atomics), stats = {aux, z}. N == 0 writes offs = 0 and stats = 0. */
void tcu_moe_route(float *probs, float *lse, int32_t *idx, float *wts, int32_t *offs,
                   int32_t *rows, int32_t *slot, float *stats, const tsr_bf16 *logits, int N,
                   int E, int K, int norm, tcu_stream s);
/* xg (NK,C) = x[rows[r] / K] (bits); backward dx (N,C) += dxg[slot[n*K+j]], j in order, fp32
 * adds, one rounding */
void tcu_moe_gather(tsr_bf16 *xg, const tsr_bf16 *x, const int32_t *rows, int N, int K, int C,
                    tcu_stream s);
void tcu_moe_gather_backward(tsr_bf16 *dx, const tsr_bf16 *dxg, const int32_t *slot, int N, int K,
                             int C, tcu_stream s);
/* each expert's rows of out (NK,OC) = those of inp (NK,IC) @ w[e]^T, w (E,OC,IC); backward
 * dinp (NK,IC) bf16 +=, dw (E,OC,IC) fp32 += (each element by one thread: deterministic) or NULL
 * (frozen: inp then unread) */
void tcu_moe_matmul_forward(tsr_bf16 *out, const tsr_bf16 *inp, const tsr_bf16 *w,
                            const int32_t *offs, int E, int NK, int IC, int OC, tcu_stream s);
void tcu_moe_matmul_backward(tsr_bf16 *dinp, float *dw, const tsr_bf16 *dout,
                             const tsr_bf16 *inp, const tsr_bf16 *w, const int32_t *offs, int E,
                             int NK, int IC, int OC, tcu_stream s);
/* out (N,C) = base (or 0 when NULL) + sum_j wts[n,j] y[slot[n*K+j]] (WRITES; out may be base);
 * backward WRITES dy (NK,C) = wts * dout and dwts (N,K) = dot(dout[n], y[slot]) (double) */
void tcu_moe_combine(tsr_bf16 *out, const tsr_bf16 *base, const tsr_bf16 *y, const float *wts,
                     const int32_t *slot, int N, int K, int C, tcu_stream s);
void tcu_moe_combine_backward(tsr_bf16 *dy, float *dwts, const tsr_bf16 *dout, const tsr_bf16 *y,
                              const float *wts, const int32_t *slot, int N, int K, int C,
                              tcu_stream s);
/* WRITES dlogits (N,E): the router's gradient from dwts (N,K) plus aux_w, z_w times the
 * gradients of this route's stats (ops.h moe_router_backward; sums in double) */
void tcu_moe_router_backward(tsr_bf16 *dlogits, const float *dwts, const float *probs,
                             const float *lse, const int32_t *idx, const float *wts,
                             const int32_t *offs, int N, int E, int K, int norm, float aux_w,
                             float z_w, tcu_stream s);

/* LoRA's adapter path on one target projection (ops.h lora_forward / lora_backward;
 * docs/lora.md), beside the frozen base matmul:
 *   out[n, :OC] += scale * (drop(inp) @ A^T) @ B^T
 * out (N rows, ld bf16 apart: a column block of a fused projection, the caller offsets out),
 * inp (N,IC) bf16, A (R,IC) and B (OC,R) fp32; scratch of tcu_lora_scratch_bytes(N, IC, OC, R)
 * bytes (fp32: t (N,R), xd (N,IC), dz (N,OC)). Dropout p in [0, 1): ops.h's mask, the same
 * SplitMix64 hash of key and the element's global index (row0 + n) * IC + c on the device, so the
 * masks are the CPU's bit for bit. out is rounded to bf16 once per element (fp32 sum inside).
 * Backward: dinp (N,IC) bf16 +=; dA (R,IC), dB (OC,R) fp32 += (either NULL: frozen); dout's rows
 * ld apart (as out). drop(inp) A^T is recomputed, not kept from the forward. */
size_t tcu_lora_scratch_bytes(int N, int IC, int OC, int R);
void tcu_lora_forward(tsr_bf16 *out, int ld, const tsr_bf16 *inp, const float *A, const float *B,
                      float scale, float p, uint64_t key, int64_t row0, void *scratch, int N,
                      int IC, int OC, int R, tcu_stream s);
void tcu_lora_backward(tsr_bf16 *dinp, float *dA, float *dB, const tsr_bf16 *dout, int ld,
                       const tsr_bf16 *inp, const float *A, const float *B, float scale, float p,
                       uint64_t key, int64_t row0, void *scratch, int N, int IC, int OC, int R,
                       tcu_stream s);

/* Fused softmax + cross-entropy + its gradient: one read pass over each row of logits, a second
 * that writes the gradient when asked (never a full fp32 copy of the logits): softmax over the first V of Vp columns (fp32 arithmetic),
 * losses[n] = -log p[n, target] (fp32; 0 where target < 0).
 * With dlosses (N fp32, or NULL): logits is OVERWRITTEN by dlogits = (p - onehot) * dlosses[n]
 * (bf16; rows with target < 0 and columns >= V written 0). With dlosses NULL the logits are left
 * as they are (evaluation). logits (N,Vp) bf16; targets (N), -1 = ignore. A target >= V (no
 * such class: a bug upstream) poisons its row: losses[n] NaN and, with dlosses, dlogits NaN in
 * columns < V (0 from V on). */
void tcu_softmax_xent(float *losses, tsr_bf16 *logits, const int32_t *targets,
                      const float *dlosses, int N, int V, int Vp, tcu_stream s);
/* on != 0: tcu_softmax_xent keeps each row in registers between its two passes where the shape
 * allows (Vp % 8 == 0, 16-byte aligned logits, Vp <= 57344): the row read once, the same bits
 * (issue 25; measured through TSR_XENT_RESIDENT, docs/cuda.md). Off by default; process-wide. */
void tcu_softmax_xent_set_resident(int on);
/* The greedy token of each row: idx[n] = the column j < V with the largest logits[n, j], the
 * lowest such j on ties; NaN counts as -inf (a row of -inf and NaN gives 0). Columns >= V are
 * never chosen. idx (N) int32 =; logits (N,Vp) bf16, read only. Exact (no arithmetic), so the
 * same on every run and every device. */
void tcu_argmax(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, tcu_stream s);

/* Sum of squares of g (n fp32) added into *acc (one fp32 on the device, fp32 partial sums per
 * block then a fixed-order sum: deterministic). Zero *acc first (tcu_zero) for a fresh norm. */
void tcu_sumsq(float *acc, const float *g, size_t n, tcu_stream s);

/* dst[i] += src[i], i < n (fp32; one fp32 add per element: deterministic, bit for bit the host's
 * dst[i] + src[i]); n == 0 does nothing. dst and src must be the same buffer or not overlap.
 * Unlike the other ops it uses no process-wide scratch (and no context), so it may run on any
 * stream, concurrently with ops on another one (e.g. on the gradient communication stream while
 * the compute stream runs ops). */
void tcu_add_f32(float *dst, const float *src, size_t n, tcu_stream s);

/* AdamW (decoupled weight decay, as torch.optim.AdamW and ops.h adamw_update) on fp32 master
 * weights p, fp32 g, m, v (n), then the bf16 copy p_bf16 (n) = round(p) that the ops read (or
 * NULL). grad_scale multiplies g first (clipping and 1/accumulation folded in). t >= 1. */
void tcu_adamw_update(float *p, tsr_bf16 *p_bf16, const float *g, float *m, float *v, size_t n,
                      float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                      int t, tcu_stream s);

/* AdamW over several tensors of one flat store at once (issue 25, item 5: one launch for up to 64
 * of them, not one per tensor): segment k updates elements [segs[k].at, segs[k].at + segs[k].n)
 * of p, p_bf16 (or NULL), g, m, v with weight decay segs[k].wd, with tcu_adamw_update's arithmetic
 * (the same bits as one tcu_adamw_update per segment). Segments must not overlap; elements
 * outside every segment are not touched; zero-length segments are skipped. t >= 1. */
typedef struct tcu_adamw_seg {
    size_t at, n; /* first element and element count in the store */
    float wd;     /* weight decay */
} tcu_adamw_seg;
void tcu_adamw_update_segments(const tcu_adamw_seg *segs, int nseg, float *p, tsr_bf16 *p_bf16,
                               const float *g, float *m, float *v, float lr, float beta1,
                               float beta2, float eps, float grad_scale, int t, tcu_stream s);

/* Muon's element-wise steps (src/optim/muon.h; cuda_muon.cu), around its products, which are
 * tcu_matmul_forward and tcu_matmul_backward:
 * momentum: buf (n) fp32 = beta buf + g gscale; u (n) fp32 = nesterov ? g gscale + beta buf : buf.
 * normalize: x (r, c) bf16 = round(u * inv), inv = 1 / (sqrt(*sumsq) + eps) read on the device
 *   (*sumsq: tcu_sumsq of u), u (rows, cols) fp32; transpose: x = (u * inv)^T, r = cols.
 * axpby: out (n) bf16 = round(alpha x + beta y), x, y bf16 (y NULL: round(alpha x)).
 * apply: p (rows, cols) fp32 = p decay - step O, O (rows, cols) bf16, or (cols, rows) read
 *   transposed; p_bf16 (or NULL) = round(p). */
void tcu_muon_momentum(float *buf, const float *g, float *u, size_t n, float beta, float gscale,
                       int nesterov, tcu_stream s);
void tcu_muon_normalize(tsr_bf16 *x, const float *u, const float *sumsq, int rows, int cols,
                        int transpose, float eps, tcu_stream s);
void tcu_axpby_bf16(tsr_bf16 *out, float alpha, const tsr_bf16 *x, float beta, const tsr_bf16 *y,
                    size_t n, tcu_stream s);
void tcu_muon_apply(float *p, tsr_bf16 *p_bf16, const tsr_bf16 *o, int rows, int cols,
                    int transposed, float decay, float step, tcu_stream s);

/* ---- Gated DeltaNet core (issue 68; cuda_deltanet.cu, docs/deltanet.md "CUDA") ----
 * kernels/cpu/cpu_deltanet.h's cpu_deltanet_forward (its meaning, shapes and packed-document
 * rule) at chunk 64: the chunked (WY/UT) form, the chunk's products on the tensor cores, bf16 q,
 * k, v and out, fp32 g, beta, states. q, k (B,T,HK,dk) raw (L2-normalised in the op, q times
 * 1/sqrt(dk)); v, out (B,T,HV,dv); g (log-decay), beta (B,T,HV); state0 (B,HV,dk,dv) or NULL
 * (zero), state_out (B,HV,dk,dv) the final state or NULL (may be state0); ckpt the state entering
 * each block of 64 positions (B,HV,ceil(T/64),dk,dv: tcu_deltanet_ckpt_floats; as the CPU's ckpt)
 * or NULL; seq (B,T) segment ids or NULL. dk, dv multiples of 16 from 16 to 128; HV a multiple
 * of HK.
 * The backward (cpu_deltanet_backward's): dq, dk (B,T,HK,dk), dv (B,T,HV,dv) bf16 +=; dg, dbeta
 * (B,T,HV) fp32 +=; dstate0 (B,HV,dk,dv) fp32 += or NULL; dout bf16; dstate_out fp32 or NULL
 * (zero); ckpt as the forward wrote it; the inputs as given to the forward; scratch device
 * memory of tcu_deltanet_backward_scratch_bytes. */
size_t tcu_deltanet_ckpt_floats(int B, int T, int HV, int dk, int dv);
void tcu_deltanet_forward(tsr_bf16 *out, float *state_out, float *ckpt, const tsr_bf16 *q,
                          const tsr_bf16 *k, const tsr_bf16 *v, const float *g, const float *beta,
                          const float *state0, const int32_t *seq, int B, int T, int HK, int HV,
                          int dk, int dv, tcu_stream s);
size_t tcu_deltanet_backward_scratch_bytes(int B, int T, int HV, int dk, int dv);
void tcu_deltanet_backward(tsr_bf16 *dq, tsr_bf16 *dk, tsr_bf16 *dv, float *dg, float *dbeta,
                           float *dstate0, const tsr_bf16 *dout, const float *dstate_out,
                           const float *ckpt, const tsr_bf16 *q, const tsr_bf16 *k,
                           const tsr_bf16 *v, const float *g, const float *beta,
                           const int32_t *seq, void *scratch, int B, int T, int HK, int HV,
                           int dkd, int dvd, tcu_stream s);
/* ---- the Gated DeltaNet layer's parts around the core (issue 68; cuda_dnparts.cu) ----
 * kernels/cpu/cpu_deltanet.h's cpu_dn_* (their maths, shapes, packed-document rule and history),
 * bf16 activations, fp32 arithmetic and parameter gradients; activation gradients bf16 += (one
 * rounding of the fp32 sum); parameter gradients fp32 += in a fixed order (no atomics; NULL:
 * frozen). conv: x, y (B,T,CD), hist (B,K-1,CD) or NULL, w (CD,K) bf16, K <= 16; dx, dhist (or
 * NULL) bf16 +=, dw (CD,K) fp32 +=. gates: b, a (N,HV) bf16, A_log, dt_bias (HV) bf16, beta, g
 * (N,HV) fp32; db, da bf16 +=, dA_log, ddt_bias fp32 +=. silu gate: out = x silu(z) (n) bf16;
 * dx, dz bf16 +=. */
void tcu_dn_conv_forward(tsr_bf16 *y, const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                         const int32_t *seq, int B, int T, int CD, int K, tcu_stream s);
void tcu_dn_conv_backward(tsr_bf16 *dx, tsr_bf16 *dhist, float *dw, const tsr_bf16 *dy,
                          const tsr_bf16 *x, const tsr_bf16 *hist, const tsr_bf16 *w,
                          const int32_t *seq, int B, int T, int CD, int K, tcu_stream s);
void tcu_dn_gates_forward(float *beta, float *g, const tsr_bf16 *b, const tsr_bf16 *a,
                          const tsr_bf16 *A_log, const tsr_bf16 *dt_bias, int N, int HV,
                          tcu_stream s);
void tcu_dn_gates_backward(tsr_bf16 *db, tsr_bf16 *da, float *dA_log, float *ddt_bias,
                           const float *dbeta, const float *dg, const tsr_bf16 *b,
                           const tsr_bf16 *a, const tsr_bf16 *A_log, const tsr_bf16 *dt_bias,
                           int N, int HV, tcu_stream s);
void tcu_dn_silu_gate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *z, size_t n,
                              tcu_stream s);
void tcu_dn_silu_gate_backward(tsr_bf16 *dx, tsr_bf16 *dz, const tsr_bf16 *dout,
                               const tsr_bf16 *x, const tsr_bf16 *z, size_t n, tcu_stream s);
/* ---- issue 67/68's model variants (cuvar67; docs/cuda.md "Model variants"): the maths of the
 * ops.h ops of the same names, bf16 activations and weights, fp32 arithmetic and gradients ---- */
/* QK-norm over the whole projections (cuda_llama.cu): tcu_qknorm_*'s arguments, rstd (N, 2),
 * qw (NH hs), kw (KVH hs); dqw, dkw fp32 += (each or NULL: frozen) */
void tcu_qknorm_proj_forward(tsr_bf16 *out, float *rstd, const tsr_bf16 *inp, const tsr_bf16 *qw,
                             const tsr_bf16 *kw, int N, int NH, int KVH, int hs, float eps,
                             tcu_stream s);
void tcu_qknorm_proj_backward(tsr_bf16 *dinp, float *dqw, float *dkw, const tsr_bf16 *dout,
                              const tsr_bf16 *inp, const tsr_bf16 *qw, const tsr_bf16 *kw,
                              const float *rstd, int N, int NH, int KVH, int hs, tcu_stream s);
/* tcu_rope_* over the first rot dimensions of each head (inv_freq (rot/2)), cosine and sine
 * times mscale; 2 <= rot <= hs, rot even */
void tcu_rope_part_forward(tsr_bf16 *qkv, const int32_t *pos, int p0, const float *inv_freq,
                           int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                           tcu_stream s);
void tcu_rope_part_backward(tsr_bf16 *dqkv, const int32_t *pos, int p0, const float *inv_freq,
                            int B, int T, int NH, int KVH, int hs, int rot, float mscale,
                            tcu_stream s);
/* GeGLU (tanh GELU) and gpt-oss's clamped unit: tcu_swiglu_*'s shapes and modes */
void tcu_geglu_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, tcu_stream s);
void tcu_geglu_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N, int F,
                        tsr_grad_mode mode, tcu_stream s);
void tcu_moe_gptoss_forward(tsr_bf16 *out, const tsr_bf16 *inp, int N, int F, float alpha,
                            float limit, tcu_stream s);
void tcu_moe_gptoss_backward(tsr_bf16 *dinp, const tsr_bf16 *inp, const tsr_bf16 *dout, int N,
                             int F, float alpha, float limit, tsr_grad_mode mode, tcu_stream s);
/* gpt-oss's expert biases (cuda_moe.cu): out (NK,OC) bf16 rows of expert e += b[e] (b (E,OC)
 * bf16); db (E,OC) fp32 += each expert's rows of dout summed (double, rows ascending) */
void tcu_moe_bias_forward(tsr_bf16 *out, const tsr_bf16 *b, const int32_t *offs, int E, int OC,
                          tcu_stream s);
void tcu_moe_bias_backward(float *db, const tsr_bf16 *dout, const int32_t *offs, int E, int OC,
                           tcu_stream s);
/* x (n) bf16 = round(x * sc) (model.embed_scale) */
void tcu_scale_bf16(tsr_bf16 *x, float sc, size_t n, tcu_stream s);
/* model.attn_output_gate: gated (n) = round(y sigmoid(gate)); backward from dy = d(gated), in
 * place: dy = round(dy s), dgate (n) = round(dy y s (1 - s)), WRITTEN */
void tcu_gate_forward(tsr_bf16 *gated, const tsr_bf16 *y, const tsr_bf16 *gate, size_t n,
                      tcu_stream s);
void tcu_gate_backward(tsr_bf16 *dy, tsr_bf16 *dgate, const tsr_bf16 *y, const tsr_bf16 *gate,
                       size_t n, tcu_stream s);
/* model.moe_shared_gate (cuda_moe.cu; ops.h moe_shgate_*): s_n = sigmoid(x[n] . w), x (N,C) and
 * w (C) bf16. forward: out (N,C) bf16 *= s_n; grad: dg (N) fp32 = (1 - s_n) shg[n] . dshg[n]
 * (shg, dshg (N,S) bf16), gw (C) fp32 += sum_n dg[n] x[n] (double, rows in order; NULL: frozen);
 * dx: dx (N,C) bf16 += dg[n] w */
void tcu_moe_shgate_forward(tsr_bf16 *out, const tsr_bf16 *x, const tsr_bf16 *w, int N, int C,
                            tcu_stream s);
void tcu_moe_shgate_grad(float *dg, float *gw, const tsr_bf16 *shg, const tsr_bf16 *dshg,
                         const tsr_bf16 *x, const tsr_bf16 *w, int N, int S, int C, tcu_stream s);
void tcu_moe_shgate_dx(tsr_bf16 *dx, const float *dg, const tsr_bf16 *w, int N, int C,
                       tcu_stream s);
/* tcu_softmax_xent and tcu_argmax over cap tanh(logits / cap) (model.final_logit_softcapping,
 * cap > 0; cap 0: the plain ops): the gradient times 1 - (z / cap)^2, the logits left raw in an
 * evaluation (a later capped call recomputes z) */
void tcu_softmax_xent_capped(float *losses, tsr_bf16 *logits, const int32_t *targets,
                             const float *dlosses, int N, int V, int Vp, float cap, tcu_stream s);
void tcu_argmax_capped(int32_t *idx, const tsr_bf16 *logits, int N, int V, int Vp, float cap,
                       tcu_stream s);

#ifdef __cplusplus
}
#endif

#endif

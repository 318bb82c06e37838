/* tcu_cudnn.h — cuDNN's fused attention through its C backend API (issue 66 item 1; docs/cuda.md
 * "cuDNN attention").
 *
 * libcudnn.so.9 is opened at run time (dlopen; never linked, so a build or a node without cuDNN
 * still works), only when TSR_ATTENTION asks for it:
 *   TSR_ATTENTION = own (default) | cudnn | auto     read once per process
 *   TSR_CUDNN_LIB = the library to open instead of libcudnn.so.9 (a path or a soname)
 * cudnn: every shape cuDNN takes runs on it; one it refuses runs on tessera's own kernels, said
 * once on stderr with the reason. auto: the same on an sm_90 device, silently otherwise.
 *
 * The graphs are the composite ones cudnn-frontend builds for cuDNN 9.19 (research/cudnn-sdpa.md
 * §1.2, §1.3): causal, bf16 in and out, fp32 scores and softmax, the scale by value, Stats (the
 * natural-log log-sum-exp of the scaled, masked scores: exactly tessera's lse) out of the forward,
 * and the deterministic backward (dQ written by its matmul; no fp32 dQ accumulator). The tensors
 * are tessera's packed qkv (B,T,(NH+2KVH)hs) [q|k|v] described by strides, no copy; GQA by
 * KVH < NH. Phase 1 takes hs 32, 64 and 128, no seq (document mask), no ALiBi, no variants, and
 * the backward only with TSR_GRAD_SET (cuDNN writes dq, dk, dv). Everything else is refused with a
 * reason (tcu_cudnn_refusal).
 *
 * One host thread calls these (cuda_ops.h's one-stream-per-process rule): no locks.
 */
#ifndef TCU_CUDNN_H
#define TCU_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- selection ---- */
typedef enum { TCU_ATT_OWN, TCU_ATT_CUDNN, TCU_ATT_AUTO, TCU_ATT_COUNT } tcu_att_backend;
/* TSR_ATTENTION, read at the first call (an unknown value ends the process, naming it) */
tcu_att_backend tcu_cudnn_backend(void);
/* Sets it for the rest of the process instead (the op test, the bench), like
 * tcu_attention_set_wgmma: before sizing the scratch (tcu_attention_scratch_bytes counts it). */
void tcu_cudnn_set_backend(tcu_att_backend b);
/* Parses a TSR_ATTENTION value: 0, or -1 (unknown; *b untouched). NULL or "" is own. */
int tcu_cudnn_parse_backend(const char *s, tcu_att_backend *b);
/* TSR_ATTENTION's values in tcu_att_backend's order (the trainer's switch reads the same table) */
extern const char *const tcu_att_backend_names[TCU_ATT_COUNT];

/* ---- the library ---- */
/* The version gate: 1 when cudnnGetVersion() = version and cudnnGetCudartVersion() = cudart may
 * run the graphs (major 9 and at least 9.15.1, the fixes the research names; cudart major 13),
 * else 0 with the reason in why. */
int tcu_cudnn_version_ok(size_t version, size_t cudart, char *why, size_t n);
/* Opens the library (TSR_CUDNN_LIB or libcudnn.so.9) once, resolves its entry points, applies
 * the version gate: NULL when usable, else why not. Needs no GPU. */
const char *tcu_cudnn_load(void);
/* 1 when this build has cuDNN's headers (the CUDA toolkit's cudnn_graph.h), 0: every call says
 * "unavailable" */
int tcu_cudnn_built(void);
/* cudnnGetVersion() of the loaded library (0 when none) */
size_t tcu_cudnn_version(void);

/* ---- shapes and refusals ---- */
typedef struct tcu_cudnn_shape {
    int B, T, NH, KVH, hs;
} tcu_cudnn_shape;
/* NULL when cuDNN's phase-1 graphs take this call, else the reason (a static string). bwd: the
 * backward (mode counts only there). */
const char *tcu_cudnn_refusal(tcu_cudnn_shape sh, const float *alibi_slopes, const int32_t *seq,
                              const tsr_attn_var *var, int bwd, tsr_grad_mode mode);

/* ---- the graphs' non-virtual tensors (the variant pack's table) ---- */
typedef enum {
    TCU_CD_Q = 1, TCU_CD_K, TCU_CD_V, TCU_CD_O, TCU_CD_STATS, TCU_CD_SCALE, TCU_CD_NEG_INF,
    TCU_CD_DO, TCU_CD_DQ, TCU_CD_DK, TCU_CD_DV, TCU_CD_ONE, TCU_CD_SOFTMAX_SUM, TCU_CD_UID_COUNT
} tcu_cudnn_uid;
/* where a tensor's data lives: the caller's buffers, the scratch, or a host scalar */
typedef enum {
    TCU_BUF_QKV, TCU_BUF_OUT, TCU_BUF_LSE, TCU_BUF_DOUT, TCU_BUF_DQKV, TCU_BUF_SCRATCH,
    TCU_BUF_HOST, TCU_BUF_COUNT
} tcu_cudnn_buf;
typedef struct tcu_cudnn_tensor {
    int64_t uid;
    int fp32;            /* 1: fp32, 0: bf16 */
    int64_t dim[4];      /* logical (B, H, S, D) */
    int64_t stride[4];   /* in elements */
    tcu_cudnn_buf buf;
    int64_t offset;      /* elements from the buffer's start */
} tcu_cudnn_tensor;
/* The non-virtual tensors of the forward (bwd 0) or backward (bwd 1) graph for shape sh, in UID
 * order, into t (room for TCU_CD_UID_COUNT): how many. K and V are given transposed where the
 * graph reads them so (K^T in both, V^T in the backward). */
int tcu_cudnn_tensors(tcu_cudnn_shape sh, int bwd, tcu_cudnn_tensor *t);

/* The view of K that the backward's dQ = dS K reads: K's row of the table (K^T, (B,KVH,hs,T)) with
 * dims and strides 2 and 3 swapped, (B,KVH,T,hs) over the same memory (a RESHAPE is a strided
 * view, as cudnn-frontend's keeps K's strides). */
tcu_cudnn_tensor tcu_cudnn_k_view(tcu_cudnn_shape sh);
/* NULL when every device pointer of the graph of (sh, bwd) over buf (the variant pack's, as the
 * table places them) and ws is 16-byte aligned (the tensors' declared alignment), else which is
 * not (a static string). Host scalars are not checked. */
const char *tcu_cudnn_misaligned(tcu_cudnn_shape sh, int bwd, void *const buf[TCU_BUF_COUNT],
                                 const void *ws);

/* ---- the model (before sizing) ---- */
/* The attention backend for a model when TSR_ATTENTION asks for `asked`, from what the model's
 * attention uses: a document mask (doc), ALiBi (alibi), any variant (var: window, sinks, soft cap,
 * scale). The graphs take none of them, so a model that uses one gets TCU_ATT_OWN, *why its
 * reason (a static string); else `asked`, *why NULL. A pure function: the caller sets the result
 * with tcu_cudnn_set_backend before sizing (the trainer: src/gpu/gpu_train_env.c), so that a
 * refused model's sizing builds no plan, adds no scratch and opens no library, and every call runs
 * on the own kernels. */
tcu_att_backend tcu_cudnn_model_backend(tcu_att_backend asked, int doc, int alibi, int var,
                                        const char **why);

/* ---- graphs without a GPU (the CPU test) ---- */
/* Builds the forward or backward operation graph of sh and finalizes it (no handle, no GPU):
 * 0, or -1 with the failing call and cuDNN's message in why. ops: the graph's operations. */
int tcu_cudnn_graph_check(tcu_cudnn_shape sh, int bwd, int *ops, char *why, size_t n);

/* ---- the calls (cuda_attention.cu's entry points call these first) ---- */
/* Scratch the backward needs when cuDNN runs it for this shape: the softmax_sum rows
 * (B NH T fp32) and the plan's workspace, 256-aligned; 0 where the own kernels will run it (the
 * backend own, the model or the shape refused, no library, auto off sm_90). Otherwise builds both
 * plans of sh (GPU) at start, so the memory plan counts the backward's workspace and no step pays
 * for a build; allocates nothing (the forward's workspace is grown at the first forward that needs
 * it). Only a sized shape runs on cuDNN: a call of another falls back (said once). */
size_t tcu_cudnn_scratch_bytes(tcu_cudnn_shape sh);
/* 1 when cuDNN ran the forward (out, lse as tcu_attention_forward's), 0: the caller runs its own */
int tcu_cudnn_forward(tsr_bf16 *out, float *lse, const tsr_bf16 *qkv, const float *alibi_slopes,
                      const int32_t *seq, const tsr_attn_var *var, tcu_cudnn_shape sh,
                      tcu_stream s);
/* 1 when cuDNN ran the backward (dqkv = the gradient; mode TSR_GRAD_SET only), 0: the caller's */
int tcu_cudnn_backward(tsr_bf16 *dqkv, const tsr_bf16 *dout, const tsr_bf16 *qkv,
                       const tsr_bf16 *out, const float *lse, const float *alibi_slopes,
                       const int32_t *seq, const tsr_attn_var *var, void *scratch,
                       tcu_cudnn_shape sh, tsr_grad_mode mode, tcu_stream s);
/* How many calls cuDNN has run (executes that succeeded): the op test's proof that it ran. */
size_t tcu_cudnn_calls(void);
/* 1 (default): a failed execute ends the process, naming it (a half-run op cannot be trusted);
 * 0 (the op test only): it falls back to the own kernels instead, said on stderr, not counted, the
 * message kept for tcu_cudnn_last_error, so one bad case fails its checks, not the whole test. */
void tcu_cudnn_set_fatal(int on);
/* the last failed execute's message ("" when none) */
const char *tcu_cudnn_last_error(void);
/* Frees every plan, the forward's workspace and the handle (tcu_shutdown calls it); the next call
 * starts anew. Opens nothing when nothing was built. */
void tcu_cudnn_release(void);
/* What the plan for sh chose (bench and logs): 0, or -1 with why (a refusal of the shape or the
 * model included: a refused shape runs on the own kernels, so it has no plan to report).
 * engine: the global index;
 * ws: workspace bytes; build_ms: the plan's build time; json: its JSON (may be NULL). */
typedef struct tcu_cudnn_plan_info {
    int64_t engine;
    size_t ws;
    double build_ms;
    char json[2048];
} tcu_cudnn_plan_info;
int tcu_cudnn_plan_info_of(tcu_cudnn_shape sh, int bwd, tcu_cudnn_plan_info *info, char *why,
                           size_t n);

#ifdef __cplusplus
}
#endif

#endif

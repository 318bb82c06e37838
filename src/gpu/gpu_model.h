/* gpu_model.h — the decoder of model.h on the CUDA backend (kernels/cuda/cuda_ops.h).
 *
 * The sequence is src/model/decoder.c's, on the CUDA implementation of kernels/backend.h that
 * gpu_backend.c fills in (docs/decoder.md). Same layout, same maths, GPU precisions (docs/cuda.md): fp32 master weights, their bf16 copy
 * that the ops read, fp32 gradients, bf16 activations, fp32 statistics and losses. The flat
 * buffers use the host model's offsets (tsr_model.params_info), so one copy moves weights or
 * gradients between host and device whole. Activations are stacked per layer like the CPU's; the
 * attention keeps its log-sum-exp (B,NH,T) instead of probabilities, and the logits are
 * overwritten by their gradient in the forward pass of a training step (fused
 * softmax-cross-entropy): forward and backward come in pairs. Activation checkpointing keeps
 * the groups of model.h as the CPU does and recomputes the dropped ones before a layer's
 * backward.
 * Under zero3 / hsdp the weights come unit by unit from a gpu_param_source (gpu_shard.c).
 * Every call is queued on the model's stream; gpu_model_loss_sum, upload and download wait for it.
 */
#ifndef TSR_GPU_MODEL_H
#define TSR_GPU_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_ops.h"
#include "backend.h"
#include "model/model.h"

/* Which flat buffers the model holds (parallel.sharding): ddp all three (fp32 master weights,
 * their bf16 copy, fp32 gradients); zero1 the bf16 weights and the gradients (the master weights
 * are sharded with the AdamW state, src/gpu/gpu_shard.h); zero3 / hsdp none: a source gives each
 * unit's weights and gradient buffers as the passes reach it; frozen (LoRA's base) the bf16
 * weights only: no master weights, no gradients (the decoder skips the weight gradients). */
typedef enum { GPU_STATE_FULL, GPU_STATE_NO_MASTER, GPU_STATE_NONE, GPU_STATE_FROZEN } gpu_state;

/* The source of the weights under zero3 / hsdp (units as model/fsdp.h: 0 the root, l+1 layer l).
 * get fills w[id] (bf16 weights) and, when backward, gr[id] (fp32 gradients to accumulate into)
 * for unit u's tensors, usable by the work queued next on the compute stream; the forward pass
 * asks for the root, then layer units in order (each just after the previous layer's weights are
 * queued), the backward pass for the root, then layers L..1. put(ctx, u) follows the backward of
 * layer unit u (its gradients complete). */
typedef struct gpu_param_source {
    void *ctx;
    void (*get)(void *ctx, int u, int backward, const tsr_bf16 **w, float **gr);
    void (*put)(void *ctx, int u);
    /* zero3 / hsdp's FP8 all-gather (gpu_shard.h), or NULL: 1 with the E4M3 codes (*qw) and
     * scale_inv (*sw_inv) of the weight w points at when the source gathered it so (w's bf16 is
     * then not there), else 0 */
    int (*fp8)(void *ctx, const void *w, const tsr_fp8 **qw, const float **sw_inv);
} gpu_param_source;

typedef struct tsr_gpu_model {
    const tsr_model *m; /* layout and configuration (host); its params/grads are the host mirror */
    const uint8_t *starts; /* attn_mask = document: the next forward's segment starts (B, T), as
                            * tsr_model.starts, or NULL */
    tcu_stream s;
    float *params;      /* (n_params) fp32 master weights (GPU_STATE_FULL), else NULL */
    tsr_bf16 *wbf;      /* (n_params) bf16 copy read by the ops; NULL: src gives the units */
    float *grads;       /* (n_params) fp32, or NULL under GPU_STATE_NONE and _FROZEN */
    const gpu_param_source *src; /* zero3 / hsdp */
    /* parallel.expert: the expert tensors of unit u, which the flat layout leaves out (gpu_ep.h
     * gpu_ep_unit), or NULL */
    void (*experts)(void *ctx, int u, int backward, const void **w, float **gr);
    void *experts_ctx;
    float *slopes;      /* (NH) ALiBi slopes, or NULL */
    float *rope;        /* (2, hs/2) RoPE frequencies (model_rope_tables), or NULL */
    int B, T;           /* activations allocated for B x T (0: none; = a.B, a.T) */
    struct tsr_lora *lora; /* LoRA: the adapters with w, g on the device (model_lora.h), or NULL */
    struct tsr_ring *ring; /* context parallelism: the ring over the device (gpu_ring.h), or NULL */
    const struct tsr_tp_dev *tp; /* tensor parallelism: the collectives over the device (m->tp
                                  * split; gpu_tp.h), or NULL */
    const void *pp_x, *pp_dy; /* a pipeline stage's (gpu_pp.h): the next pass's input from the
                               * stage before, its output's gradient from the stage after
                               * (device, decoder.h), or NULL */
    tsr_backend be;     /* the CUDA backend (bf16) on stream s: the decoder's interface */
    tsr_acts a;         /* activations (bf16, statistics fp32), laid out by src/model/decoder.c */
} tsr_gpu_model;

/* Device bytes of the flat weights and gradients the state holds. */
size_t gpu_model_state_bytes(const tsr_model *m, gpu_state state);
/* Device bytes of the activations for B x T (what gpu_model_try_alloc_acts allocates). */
size_t gpu_model_acts_bytes(const tsr_model *m, int B, int T);
/* Of those, one decoder layer's saved activations (dec_layer_acts_bytes), compressed (fp8 1) or
 * not. */
size_t gpu_model_layer_acts_bytes(const tsr_model *m, int B, int T, int fp8);
/* dst (n) = src rounded to bf16 on the host, nearest even, as tcu_f32_to_bf16 rounds finite
 * values (a frozen base is uploaded so: no fp32 copy on the device) */
void gpu_model_round_bf16(tsr_bf16 *dst, const float *src, size_t n);
/* Device bytes of LoRA's scratch for N rows (model_lora.h lora_scratch_bytes on this backend). */
size_t gpu_model_lora_scratch_bytes(const struct tsr_lora *lo, int N);
/* Device bytes of precision.fp8's scratch for N rows: tcu_matmul_forward_fp8 keeps one, grown to
 * its largest call's (tcu_fp8_scratch_bytes), so the largest over the linear layers of the
 * decoder layers fp8_skip leaves in FP8 (0 when it leaves none). */
size_t gpu_model_fp8_scratch_bytes(const tsr_model *m, int N, tsr_fp8_skip skip);
/* Allocates the state's flat buffers (dies naming what does not fit; callers check the plan
 * first) and the ALiBi slopes or RoPE frequencies. tcu_init must have run. GPU_STATE_NONE: set g->src before a pass. */
void gpu_model_init(tsr_gpu_model *g, const tsr_model *m, tcu_stream s, gpu_state state);
/* precision.fp8 (docs/cuda.md "FP8"): "tensorwise" puts the FP8 forward in g's backend table for
 * the decoder layers fp8_skip leaves (a linear layer whose IC or OC is not a multiple of 16 stays
 * bf16: cuBLASLt's FP8 rule); "none" takes it out. Call after gpu_model_init. */
void gpu_model_use_fp8(tsr_gpu_model *g, tsr_fp8_mode mode, tsr_fp8_skip skip);
/* 1 when decoder layer l's tensor id forwards through the FP8 GEMM (after gpu_model_use_fp8):
 * a linear layer's weight in the FP8 layers whose IC and OC are multiples of 16 */
int gpu_model_fp8_weight(const tsr_gpu_model *g, int l, int id);
/* Activations for B x T: 0, or -1 with nothing left allocated when the device is full. */
int gpu_model_try_alloc_acts(tsr_gpu_model *g, int B, int T);
void gpu_model_free_acts(tsr_gpu_model *g);
void gpu_model_free(tsr_gpu_model *g);
/* Host fp32 weights (n_params) -> master weights and their bf16 copy (GPU_STATE_FROZEN: the
 * bf16 weights only, rounded on the host piece by piece: no device memory beyond the weights);
 * and back (GPU_STATE_FULL only: the sharded states move weights through gpu_shard.h). */
void gpu_model_upload(tsr_gpu_model *g, const float *params_host);
void gpu_model_download(const tsr_gpu_model *g, float *params_host);
/* Forward over tokens, targets (B,T, host; -1 = no loss). loss_scale >= 0: a training step, the
 * logits are replaced by d(loss_scale * sum of losses)/d logits for gpu_model_backward (0 when
 * no target counts: zero gradients, as on the CPU); loss_scale < 0: evaluation, the logits stay.
 * Queued: gpu_model_loss_sum reads the result. The host arrays may be reused as soon as this
 * returns (copies from pageable memory have read them by then: cuda_common.cu). */
void gpu_model_forward(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets, int B,
                       int T, float loss_scale);
/* The decoder over g (decoder.h): its backend, activations and units, for a pass composed
 * around the model's (multi-token prediction: gpu_mtp.c) */
struct tsr_decoder gpu_model_decoder(tsr_gpu_model *g);
/* A pipeline stage before the last: the last forward's output (decoder.h dec_output, device) */
const void *gpu_model_output(tsr_gpu_model *g);
/* Sum of the losses of the last forward over its counted targets (waits for the stream). */
double gpu_model_loss_sum(tsr_gpu_model *g, const int32_t *targets, int B, int T);
/* The last forward's B x T per-position losses (fp32) copied to dst on the device, queued (no
 * wait): a step stages its microbatches' losses and reads them once (src/gpu/gpu_train.c). */
void gpu_model_stage_losses(tsr_gpu_model *g, float *dst, int B, int T);
/* MoE, staged likewise: the last forward's routing statistics (gpu_model_moe_stage_bytes of
 * them, 0 without MoE) copied to dst on the device, queued; gpu_model_moe_stats_add_staged adds a
 * host copy of such a stage to acc as decoder.h's dec_moe_stats_add adds the last forward's,
 * weighted as a training forward with loss_scale weighs them. */
size_t gpu_model_moe_stage_bytes(const tsr_model *m);
void gpu_model_moe_stage(tsr_gpu_model *g, void *dst);
void gpu_model_moe_stats_add_staged(tsr_gpu_model *g, const void *staged, const int32_t *targets,
                                    int B, int T, float loss_scale, double *acc);
/* The last forward's routing statistics added to acc at once (a wait), weighted by w (DPO's
 * microbatches: model.h model_moe_stats_add_w) */
void gpu_model_moe_stats_add(tsr_gpu_model *g, double w, double *acc);
/* After an evaluation forward (loss_scale < 0) over the same B x T: per position its loss and
 * its greedy token (the argmax of its logits over the V real columns, the lower id on ties; bf16
 * logits, so it can differ from the CPU's fp32 choice where two logits are within bf16 rounding),
 * into host arrays of B*T; 0 and -1 where targets < 0 (model_token_scores; greedy NULL: no
 * argmax). Waits for the stream. */
void gpu_model_token_scores(tsr_gpu_model *g, const int32_t *targets, int B, int T, float *losses,
                            int32_t *greedy);
/* Backward of the last (training) forward: gradients accumulate. tokens (host) as given to forward.
 * ready(ctx, unit), when not NULL, is called as soon as a unit's gradients are complete on the
 * stream (unit l+1: layer l, in the order L..1; unit 0, last: wte, wpe, lnfw, lnfb, lm_head), so
 * their communication can start while the rest of the backward pass runs. */
void gpu_model_backward(tsr_gpu_model *g, const int32_t *tokens, int B, int T,
                        void (*ready)(void *ctx, int unit), void *ctx);
/* A pipeline stage before the last (gpu_pp.h): the backward of its last training forward from
 * g->pp_dy, targets and loss_scale as that forward's (decoder.h dec_backward: such a stage has
 * no logits to hold the loss's gradient). Gradients accumulate; no ready calls. */
void gpu_model_backward_stage(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets,
                              int B, int T, float loss_scale);
/* Backward of the last evaluation forward (loss_scale < 0) with a loss gradient per position:
 * dlosses (B*T host floats) = d(objective) / d(its loss) where targets (host) >= 0, and with MoE
 * moe_w times the forward's auxiliary losses (decoder.h dec_backward_weighted: DPO). Gradients
 * accumulate; no ready calls (the caller reduces after). */
void gpu_model_backward_weighted(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets,
                                 int B, int T, const float *dlosses, float moe_w);
struct gen_batch_opts;
struct gen_seq;
/* Batched generation on the device (generate/gen_batch.h gen_batch_run) over the model's bf16
 * weights: under zero3 / hsdp every unit gathered once into a full copy for the call (not once
 * per token). Returns the tokens generated. */
int64_t gpu_model_generate(tsr_gpu_model *g, const struct gen_batch_opts *o, struct gen_seq *seqs,
                           int n);
/* Unit u's tensors in the flat buffer: (offset, count) pairs into off[], len[], one per tensor the
 * unit holds; returns how many (at most TSR_P_COUNT). */
int gpu_model_unit_slices(const tsr_model *m, int u, size_t *off, size_t *len);

#endif

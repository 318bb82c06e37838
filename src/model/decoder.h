/* decoder.h — the decoder written once over the backend interface (kernels/backend.h;
 * docs/decoder.md): its activation plan, its forward (training and evaluation), its backward with
 * the activation-checkpoint recomputation, and its KV-cache decode step. model.c runs it on the
 * fp32 backend, src/gpu/gpu_model.c on the CUDA backend (src/gpu/gpu_backend.c); each only says
 * where the weights and activations are.
 *
 * Shapes and layout: model.h (tsr_model, tsr_acts, tsr_kv_cache). A unit is as in model.h's
 * tsr_param_source: unit 0 the root (wte, wpe, lnfw, lnfb), unit l+1 layer l.
 */
#ifndef TSR_DECODER_H
#define TSR_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model/model.h"

/* Where the decoder takes each unit's tensors from, just before it uses them: get fills w[id]
 * (the backend's weight type) and, when backward, g[id] (fp32 gradients to accumulate into),
 * NULL for tensors the unit does not hold; put follows the unit's last use in a pass. The
 * forward asks for the root, then the layer units in order (unit l+2 right after layer l's last
 * matmul, for the residual add fused with the next LayerNorm), putting each back after the next
 * one is fetched; the backward for the root, then units L..1, putting each after its backward,
 * then the root. */
typedef struct tsr_dec_params {
    void *ctx;
    void (*get)(void *ctx, int unit, int backward, const void **w, float **g);
    void (*put)(void *ctx, int unit, int backward);
} tsr_dec_params;

typedef struct tsr_decoder {
    const tsr_model *m;      /* shapes, configuration, activation checkpointing */
    const tsr_backend *be;
    tsr_acts *a;             /* allocated with dec_try_alloc_acts on be */
    tsr_dec_params params;
    const float *slopes;     /* (NH) ALiBi slopes on the backend, or NULL */
    const float *rope;       /* (hs/2) RoPE frequencies on the backend, or NULL */
    struct tsr_lora *lora;   /* LoRA adapters whose w, g live on the backend (model_lora.h), or
                              * NULL: the fp32 model's m->lora, the CUDA model's device copy */
    struct tsr_ring *ring;   /* context parallelism (m->cpN > 1; model_ring.h): the ring over
                              * this backend's memory, else NULL. The entries below then take
                              * and give whole sequences of T positions; the activations hold
                              * this rank's T / cpN of them, and the attention runs round the
                              * ring. */
    const uint8_t *starts;   /* attn_mask = document: the rows' segment starts (tsr_model.starts)
                              * or NULL */
    struct tsr_tp *tp;       /* tensor parallelism (m->tp; model_tp.h): m is this rank's share of
                              * a split over a tensor group, and the decoder sums the split
                              * halves over it, else NULL */
    const struct tsr_tp_dev *tpdev; /* with tp on a device backend: the group's collectives on
                              * its memory (model_tp.h; device = cuda: src/gpu/gpu_tp.h); NULL on
                              * the host */
    /* Pipeline parallelism (model_pp.h): m is a chunk of a pipeline stage's layers. Without the
     * embedding (m->cfg.part.no_embed) the forward starts from pp_x, the previous stage's output
     * (the frame's rows x C, act on be); without the head (no_head) it ends with the last
     * layer's output (its residual3, unnormed: dec_output), the backward starts from pp_dy = its
     * gradient, and a stage without the embedding ends its backward with d(its input) in
     * a->dresidual. NULL for a whole model. With the head, pp_dy (or NULL) is added to
     * d(the last layer's output) after the final norm's backward: multi-token prediction's
     * gradient to it (mtp.h). */
    const void *pp_x, *pp_dy;
} tsr_decoder;

/* Offsets in the flat parameter layout of unit u's slice of each tensor; SIZE_MAX for tensors
 * the unit does not hold (or the model does not have). */
void dec_unit_offsets(const tsr_model *m, int u, size_t off[TSR_P_COUNT]);

/* The activation plan: bytes of activations for B x T on be (each buffer rounded up to be->align),
 * allocation (0, or -1 with nothing left allocated), release (a->B = 0 after). */
size_t dec_acts_bytes(const tsr_model *m, const tsr_backend *be, int B, int T);
/* Of those, the bytes one decoder layer keeps from its forward to its backward (without
 * activation checkpointing), with model.activation_compression = "fp8" (fp8 1) or "none" (0),
 * whatever m's: the stacks' per-layer share (--plan's line; docs/cuda.md "Compressed
 * activations"). */
size_t dec_layer_acts_bytes(const tsr_model *m, const tsr_backend *be, int B, int T, int fp8);
int dec_try_alloc_acts(const tsr_model *m, const tsr_backend *be, tsr_acts *a, int B, int T);
/* Exits with TSR_EXIT_USAGE naming the key when the model needs an entry be does not have (the
 * Llama-style blocks on a backend without them). dec_try_alloc_acts calls it. */
void dec_check_backend(const tsr_model *m, const tsr_backend *be);
/* 1 when some layer's attention has a variant of ops.h's tsr_attn_var (a sliding window, sinks, a
 * score scale other than 1/sqrt(hs), a soft cap): what the attention backends are asked with */
int dec_attn_has_variants(const tsr_model *m);
void dec_free_acts(const tsr_backend *be, tsr_acts *a);
/* linear_attention layers (mixer_deltanet.c): floats of one such layer's activations for B x T (its
 * slot of TSR_A_DN, or a decode chunk's tsr_kv_cache dn), and of one sequence's cache of one such
 * layer: its state (state 1) or its convolution tail (0) */
size_t dec_dn_floats(const tsr_model *m, const tsr_backend *be, int B, int T);
/* bytes of the linear layers' one backward slot on be for B x T (TSR_A_DNBWD: a layer's
 * activation gradients and the core's scratch, dn_backward_bytes; 0 without such layers) */
size_t dec_dn_backward_bytes(const tsr_model *m, const tsr_backend *be, int B, int T);
size_t dec_dn_cache_floats(const tsr_model *m, int state);

/* Forward over tokens, targets (B,T, host; -1 = no loss). loss_scale >= 0: a training forward,
 * the logits are replaced by d(loss_scale * sum of losses)/d logits (fused); < 0: evaluation.
 * Needs B <= a->B and T == a->T (with a ring: T / cpN == a->T, the whole sequences given, this
 * rank's share computed). */
void dec_forward(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets, int B,
                 int T, float loss_scale);
/* A pipeline chunk without the head: where its last forward's output lies (the last layer's
 * residual3, the frame's rows x C on the backend) */
const void *dec_output(const tsr_decoder *d);
/* Sum of the last forward's losses over the targets that count (waits for the backend). With a
 * ring, the sum over the whole sequences: every rank of the context group gets it (collective
 * over the group). */
double dec_loss_sum(const tsr_decoder *d, const int32_t *targets, int B, int T);
/* sum over i < N of losses[i] where targets[i] >= 0, in double, in order: dec_loss_sum's sum of
 * host losses (the GPU trainer's staged step, src/gpu/gpu_train_step.c, sums the same way) */
double dec_sum_losses(const float *losses, const int32_t *targets, size_t N);
/* After an evaluation forward: per position its loss and greedy token (host arrays of B*T), 0 and
 * -1 where targets < 0 (model.h model_token_scores); greedy NULL: the losses only, no argmax. */
void dec_token_scores(const tsr_decoder *d, const int32_t *targets, int B, int T, float *losses,
                      int32_t *greedy);
/* Backward of the last forward: parameter gradients accumulate. After an evaluation forward the
 * gradient of the loss is formed first (targets, loss_scale: as the forward would have; needs the
 * backend's softmax_xent_grad); after a training forward both are unused. tokens: the host ids.
 * ready(ctx, unit), or NULL, follows each unit's put in the backward. Checkpointed layers first
 * recompute what they dropped with the same ops on the same inputs (the same bits). */
void dec_backward(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets, int B,
                  int T, float loss_scale, void (*ready)(void *ctx, int unit), void *ctx);

/* dec_backward after an evaluation forward, with a loss gradient per position: dlosses (B*T host
 * floats) = d(objective) / d(that position's loss), used where targets >= 0 (DPO weighs the
 * chosen and rejected answers' tokens by the pair's gradient, docs/dpo.md); with MoE, plus moe_w
 * times the forward's auxiliary losses (their coefficients applied; 0: none). */
void dec_backward_weighted(const tsr_decoder *d, const int32_t *tokens, const int32_t *targets,
                           int B, int T, const float *dlosses, float moe_w);

/* MoE (docs/moe.md): the weight of a microbatch's auxiliary losses, its counted targets (N host
 * targets >= 0) x loss_scale. */
double dec_moe_weight(const int32_t *targets, size_t N, float loss_scale);
/* MoE (docs/moe.md): adds the last forward's statistics to acc, LM records of 2 + E doubles in
 * layer order: w x the layer's aux loss, w x its z-loss, then its tokens per expert (unweighted
 * counts of assignments). Nothing in a dense model. Waits for the backend. */
void dec_moe_stats_add(const tsr_decoder *d, double w, double *acc);
/* The same in two halves, for a backend that stages a step's statistics and reads them once
 * (src/gpu/gpu_train_step.c): where the last forward's two per-layer stacks lie on the backend and
 * their bytes (all 0 without MoE), and the adding of host copies of them. */
typedef struct dec_moe_view {
    const void *stats, *offs;
    size_t stats_bytes, offs_bytes;
} dec_moe_view;
dec_moe_view dec_moe_stats_view(const tsr_decoder *d);
/* stats_bytes + offs_bytes of the view on backend be, for any B x T (0 without MoE) */
size_t dec_moe_stats_bytes(const tsr_model *m, const tsr_backend *be);
void dec_moe_stats_add_host(const tsr_decoder *d, const float *stats, const int32_t *offs,
                            double w, double *acc);

/* The KV-cache decode step: c tokens at positions kv->len.. (one segment, starting at kv->seg)
 * through every layer on be, appending their keys and values; kv->len += c. With probs (Vp,
 * host) not NULL, the next-token distribution after the last of them. Needs the backend's
 * attention_decode, a host backend (kv's buffers). */
void dec_kv_chunk(const tsr_decoder *d, tsr_kv_cache *kv, const int32_t *tokens, int c,
                  float *probs);
/* Batched decoding (model.h tsr_kv_slots): slot >= 0: c tokens (host) at that slot's next
 * positions (one segment); slot < 0: c rows, each one new token of the slot ks's host ids name
 * (model_kv_slots_step fills them). Every product through be's matrows_forward when it has one.
 * probs (Vp host) or NULL: the chunk's next-token distribution; rows: probs (c, Vp). Needs the
 * backend's attention_decode and attention_decode_rows. */
void dec_kv_slots(const tsr_decoder *d, tsr_kv_slots *ks, int slot, const int32_t *tokens, int c,
                  float *probs);

#endif

/* model.h — a decoder-only transformer (GPT-2, MPT, Llama, Qwen, Mistral style) on top of the op
 * interface.
 *
 * Dimensions as in kernels/ops.h: B, T, C, NH, KVH, hs, QKV, F, V, Vp, L, N = B*T.
 * One block: x -> x + proj(attn(N1(x))) -> x + down(mlp(up(N2(x)))); final norm; logits = nf @ W^T
 * with W = wte (tied) or lm_head. N = LayerNorm or RMSNorm (model.norm); mlp = gelu of fc, or
 * SwiGLU of the fused [gate | up] projection (model.mlp). pos = learned adds wpe in the encoder;
 * pos = alibi adds -slope_h*(i-j) to the attention scores (MPT's slopes); pos = rope turns q and k
 * (after the optional per-head QK-norm of Qwen 3). Attention has NH query and KVH key/value heads
 * of size hs. bias = false removes biases from linear layers and LayerNorms (qkv_bias puts the q,
 * k, v ones back).
 * attn_mask = document cuts every input row into segments, each ending with (and including) an
 * eot_token: attention stays within a segment and learned positions restart at 0 in each, so a
 * segment computes what it would compute alone at the start of a row (docs/model.md).
 * Rows V..Vp-1 of wte are zero at init and never receive gradient: padded logits are excluded from
 * the softmax and never sampled.
 */
#ifndef TSR_MODEL_H
#define TSR_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "backend.h"
#include "ops.h"

/* Parameter tensors, in the order they are laid out in the flat parameter buffer. Each is a
 * layer kind's (layer_kind.h: its name, shape, initialisation, split rule): the frame's (the
 * embeddings, the block's norms, the final norm, the head: model.c), a mixer's or an MLP's. A new
 * tensor takes a new id anywhere (an absent tensor takes no room: the layout of a model without it
 * is unchanged) and a row of its kind. */
typedef enum {
    TSR_P_WTE = 0, /* (Vp, C) token embedding, tied with the LM head */
    TSR_P_WPE,     /* (maxT, C) learned positions; size 0 with ALiBi */
    TSR_P_LN1W,    /* (L, C) */
    TSR_P_LN1B,    /* (L, C) size 0 without bias */
    TSR_P_QKVW,    /* (L, QKV, C) [q heads | k heads | v heads] */
    TSR_P_QKVB,    /* (L, QKV) */
    TSR_P_QNORMW,  /* (L, hs) QK-norm weights of the query heads; size 0 without qk_norm */
    TSR_P_KNORMW,  /* (L, hs) and of the key heads */
    TSR_P_SINKS,   /* (L, NH) attention sinks' logits (model.attn_sinks); size 0 without */
    TSR_P_ATTPROJW,/* (L, C, NH*hs) */
    TSR_P_ATTPROJB,/* (L, C) */
    TSR_P_POSTATTNW,/* (L, C) the norm after the attention (sandwich norms); size 0 without */
    TSR_P_POSTMLPW,/* (L, C) and after the MLP */
    TSR_P_LN2W,    /* (L, C) */
    TSR_P_LN2B,    /* (L, C) */
    TSR_P_FCW,     /* (LD, F, C); SwiGLU: (LD, 2F, C), the gate rows then the up rows */
    TSR_P_FCB,     /* (LD, F) or (LD, 2F) */
    TSR_P_FCPROJW, /* (LD, C, F) */
    TSR_P_FCPROJB, /* (LD, C); LD = L but in a MoE model (below) */
    /* Mixture of experts (docs/moe.md), stacked over the LM MoE layers only; the dense MLP
     * tensors above (fcw .. fcprojb) are then stacked over the LD = L - LM other layers. */
    TSR_P_ROUTERW, /* (LM, E, C) the router */
    TSR_P_ROUTERB, /* (LM, E) its bias (model.moe_router_bias); size 0 without */
    TSR_P_ROUTERCORR, /* (LM, E) the correction bias of the experts' choice (model.moe_topk_method
                       * = noaux_tc; Hugging Face's e_score_correction_bias); size 0 without */
    TSR_P_EXPW1,   /* (LM, E, 2FE, C) each expert's [gate | up] rows, like SwiGLU's fcw */
    TSR_P_EXPB1,   /* (LM, E, 2FE) their biases (model.moe_expert_bias); size 0 without */
    TSR_P_EXPW2,   /* (LM, E, C, FE) each expert's down projection */
    TSR_P_EXPB2,   /* (LM, E, C) its bias (model.moe_expert_bias); size 0 without */
    TSR_P_SHW1,    /* (LM, 2S, C) the shared expert's [gate | up]; size 0 without one */
    TSR_P_SHW2,    /* (LM, C, S) */
    TSR_P_SHGATEW, /* (LM, 1, C) the shared expert's gate (model.moe_shared_gate); size 0 without */
    /* Hybrid linear attention (docs/deltanet.md "Wiring"): the Gated DeltaNet of the LL
     * linear_attention layers, stacked over those layers only; the attention tensors above (qkvw
     * .. attprojb) are then stacked over the LA = L - LL other layers. CD = 2 HKl dkl + HVl dvl. */
    TSR_P_ATTNGATEW, /* (LA, NH hs, C) model.attn_output_gate: the gate's rows of each head
                      * (Qwen3-Next's q_proj rows [query | gate] per head, split); size 0 without */
    TSR_P_DNQKVW,  /* (LL, CD, C) rows [q heads | k heads | v heads] (in_proj_qkv) */
    TSR_P_DNZW,    /* (LL, HVl dvl, C) the output gate's projection (in_proj_z) */
    TSR_P_DNBW,    /* (LL, HVl, C) beta's (in_proj_b) */
    TSR_P_DNAW,    /* (LL, HVl, C) the decay's (in_proj_a) */
    TSR_P_DNCONV,  /* (LL, CD, K) the depthwise convolution (conv1d) */
    TSR_P_DNDTB,   /* (LL, HVl) dt_bias */
    TSR_P_DNALOG,  /* (LL, HVl) A_log */
    TSR_P_DNNORMW, /* (LL, dvl) the gated RMSNorm's weight */
    TSR_P_DNOW,    /* (LL, C, HVl dvl) out_proj */
    /* Multi-head latent attention (DeepSeek-V2/V3; src/model/mixer_mla.c, docs/models.md
     * "DeepSeek"), stacked over the LX MLA layers (model.kv_lora_rank > 0: every layer that is
     * not a linear one); dqk = dn + dr, the heads' query/key size, dv their value size */
    TSR_P_MLAQAW,  /* (LX, qr, C) q_a_proj (model.q_lora_rank > 0; size 0 without) */
    TSR_P_MLAQANORMW, /* (LX, qr) q_a_layernorm */
    TSR_P_MLAQW,   /* (LX, NH dqk, qr or C) q_b_proj, or q_proj without the low-rank path: per
                    * head [nope (dn) | rope (dr)] */
    TSR_P_MLAKVAW, /* (LX, kvr + dr, C) kv_a_proj_with_mqa: the latent's rows, then the RoPE key's */
    TSR_P_MLAKVANORMW, /* (LX, kvr) kv_a_layernorm */
    TSR_P_MLAKVBW, /* (LX, NH (dn + dv), kvr) kv_b_proj: per head [key nope (dn) | value (dv)] */
    TSR_P_MLAOW,   /* (LX, C, NH dv) o_proj */
    TSR_P_LNFW,    /* (C) */
    TSR_P_LNFB,    /* (C) */
    TSR_P_LMHEAD,  /* (Vp, C) the untied LM head; size 0 with tie_embeddings */
    /* Multi-token prediction (model.num_nextn_predict_layers = D > 0; src/model/mtp.c, docs/models.md
     * "Multi-token prediction"), per depth: the module's two input norms, its projection of
     * [embedding | hidden] and its head's norm, then its decoder layer's tensors (the layer of
     * the whole model's index L + k - 1, laid out as a one-layer model's), packed by kind in two
     * blocks: mtp_w its weights (PW floats a depth), mtp_n its norms and biases (PN) */
    TSR_P_MTPENORMW, /* (D, C) enorm */
    TSR_P_MTPHNORMW, /* (D, C) hnorm */
    TSR_P_MTPEHW,    /* (D, C, 2C) eh_proj */
    TSR_P_MTPNORMW,  /* (D, C) shared_head.norm */
    TSR_P_MTPW,      /* (D, PW) */
    TSR_P_MTPN,      /* (D, PN) */
    TSR_P_COUNT
} tsr_param_id;

/* TSR_PK_STATE: no gradient and no optimizer: a tensor moved by a rule of its own after each
 * step (the router's correction bias of auxiliary-loss-free balancing, docs/moe.md), saved with
 * the weights */
typedef enum {
    TSR_PK_EMBEDDING = 0, TSR_PK_NORM, TSR_PK_BIAS, TSR_PK_WEIGHT, TSR_PK_STATE, TSR_PK_COUNT
} tsr_param_kind;

typedef struct tsr_param_info {
    const char *name;    /* "wte", "qkvw", ... (also the dataset name in dumps and checkpoints) */
    tsr_param_kind kind; /* decides weight decay */
    int ndim;
    int64_t shape[4];
    size_t offset, numel; /* into the flat buffer; numel 0 = absent in this model */
    int ep;              /* held by the expert-parallel store (model_ep.h), not the flat buffer:
                          * offset SIZE_MAX, numel and shape still the global ones */
} tsr_param_info;

/* Activations, on the model's backend (src/model/decoder_acts.c lays them out for either one; the plan
 * is decoder_acts.c's act_plan). Per-layer tensors are stacked (Lk, ...): Lk = L, except under
 * activation checkpointing (docs/model.md) for the tensors the mode recomputes, where
 * Lk = L - Lc + 1: index 0 is one layer of buffers shared by the Lc checkpointed layers (written by
 * their forward, rewritten by the recomputation before each one's backward), then one per other
 * layer in layer order. A stack's layers are each aligned to the backend's align bytes (the fp32
 * backend: packed). The buffers are buf[tsr_act_id]; the named view beside them is typed for the
 * fp32 backend (on the CUDA backend the act-typed ones hold bf16). */
typedef enum {
    TSR_A_ENCODED = 0, TSR_A_LN1, TSR_A_LN1_MEAN, TSR_A_LN1_RSTD, TSR_A_QKV, TSR_A_QKVR,
    TSR_A_QKN_RSTD, TSR_A_ATTY, TSR_A_ATT,
    TSR_A_RES2, TSR_A_LN2, TSR_A_LN2_MEAN, TSR_A_LN2_RSTD, TSR_A_FCH, TSR_A_FCHG, TSR_A_RES3,
    TSR_A_LNF, TSR_A_LNF_MEAN, TSR_A_LNF_RSTD, TSR_A_LOGITS, TSR_A_LOSSES, TSR_A_SCRATCH,
    TSR_A_DRES, TSR_A_DLN, TSR_A_DATTY, TSR_A_DQKV, TSR_A_DQKVR, TSR_A_DFCH, TSR_A_DFCHG,
    TSR_A_DLOSSES,
    TSR_A_SEQ, TSR_A_POS, TSR_A_ATT_SCRATCH, TSR_A_TOKENS, TSR_A_TARGETS, TSR_A_GREEDY,
    TSR_A_MOE_LOGITS, TSR_A_MOE_PROBS, TSR_A_MOE_LSE, TSR_A_MOE_IDX, TSR_A_MOE_WTS,
    TSR_A_MOE_ROWS, TSR_A_MOE_SLOT, TSR_A_MOE_XG, TSR_A_MOE_H, TSR_A_MOE_HG, TSR_A_MOE_Y,
    TSR_A_MOE_SH, TSR_A_MOE_SHG, TSR_A_MOE_OFFS, TSR_A_MOE_STATS, TSR_A_MOE_SHOUT,
    TSR_A_MOE_DXY, TSR_A_MOE_DH, TSR_A_MOE_DHG, TSR_A_MOE_DWTS, TSR_A_MOE_DLOGITS,
    TSR_A_MOE_DSH, TSR_A_MOE_DSHG,
    TSR_A_Q_LN1, TSR_A_Q_ATTY, TSR_A_Q_LN2, TSR_A_Q_FCH, TSR_A_Q_FCHG, TSR_A_Q_SCALES,
    TSR_A_RING_KV, TSR_A_RING_ACC, TSR_A_RING_DKV, TSR_A_RING_LO, TSR_A_RING_HI,
    TSR_A_RING_SCRATCH, TSR_A_DN, TSR_A_AGATE, TSR_A_DAGATE, TSR_A_DNBWD, TSR_A_TP_X,
    TSR_A_TP_DY, TSR_A_MLA, TSR_A_MLA_F, TSR_A_MLA_BWD, TSR_A_MLA_SCRATCH,
    TSR_A_COUNT
} tsr_act_id;

typedef struct tsr_acts {
    int B, T;            /* allocated for this microbatch shape (smaller B also works) */
    int dlogits;         /* the last forward replaced the logits by their gradient (fused) */
    union {
        void *buf[TSR_A_COUNT];
        struct { /* in tsr_act_id order */
            float *encoded;      /* (B,T,C) */
            float *ln1, *ln1_mean, *ln1_rstd; /* (Lk,B,T,C), (Lk,B,T), (Lk,B,T); block drops them;
                                               * the means only with LayerNorm */
            float *qkv;          /* (Lk,B,T,QKV) what attention reads (after QK-norm and RoPE);
                                  * block and attention drop qkv, qkvr, qkn_rstd, atty, att */
            float *qkvr;         /* (Lk,B,T,QKV) the projection before QK-norm (qk_norm only) */
            float *qkn_rstd;     /* (Lk,B,T,NH+KVH) QK-norm statistics (qk_norm only) */
            float *atty;         /* (Lk,B,T,NH*hs) */
            float *att;          /* (Lk, backend's attention_saved): fp32 (B,NH,T,T) probabilities */
            float *residual2;    /* (Lk,B,T,C); block drops residual2 and ln2 (with stats) */
            float *ln2, *ln2_mean, *ln2_rstd;
            float *fch, *fch_gelu; /* (Lk,B,T,F): fch (Lk,B,T,2F) with SwiGLU; block and mlp
                                    * drop them */
            float *residual3;    /* (L,B,T,C) always kept: layer l+1's input, where recomputing starts */
            float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T), (B,T) */
            float *probs;        /* (B,T,Vp) logits, then softmax in place, then dlogits in place */
            float *losses;       /* (B,T) */
            float *scratch;      /* (B,T,C) attproj / fcproj outputs */
            /* gradient scratch, reused layer by layer */
            float *dresidual;    /* (B,T,C) the residual stream's gradient */
            float *dln, *datty;  /* (B,T,C), (B,T,NH*hs) */
            float *dqkv;         /* (B,T,QKV) */
            float *dqkvr;        /* (B,T,QKV) the gradient before QK-norm (qk_norm only) */
            float *dfch, *dfch_gelu; /* (B,T,F); dfch (B,T,2F) with SwiGLU */
            float *dlosses;      /* (B,T) */
            /* attn_mask = document only (else NULL): made from the tokens by model_forward,
             * reused by model_backward */
            int32_t *seq;        /* (B,T) segment ids: the count of eot_tokens before each position */
            int32_t *pos;        /* (B,T) position in the segment (learned positions, RoPE) */
            void *att_scratch;   /* the backend's attention_scratch bytes, or NULL */
            /* a device backend's copies of the host arrays (NULL on a host backend) */
            int32_t *tokens, *targets, *greedy; /* (B,T) */
            /* mixture of experts (docs/moe.md; NK = N * K), NULL in a dense model. Stacked
             * (Lk, ...) with the MLP group (a checkpointed layer recomputes them): */
            float *moe_logits;   /* (N,E) act: the router's output */
            float *moe_probs, *moe_lse; /* (N,E), (N) fp32 */
            int32_t *moe_idx;    /* (N,K) */
            float *moe_wts;      /* (N,K) fp32 */
            int32_t *moe_rows, *moe_slot; /* (NK) the grouping */
            float *moe_xg, *moe_h, *moe_hg, *moe_y; /* (NK,C), (NK,2FE), (NK,FE), (NK,C) act */
            float *moe_sh, *moe_shg; /* (N,2S), (N,S) act: the shared expert (S > 0) */
            /* kept for every layer (L, ...): the expert offsets (L,E+1) int32 and the aux and z
             * losses (L,2) fp32 of each layer's last routing (the step's metrics read them) */
            int32_t *moe_offs;
            float *moe_stats;
            float *moe_shout;    /* (N,C) act: the shared expert's output (forward scratch) */
            /* gradient scratch, reused layer by layer: dy, then dxg (NK,C); dh (NK,2FE);
             * dhg (NK,FE); dwts (N,K) fp32; dlogits (N,E); dsh (N,2S); dshg (N,S) */
            float *moe_dxy, *moe_dh, *moe_dhg, *moe_dwts, *moe_dlogits, *moe_dsh, *moe_dshg;
            /* model.activation_compression = "fp8" (NULL without; decoder_acts.c's comp table):
             * ln1, atty, ln2, fch, fch_gelu kept as E4M3 bytes, stacked (Lq, ...) over the
             * layers that keep their group (Lq = L, or L - Lc under activation checkpointing
             * for a group the mode recomputes); then ln1 .. fch_gelu above are one layer each,
             * the working copy the forward writes and the backward dequantises into; their
             * scales (L, 5, 4) fp32: amax, scale_inv */
            void *q_ln1, *q_atty, *q_ln2, *q_fch, *q_fchg;
            float *q_scales;
            /* context parallelism (model_ring.h; NULL without; Tl = T/N the local positions,
             * KVW = 2 KVH hs): two key/value blocks (2,B,Tl,KVW) act, the one held and the one
             * arriving; the output's, then the gradients', fp32 sums (B,Tl,QKV); three key/value
             * gradient blocks (3,B,Tl,KVW) fp32, two travelling and one being summed; the
             * document bounds (B,T) int32 of the whole sequences (attn_mask = document); the
             * backend's scratch of its blocks */
            void *ring_kv;
            float *ring_acc, *ring_dkv;
            int32_t *ring_lo, *ring_hi;
            void *ring_scratch;
            /* linear_attention layers (docs/deltanet.md "Wiring"; NULL without): each layer's
             * Gated DeltaNet activations (dec_dn_floats a layer), stacked (Lk, ...) with the
             * attention group (the slots of the attention layers go unused) */
            float *dn;
            /* model.attn_output_gate (NULL without): per attention layer the gate's logits and
             * the gated output (2, N, NH hs), stacked with the attention group; the gate
             * logits' gradient (N, NH hs), reused layer by layer */
            float *agate, *dagate;
            /* linear_attention layers' backward slot (dec_dn_backward_bytes; NULL without):
             * one layer's activation gradients and the core's scratch, reused layer by layer */
            void *dn_bwd;
            /* tensor parallelism (model_tp.h; NULL without): a (B,T,C) buffer of all the
             * tokens for a column-parallel half's gathered input (and the final norm's, which
             * the head reads in both passes; the embedding's partial rows), and one for a
             * half's gathered output gradient (the embedding's) */
            void *tp_x, *tp_dy;
            /* multi-head latent attention (mixer_mla.c; NULL without): per MLA layer its kept
             * activations (act: the queries' latent before and after its norm, the keys' and
             * values' latent before and after its norm, the attention's input and output) and
             * (fp32: the two norms' statistics, the saved attention), stacked with the attention
             * group; one layer's scratch and gradients (act), reused layer by layer; the
             * backend's attention scratch */
            void *mla;
            float *mla_f;
            void *mla_bwd, *mla_scratch;
        };
    };
    float moe_w;         /* this microbatch's weight of its auxiliary losses (docs/moe.md):
                          * counted targets x loss scale; set by the training forward or the
                          * backward after an evaluation forward */
    /* host staging for a device backend (NULL on a host backend) */
    int32_t *seq_host, *pos_host;
    float *losses_host, *dlosses_host;
} tsr_acts;

/* Sharded parameters (parallel.sharding = zero3 | hsdp, src/model/fsdp.h). When a model has a
 * source, model_forward and model_backward never touch params/grads: they ask the source for each
 * unit's tensors just before using them and hand them back right after. Unit 0 is the root (wte,
 * wpe, lnfw, lnfb); unit l+1 is layer l. get fills w[id] (and in backward g[id], where the unit's
 * gradients are to be accumulated) with the base of tensor id's slice for that unit, NULL for
 * tensors the unit does not hold. */
typedef struct tsr_param_source {
    void *ctx;
    void (*get)(void *ctx, int unit, int backward, float **w, float **g);
    void (*put)(void *ctx, int unit, int backward);
} tsr_param_source;

typedef struct tsr_model {
    tsr_model_config cfg;
    const tsr_ops *ops;
    tsr_backend be;          /* the fp32 backend over ops, which model_forward runs on */
    int L, C, NH, F, V, Vp, maxT;
    int KVH, hs;             /* key/value heads, head size */
    int QD, QKV;             /* NH*hs (attention output width), (NH + 2 KVH) hs (projection) */
    int FW;                  /* width of the MLP's first projection: F, or 2F with SwiGLU */
    int E, K, FE, S;         /* MoE (docs/moe.md): experts (0: dense), experts per token, expert
                              * width, shared expert width (0: none) */
    int LM, LD;              /* MoE layers, dense-MLP layers (LM + LD = L) */
    int LL, LA;              /* linear_attention layers, attention layers (LL + LA = L) */
    int HKl, HVl, dkl, dvl, Kc; /* the linear layers' heads, head sizes, convolution kernel */
    int LX;                  /* multi-head latent attention layers (mixer_mla.c; 0: none; then
                              * LA = L - LL - LX) */
    int qr, kvr, dn, dr, dv; /* MLA: q_lora_rank (0: none), kv_lora_rank, the heads' nope and
                              * rope parts, the value head size; hs = dqk = dn + dr */
    float *rope_freqs;       /* (2, hs/2) RoPE frequencies or NULL: the full layers' (model_rope_freqs)
                              * then the sliding layers' (model_rope_apply) */
    tsr_param_info params_info[TSR_P_COUNT];
    const struct tsr_layer_kind *kind_of[TSR_P_COUNT]; /* the kind (layer_kind.h) whose tensor
                              * each id is in this model (model_param_kind) */
    int depth[TSR_P_COUNT];  /* a per-layer tensor's stack: the layers of its kind (0 root) */
    size_t n_params;         /* floats in the flat buffer (including padded vocab rows) */
    size_t n_params_counted; /* trainable parameters: excludes padded vocab rows */
    float *params, *grads;   /* flat (n_params) */
    float *alibi_slopes;     /* (NH) or NULL */
    const tsr_param_source *src; /* NULL: params/grads hold everything */
    int EP;                  /* expert parallelism (parallel.expert; 1: none) */
    struct tsr_ep *ep;       /* EP > 1: the experts' store and exchange (model_ep.h), set by
                              * its owner; the decoder takes the expert tensors from there */
    struct tsr_lora *lora;   /* LoRA adapters (model_lora.h) or NULL, set by their owner: the
                              * decoder adds their path to the target projections */
    int ckpt_lo, n_ckpt;     /* layers ckpt_lo .. ckpt_lo + n_ckpt - 1 are checkpointed
                              * (n_ckpt 0: activation_checkpointing = none) */
    int cpN;                 /* context parallelism (parallel.context; model_ring.h): each
                              * sequence of T positions is split over cpN ranks, the activations
                              * hold T / cpN positions of it; 1 = none (model_set_context) */
    struct tsr_ring *ring;   /* cpN > 1: the CPU model's ring (its owner sets it; NULL in a plan) */
    struct tsr_tp *tp;       /* tensor parallelism (parallel.tensor; model_tp.h): this rank's share
                              * of a split over a tensor group, its sizes and layout the split
                              * ones; NULL: the whole model (model_set_tensor) */
    const struct tsr_model *global; /* tp, pp: the whole model's layout and sizes (no buffers):
                              * the checkpoints' shapes, the FLOPs per token; else NULL */
    struct tsr_pp *pp;       /* pipeline parallelism (parallel.pipeline; model_pp.h): this model is
                              * a pipeline rank's part of the whole model, its chunks there; NULL:
                              * the whole model (model_set_pipeline) */
    tsr_acts acts;
    /* Set when the maths runs on another backend (device = cuda, src/gpu/gpu_model.h):
     * model_forward hands the call to fwd (evaluation loss; training steps and the rest of the
     * model's state belong to that backend). NULL: the ops above. */
    double (*fwd)(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T);
    /* and model_token_scores to scores (NULL: the ops above), with the same ctx */
    void (*scores)(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                   float *losses, int32_t *greedy);
    /* and model_backward_weighted to bwd_weighted (DPO's backward after those forwards; NULL:
     * the ops above), with the same ctx */
    void (*bwd_weighted)(void *ctx, const int32_t *tokens, const int32_t *targets, int B, int T,
                         const float *dlosses, float moe_w);
    /* and model_moe_stats_add_w to moe_stats (NULL: the ops above), with the same ctx */
    void (*moe_stats)(void *ctx, double w, double *acc);
    void *fwd_ctx;
    /* attn_mask = document: where the segments of the rows of the next forwards (and their
     * backwards) begin, (B,T) bytes, 1 at a segment's first position: the dataset's record
     * (data.h dataset_read_starts), set by the caller beside the rows; NULL: a segment ends
     * with each eot_token (model_segments) */
    const uint8_t *starts;
    int D;                   /* multi-token prediction's depths (model.num_nextn_predict_layers) */
    struct tsr_mtp *mtp;     /* D > 0: the modules' one-layer models and buffers (src/model/mtp.h) */
    /* Test-only (TSR_FAULT's activation flips, train/sdc_fault.c): called as a forward computes
     * layer l's output (its MLP branch's, before the residual add: n elements of elem bytes,
     * on the host), which it may change; NULL: none */
    void (*act_fault)(void *ctx, int layer, void *out, size_t n, size_t elem);
    void *act_fault_ctx;
} tsr_model;

/* Activation checkpointing (docs/model.md): the per-layer activations come in groups that a mode
 * keeps or recomputes as a whole. A dropped group is stacked over L - n_ckpt + 1 layers instead
 * of L: slot 0 serves every checkpointed layer (forward writes each one's values there, the next
 * overwrites them, backward recomputes them), the other layers have a slot each, in layer order.
 * Exported for the backends that lay out their own activations (src/gpu/gpu_model.c). */
typedef enum {
    TSR_AG_LN1,  /* ln1 and its statistics */
    TSR_AG_ATTN, /* qkv, the attention output, the attention probabilities (GPU: log-sum-exp) */
    TSR_AG_RES2, /* residual2, ln2 and its statistics */
    TSR_AG_MLP,  /* the MLP hidden layer before and after GELU */
    TSR_AG_COUNT
} tsr_act_group;
int model_act_group_dropped(const tsr_model *m, tsr_act_group g);
size_t model_act_group_layers(const tsr_model *m, tsr_act_group g);
size_t model_act_group_slot(const tsr_model *m, tsr_act_group g, int l);
/* layer l is checkpointed */
int model_ckpt_layer(const tsr_model *m, int l);

/* Builds the parameter layout (shapes, offsets, counts); allocates nothing. Dies with exit 1
 * (usage) naming the key when cfg has no valid model (model_config_check). */
void model_init(tsr_model *m, const tsr_model_config *cfg, int seq_len, const tsr_ops *ops);
/* Checks what the config table cannot check key by key: with attn_mask = document, eot_token
 * must be a token id (< vocab_size); with activation_checkpointing other than none,
 * the layers are valid (config_actckpt_layers). Returns 0, or -1 with the reason in why. */
int model_config_check(const tsr_model_config *cfg, char *why, size_t n);
/* Expert parallelism (docs/moe.md): after model_init, takes the expert tensors (expw1, expw2) out
 * of the flat layout (params_info[].ep = 1; offsets and n_params recomputed, n_params_counted
 * unchanged) for a store of their own, model_ep.h's; EP = 1 changes nothing. */
void model_set_expert_parallel(tsr_model *m, int EP);
/* Context parallelism (docs/parallelism.md): after model_init, sequences of seq_len positions are
 * split over N ranks (cpN = N; the activations plan for seq_len / N positions); the ring that
 * runs the forward and backward is set by the owner in m->ring. N = 1 changes nothing. */
void model_set_context(tsr_model *m, int N);
/* The layout again from m's sizes (every kind's shapes, the flat offsets): after a change of
 * the sizes (model_set_tensor's split) */
void model_relayout(tsr_model *m);
/* Allocates parameters and gradients (zeroed) and the ALiBi slopes or RoPE frequencies. */
void model_alloc_params(tsr_model *m);
/* The same without the gradients (a frozen base: LoRA, docs/lora.md): grads stays NULL. */
void model_alloc_frozen(tsr_model *m);
/* The ALiBi slopes or RoPE frequencies alone (a model whose parameters live in a
 * tsr_param_source). */
void model_alloc_slopes(tsr_model *m);
/* Tensor id holds one slice per layer it serves (a stacked (L, ...), (LD, ...), (LM, ...),
 * (LA, ...) or (LL, ...) shape): ln1w .. dnow. */
int model_param_per_layer(tsr_param_id id);
/* precision.fp8 (docs/cuda.md "FP8"): tensor id is a decoder linear layer's weight (qkvw,
 * attprojw, fcw, fcprojw, shw1, shw2: never the embeddings, the head, a router or the experts),
 * and the decoder layers fp8_skip leaves in FP8, first .. last of L */
int model_fp8_linear(tsr_param_id id);
void model_fp8_layers(int L, tsr_fp8_skip skip, int *first, int *last);
/* Layer l is a mixture-of-experts layer: E > 0 and (l + 1) % moe_every == 0. */
int model_moe_layer(const tsr_model *m, int l);
/* Auxiliary-loss-free balancing (docs/moe.md "DeepSeek's router"): moves the router's correction
 * bias (routercorr, model.moe_topk_method = "noaux_tc") by model.moe_bias_update_rate towards
 * balance, bias[k, e] += rate sign(mean_e' load[k, e'] - load[k, e]), load[k, e] the tokens MoE
 * layer k sent to expert e over the step (moe: the step's statistics, (LM, 2 + E) as
 * model_moe_stats_add_w sums them, all ranks'). w holds the flat layout's elements
 * [flat, flat + n); only those of routercorr move. */
void model_moe_bias_step(const tsr_model *m, const double *moe, size_t flat, float *w, size_t n);
/* Which slice of tensor id layer l uses: 0 .. (stack depth - 1), or -1 when layer l has no such
 * tensor (a dense layer's expert tensors, a MoE layer's dense MLP, an absent tensor, a tensor that
 * is not per layer). The slices are numel / depth floats each, in layer order. */
int model_layer_slot(const tsr_model *m, tsr_param_id id, int l);
/* The stack depth of per-layer tensor id: L, LD or LM (0 for the others). */
int model_param_layers(const tsr_model *m, tsr_param_id id);
/* Unit u's slice of tensor id (unit 0 the root's tensors whole, unit l+1 layer l's slice, unit
 * L+1+d multi-token prediction's depth d's decoder layer, its rows of mtp_layer_w and mtp_layer_n):
 * its offset in the flat layout, and *len its floats; SIZE_MAX (and *len 0) when the unit has
 * none of it. The one place the decoder, the ZeRO-3 shards and the CUDA model learn this. */
size_t model_unit_slice(const tsr_model *m, tsr_param_id id, int u, size_t *len);
/* GPT-2 initialisation: weights N(0, init_std), residual projections N(0, init_std/sqrt(2L)),
 * biases 0, LayerNorm weights 1, padded vocab rows 0. A pure function of (seed): every rank gets
 * the same bits without communication. */
void model_init_weights(tsr_model *m, uint64_t seed);
/* The same values for the flat range [lo, hi) only: dst[i - lo] = what model_init_weights puts at
 * params[i]. Each ZeRO-3 / HSDP rank draws its shard's pieces alone with it (fsdp_init_weights):
 * no full copy, 1/G of the draws (G the ranks of its group). */
void model_init_weights_range(const tsr_model *m, uint64_t seed, size_t lo, size_t hi,
                              float *dst);
/* Element k (row-major, of the global shape) of weight tensor id's initial value: the one draw
 * model_init_weights makes for it (the expert store initialises its slice with it). */
float model_init_weight(const tsr_model *m, tsr_param_id id, uint64_t seed, size_t k);
/* Allocates activations for microbatches of B x T (dies when out of memory). */
void model_alloc_acts(tsr_model *m, int B, int T);
/* The same, but returns -1 when an allocation fails (with everything it allocated freed again, the
 * activations left unallocated), 0 on success: micro_batch = auto backs off on -1. */
int model_try_alloc_acts(tsr_model *m, int B, int T);
/* Frees the activations only (acts.B = 0 after). */
void model_free_acts(tsr_model *m);
void model_free(tsr_model *m);

/* Forward pass. tokens, targets (B,T) with -1 = no loss. Returns the SUM of the per-token losses
 * over the targets that count; probs/losses stay in m->acts for backward (and, with attn_mask =
 * document, the segment ids and positions made from tokens).
 * B = 0 (tokens, targets NULL): an idle forward, for an evaluation whose ranks score different
 * numbers of batches. A sharded model's forward (m->src: zero3 / hsdp) gathers each unit over its
 * group, and under parallel.expert it exchanges the routed rows over the EP group: collectives,
 * so a rank that has run out of rows runs forwards of one row of padding that scores nothing
 * until it has run as many as the rank that runs most (model_forwards_most); on a model whose
 * forward involves no other rank it does nothing. Returns 0. */
double model_forward(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T);
/* model_forward with the rows' segment starts (B,T) as m->starts (attn_mask = document; NULL: the
 * eot_tokens end the segments), m->starts NULL again after. */
double model_forward_starts(tsr_model *m, const int32_t *tokens, const int32_t *targets,
                            const uint8_t *starts, int B, int T);
/* The most forwards any rank runs in an evaluation in which this one runs `mine`: collective over
 * the world when a forward is (sharded weights, exchanged experts; each rank then tops up with
 * idle forwards, model_forward's B = 0), `mine` otherwise. Every rank calls it before its first
 * forward of the evaluation: a rank waiting in it would otherwise hold up the others' forwards. */
int64_t model_forwards_most(const tsr_model *m, int64_t mine);
/* An evaluation forward with per-position results (ICL scoring): losses[i] the loss of position
 * i and greedy[i] its greedy token, the argmax of the next-token distribution over the V real
 * tokens (the lower id on ties), where targets[i] >= 0; 0 and -1 elsewhere. losses, greedy: host
 * arrays of B*T; greedy NULL skips the argmax (a pass over the logits: DPO's log-probabilities
 * need the losses only). */
void model_token_scores(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float *losses, int32_t *greedy);
/* Backward pass of the last forward: parameter gradients += d(loss_scale * sum of losses).
 * Checkpointed layers first recompute what they did not keep, with the same ops on the same
 * inputs, so the gradients are the same bits as without checkpointing. */
void model_backward(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                    float loss_scale);

/* An evaluation forward (model_token_scores); out[b] = row b's log-probability of its targets,
 * minus the sum of its counted positions' losses, in double (DPO, preference scoring). */
void model_row_logprobs(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                        double *out);
/* After an evaluation forward: parameter gradients += d(objective) with dlosses[i] (B*T host
 * floats) = d(objective)/d(loss of position i), where targets[i] >= 0, and with MoE moe_w times
 * that forward's auxiliary losses (decoder.h dec_backward_weighted; DPO). */
void model_backward_weighted(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B,
                             int T, const float *dlosses, float moe_w);

/* MoE: the last forward's statistics added to acc (decoder.h dec_moe_stats_add): LM records of
 * [w aux, w z, tokens per expert (E)], w the weight of the microbatch's auxiliary losses in the
 * step's objective: model_moe_stats_add_w takes it, model_moe_stats_add gives the weight a
 * training forward with loss_scale gives them (its counted targets x loss_scale; docs/moe.md). */
void model_moe_stats_add_w(tsr_model *m, double w, double *acc);
void model_moe_stats_add(tsr_model *m, const int32_t *targets, int B, int T, float loss_scale,
                         double *acc);

/* attn_mask = document: seq[b,t] = the segments begun in row b before position t, pos[b,t] =
 * t - (start of t's segment); pos may be NULL. A segment begins at each t > 0 where starts[b,t]
 * is set (the dataset's record: tsr_model.starts), or, with starts NULL, after each eot_token
 * (which ends its own segment). tokens, seq, pos, starts (B,T) */
void model_segments(int32_t *seq, int32_t *pos, const int32_t *tokens, int eot,
                    const uint8_t *starts, int B, int T);

/* Size in bytes of the activations for B x T (for the memory plan): what model_alloc_acts
 * allocates, so it shrinks with activation checkpointing. */
size_t model_acts_bytes(const tsr_model *m, int B, int T);
/* Bytes of the linear_attention layers' backward slot (one layer's activation gradients and the
 * core's scratch, dec_dn_backward_bytes; 0 without such layers): part of model_acts_bytes (the
 * plan names it apart). */
size_t model_dn_scratch_bytes(const tsr_model *m, int B, int T);
/* Training FLOPs per token: 6 N + 12 (NH hs) K + D (LLM Foundry / PaLM; docs/mfu.md), N without
 * the input embedding of an untied model (a lookup; its head is the matmul that counts) and,
 * with MoE, counting K of the E experts per layer (the active parameters); K the keys per query
 * summed over the attention layers (model_attn_keys: L T without sliding windows or linear
 * layers); D the linear layers' own products (model_dn_flops). */
double model_flops_per_token(const tsr_model *m, int T);
/* The Gated DeltaNet layers' products per token beyond their parameters' (the chunked form's
 * state and in-chunk products, forward and backward; 0 without linear layers; docs/mfu.md):
 * 3 LL HV (6 dk dv + 2 c (3 dk + 2 dv)), c = min(T, DN_TRAIN_CHUNK). */
double model_dn_flops(const tsr_model *m, int T);
/* The keys a query is counted against, summed over the layers: T for a full-attention layer,
 * min(W, T) for a sliding one of window W (the band; docs/mfu.md). */
double model_attn_keys(const tsr_model *m, int T);
/* The parameters one token passes through: n_params_counted less, with MoE, the E - K routed
 * experts of each MoE layer it does not reach (the count FLOPs per token use). */
double model_active_params(const tsr_model *m);
/* MPT's ALiBi slopes for NH heads with alibi_bias_max = 8 (writes NH floats). */
void model_alibi_slopes(float *slopes, int NH);
/* RoPE's frequencies for head size hs (writes hs/2 floats): inv_freq[i] = theta^(-2i/hs),
 * computed in double, then (rope_scaling = llama3) Llama 3.1's scaling: wavelengths 2 pi / f
 * above original_max_pos / low_freq_factor are divided by factor, those below
 * original_max_pos / high_freq_factor kept, those between interpolated with
 * s = (original_max_pos / wavelength - low) / (high - low): f' = (1 - s) f / factor + s f. */
void model_rope_freqs(float *inv_freq, const tsr_model_config *cfg, int hs);
/* The two tables of RoPE frequencies, t (2, hs/2): the full layers' (model_rope_freqs), then the
 * sliding layers' (model.rope_local_theta, unscaled; the full layers' copied without it): what
 * m->rope_freqs holds and model_rope_apply reads. */
void model_rope_tables(float *t, const tsr_model_config *cfg, int hs);
/* docs/models.md "Positions": the rotary dimensions of a head, partial_rotary_factor x hs (the
 * frequencies above are over this size: theta^(-2i/rot), rot/2 of them, zeros after); with
 * rope_scaling = linear every frequency is divided by rope_factor, with yarn they are YaRN's
 * (Hugging Face's _compute_yarn_parameters) and q and k are multiplied by model_rope_mscale,
 * 0.1 ln(factor) + 1 (1 otherwise). */
int model_rope_dims(const tsr_model_config *cfg, int hs);
double model_rope_mscale(const tsr_model_config *cfg);
/* The head size RoPE's tables are over (m->rope_freqs: (2, this / 2)): the MLA heads' rope part
 * dr in an MLA model, else hs. With rope_scaling = yarn and model.rope_mscale and
 * rope_mscale_all_dim both set, model_rope_mscale is m(mscale) / m(mscale_all_dim) (Hugging
 * Face's attention_factor, m(s) = 0.1 s ln(factor) + 1). model_mla_scale: MLA's score scale,
 * 1 / sqrt(dn + dr), times m(mscale_all_dim)^2 under yarn with it set (DeepSeek's). */
int model_rope_head(const tsr_model *m);
double model_mla_scale(const tsr_model *m);
/* RoPE of layer l in place on qkv (forward) or dqkv (backward = 1) (B,T,QKV), positions as
 * backend.h rope_forward takes them: nothing on a NoPE layer (model.no_rope_layers), the
 * sliding layers' table (tables + hs/2: model.rope_local_theta, unscaled) on a sliding layer,
 * else the full layers' (tables: rope_scaling, YaRN's factor); tables = m->rope_freqs as the
 * backend holds it. */
void model_rope_apply(const tsr_model *m, const tsr_backend *be, const float *tables, int l,
                      void *qkv, const int32_t *pos, int p0, int B, int T, int backward);

/* Multi-token prediction (src/model/mtp.h): the step's loss sums of the modules zeroed; their
 * sum over the depths' losses / D since (the counted losses' sum, like model_forward's: divide
 * by the counted targets for the mean; 0 without modules); the modules' state freed
 * (model_free does it). */
void model_mtp_reset(tsr_model *m);
double model_mtp_loss_sum(const tsr_model *m);
void model_mtp_free(tsr_model *m);
/* Depth d's decoder layer's tensor id (laid out as a one-layer model's): its name, and v = [its
 * block (0: mtp_layer_w, 1: mtp_layer_n), its offset in depth d's row of the block, its floats];
 * NULL when that layer has no such tensor (HF names, the reference test's unpacking) */
const char *model_mtp_layer_tensor(const tsr_model *m, int d, tsr_param_id id, int64_t v[3]);

/* ---- Inference on one sequence (model_infer.c; docs/generate.md) ---- */

/* A KV cache for one sequence, plus the scratch of a forward over `chunk` new positions.
 * Per attention layer la (of LA), at lofs[la] floats into kt and v, a ring of lcap[la] positions
 * (position p at index p % lcap[la]): kt (KVH, hs, lcap) keys transposed per head, v (KVH, lcap,
 * hs). A full layer's lcap is cap (it keeps positions 0..len-1), a sliding layer's its window W
 * when W < cap (it keeps the last W: model_kv_layer_cap; docs/decoder.md "Rolling window").
 * With attn_mask = document, seg is where the current segment starts (after the last eot_token
 * fed): new positions attend to seg..; without it seg stays 0. */
typedef struct tsr_kv_cache {
    int cap, len, chunk, nthreads; /* nthreads: OpenMP threads at init (per-thread score rows) */
    int seg;                       /* attn_mask = document: first position of the current segment */
    float *kt, *v;                 /* per attention layer (KVH, hs, lcap), (KVH, lcap, hs) */
    int *lcap;                     /* (LA) host: each attention layer's ring of positions */
    size_t *lofs;                  /* (LA) host: its offset in kt and v (floats, one sequence) */
    float *x, *ln, *mean, *rstd;   /* (chunk, C), (chunk, C), (chunk), (chunk) */
    float *qkv, *atty, *proj;      /* (chunk, QKV), (chunk, NH*hs), (chunk, C) */
    float *qkvr, *qknr;            /* qk_norm: (chunk, QKV), (chunk, NH+KVH); else NULL */
    float *fch, *fchg;             /* (chunk, F or 2F), (chunk, F) */
    float *att, *logits;           /* (nthreads, cap), (Vp) */
    /* linear_attention layers (else NULL): one layer's Gated DeltaNet activations for a chunk,
     * and per linear layer the sequence's state (LL, HVl, dkl, dvl) and convolution tail
     * (LL, K-1, CD), in place of its keys and values (kt, v hold the LA attention layers) */
    float *dn, *dn_state, *dn_conv;
    /* the slots' (tsr_kv_slots): dn_state, dn_conv (LL, slots, .), and dn_rows the caches of one
     * step's rows gathered: (chunk, HVl, dkl, dvl) states then (chunk, K-1, CD) tails */
    float *dn_rows;
    float *agate;                  /* model.attn_output_gate: (2, chunk, NH hs), else NULL */
    /* multi-head latent attention layers (mixer_mla.c; else NULL): per MLA layer (LX) and slot
     * the compressed cache, cap positions of [the normed latent (kvr) | the turned RoPE key (dr)]
     * (kv_b_proj is absorbed into the decode: no expanded keys or values are kept); the chunk's
     * queries (chunk, NH dqk), their latent and its norm (chunk, qr), the keys' latent and its
     * norm (chunk, kvr), the RoPE key (chunk, dr), the attention's output (chunk, NH dv), the
     * norms' statistics (chunk, each) and the decode's scratch (nthreads, cap + 2 kvr + 2 dr) */
    struct {
        float *cache, *q, *cq, *cqn, *c, *cn, *kpe, *atty, *rq, *rkv, *scratch;
    } mla;
    struct {                       /* MoE layers' chunk buffers (tsr_acts' moe_*), else NULL */
        float *logits, *probs, *lse, *wts, *xg, *h, *hg, *y, *sh, *shg, *shout, *stats;
        int32_t *idx, *rows, *slot, *offs;
    } moe;
} tsr_kv_cache;

/* Allocates a cache of cap positions; prompts are run in chunks of at most chunk positions. Call
 * after cpu_ops_set_threads. */
void model_kv_init(tsr_kv_cache *kv, const tsr_model *m, int cap, int chunk);
void model_kv_free(tsr_kv_cache *kv, const tsr_model *m);
/* Bytes of the cache proper (kt and v): 2 * KVH * hs floats per position each attention layer
 * keeps (model_kv_layer_cap), and kv_lora_rank + qk_rope_head_dim floats a position each MLA
 * layer keeps (its latent and RoPE key). */
size_t model_kv_bytes(const tsr_model *m, int cap);
/* The positions layer l's cache keeps in a context of cap: its window when it is a sliding layer
 * with a window under cap (a ring of the last W), else cap. */
int model_kv_layer_cap(const tsr_model *m, int l, int cap);
/* Runs tokens (n) at positions kv->len.. through the model, appending their keys and values;
 * probs (Vp): the next-token distribution after the last of them, as model_forward's softmax
 * (columns >= V are 0). Needs kv->len + n <= cap, and <= maxT with learned positions. */
void model_infer_forward(const tsr_model *m, tsr_kv_cache *kv, const int32_t *tokens, int n,
                         float *probs);
/* ---- Batched inference (model_infer.c; docs/generate.md "Batched generation") ---- */

struct tsr_decoder;

/* The KV caches of `slots` sequences decoded together, on a backend be, and the buffers of one
 * forward of up to `rows` rows: a chunk of one slot's prompt, or one new token of each of up to
 * `rows` slots. Slot s's cache of attention layer la is at kt + lofs[la] slots + s KVH hs lcap[la]
 * elements, laid out as tsr_kv_cache's (a ring, keys transposed per head), likewise v. */
typedef struct tsr_kv_slots {
    tsr_kv_cache buf;        /* cap, chunk = rows, the row buffers; kt, v: every slot's caches */
    int slots, rows;
    int32_t *len, *seg;      /* (slots) host: positions filled; attn_mask = document: the first
                              * position of the current segment (else 0) */
    int32_t *host_ids;       /* (5 rows) host: the rows' tokens, slots, positions, segment
                              * starts and positions in their segments */
    int32_t *dev_ids;        /* the same on the backend (= host_ids on a host backend) */
    float *logits;           /* (rows, Vp) on the backend */
    float *loss;             /* (rows) host: softmax_xent's unused losses */
    int32_t *none;           /* (rows) host: -1, no target */
} tsr_kv_slots;

/* Allocates the caches and buffers on be (exit 3 naming what did not fit); every slot empty.
 * Call after cpu_ops_set_threads. */
void model_kv_slots_init(tsr_kv_slots *ks, const tsr_model *m, const tsr_backend *be, int slots,
                         int cap, int rows);
void model_kv_slots_free(tsr_kv_slots *ks, const tsr_backend *be);
/* Bytes model_kv_slots_init allocates on be (the memory plan). */
size_t model_kv_slots_bytes(const tsr_model *m, const tsr_backend *be, int slots, int cap,
                            int rows);
/* Slot s emptied (its positions forgotten). */
void model_kv_slots_reset(tsr_kv_slots *ks, int s);
/* Slot dst holds what slot src holds (its caches, positions and segment): a prompt fed once
 * serves every sample drawn from it. */
void model_kv_slots_copy(tsr_kv_slots *ks, const tsr_backend *be, const tsr_model *m, int dst,
                         int src);
/* Runs tokens (n) at slot s's next positions through the decoder d, in chunks of at most rows
 * tokens ending at each eot_token under attn_mask = document (as model_infer_forward); probs
 * (Vp, host) or NULL: the next-token distribution after the last. Every product goes through the
 * backend's batch-invariant matrows_forward where it has one, so the result is a function of the
 * slot's tokens alone. */
void model_kv_slots_feed(const struct tsr_decoder *d, tsr_kv_slots *ks, int s,
                         const int32_t *tokens, int n, float *probs);
/* One decode step of n <= rows slots: row i feeds tokens[i] to slot slot[i] (distinct slots);
 * probs (n, Vp) host: each row's next-token distribution, the same bits whatever the other rows
 * (batch-invariant products, attention row by row). */
void model_kv_slots_step(const struct tsr_decoder *d, tsr_kv_slots *ks, const int32_t *slot,
                         const int32_t *tokens, int n, float *probs);
/* The decoder over m's weights (its flat buffers or its sharded source, its adapters, ring and
 * split) with the activations a on backend be (m's fp32 backend or a wrapper of it): a pipeline
 * chunk's (model_pp.h), each microbatch in flight with its own a. */
void model_decoder_of(tsr_model *m, tsr_acts *a, const tsr_backend *be, struct tsr_decoder *d);
/* The fp32 model's decoder over its own weights (m->params, m->lora), for inference. */
void model_infer_decoder(const tsr_model *m, struct tsr_decoder *d);

/* The no-cache reference: model_forward over exactly tokens (n), n <= the T of the activations
 * (model_alloc_acts(m, 1, T)); returns the probabilities after the last token (Vp, in m->acts). */
const float *model_forward_last(tsr_model *m, const int32_t *tokens, int n);

#endif

/* config.h — run configuration: one libconfig file plus --set key=value overrides.
 *
 * A single table (config_table.c) lists every key with its type, default, range and documentation; it
 * drives parsing, validation, the effective-config printout and the generated docs/config.md.
 * Errors name file:line, the key, the value and what is accepted, and return TSR_EXIT_USAGE.
 */
#ifndef TSR_CONFIG_H
#define TSR_CONFIG_H

#include <stdint.h>
#include <stdio.h>

/* Durations, as in Composer: "100ba" (optimizer steps), "2e9tok" (tokens), "1ep" (epochs). */
typedef enum { TSR_DUR_BATCHES = 0, TSR_DUR_TOKENS, TSR_DUR_EPOCHS, TSR_DUR_COUNT } tsr_dur_unit;
typedef struct tsr_duration {
    double value; /* >= 0; 0 means "never" for intervals */
    tsr_dur_unit unit;
} tsr_duration;

typedef enum { TSR_POS_LEARNED = 0, TSR_POS_ALIBI, TSR_POS_ROPE, TSR_POS_COUNT } tsr_pos_kind;
/* the normalisation of every block and the final one: LayerNorm (eps 1e-5) or RMSNorm (norm_eps) */
typedef enum { TSR_NORM_LAYERNORM = 0, TSR_NORM_RMSNORM, TSR_NORM_COUNT } tsr_norm_kind;
/* where a block's norms sit: pre (x + f(N(x))), sandwich (Gemma 2/3: x + N'(f(N(x))), a norm
 * after the attention and after the MLP too), or post (OLMo 2: x + N'(f(x)), no norm before) */
typedef enum {
    TSR_NPLACE_PRE = 0,
    TSR_NPLACE_SANDWICH,
    TSR_NPLACE_POST,
    TSR_NPLACE_COUNT
} tsr_norm_placement;
/* what QK-norm normalises: each head of q and k (Qwen 3, Gemma 3), or the whole q and k
 * projections before the head split (OLMo 2) */
typedef enum { TSR_QKN_HEAD = 0, TSR_QKN_PROJECTION, TSR_QKN_COUNT } tsr_qk_norm_scope;
/* the token embedding's multiplier: none, or sqrt(d_model) (Gemma) */
typedef enum { TSR_EMB_SCALE_NONE = 0, TSR_EMB_SCALE_SQRT_D, TSR_EMB_SCALE_COUNT } tsr_embed_scale;
/* the MLP: gelu(x W1^T) W2^T, SwiGLU silu(x Wg^T) * (x Wu^T) W2^T (Llama), or GeGLU with the
 * tanh GELU gelu_tanh(x Wg^T) * (x Wu^T) W2^T (Gemma) */
typedef enum { TSR_MLP_GELU = 0, TSR_MLP_SWIGLU, TSR_MLP_GEGLU_TANH, TSR_MLP_COUNT } tsr_mlp_kind;
/* the routed experts' unit (docs/moe.md "gpt-oss's experts"): SwiGLU, or gpt-oss's clamped one */
typedef enum { TSR_MOE_ACT_SWIGLU = 0, TSR_MOE_ACT_GPTOSS, TSR_MOE_ACT_COUNT } tsr_moe_act_kind;
/* model.moe_scoring: the router's scores of the experts, softmax over the logits (Mixtral, Qwen,
 * DeepSeek-V2) or each logit's sigmoid (DeepSeek-V3, Kimi K2) */
typedef enum { TSR_MOE_SCORE_SOFTMAX = 0, TSR_MOE_SCORE_SIGMOID, TSR_MOE_SCORE_COUNT } tsr_moe_score_kind;
/* model.moe_topk_method (DeepSeek's topk_method): the K highest scores; group-limited (the
 * topk_group groups of highest best score, then the K highest in them: DeepSeek-V2); or V3's
 * noaux_tc: a per-expert bias added to the scores for the choice only, the groups ranked by the
 * sum of their two highest */
typedef enum {
    TSR_MOE_TOPK_GREEDY = 0, TSR_MOE_TOPK_GROUP_LIMITED, TSR_MOE_TOPK_NOAUX_TC, TSR_MOE_TOPK_COUNT
} tsr_moe_topk_kind;
/* RoPE frequency scaling: none, Llama 3.1's (factor, low/high-frequency factors, original
 * context), linear (every frequency / factor: Gemma 3's global layers) or YaRN (gpt-oss) */
typedef enum {
    TSR_ROPE_SCALING_NONE = 0,
    TSR_ROPE_SCALING_LLAMA3,
    TSR_ROPE_SCALING_LINEAR,
    TSR_ROPE_SCALING_YARN,
    TSR_ROPE_SCALING_COUNT
} tsr_rope_scaling_kind;
/* causal: every token sees all earlier tokens of its row; document: only those of its own segment
 * (a segment ends with, and includes, an eot_token), and learned positions restart per segment */
typedef enum { TSR_MASK_CAUSAL = 0, TSR_MASK_DOCUMENT, TSR_MASK_COUNT } tsr_attn_mask_kind;
/* activation checkpointing (docs/model.md): which activations of a checkpointed layer are not kept
 * from forward to backward but recomputed just before the layer's backward: none; block: all of
 * them (only the layer's input residual is kept); attention: qkv, att, atty; mlp: fch, fch_gelu */
typedef enum {
    TSR_ACTCKPT_NONE = 0,
    TSR_ACTCKPT_BLOCK,
    TSR_ACTCKPT_ATTENTION,
    TSR_ACTCKPT_MLP,
    TSR_ACTCKPT_COUNT
} tsr_actckpt_kind;
/* model.activation_compression (docs/cuda.md "Compressed activations"): how a decoder layer's
 * saved linear inputs and MLP hidden layer are kept from forward to backward: as computed (bf16 on
 * the GPU), or E4M3 with a per-tensor fp32 scale (device = "cuda" only) */
typedef enum { TSR_ACTCOMP_NONE = 0, TSR_ACTCOMP_FP8, TSR_ACTCOMP_COUNT } tsr_actcomp_kind;
typedef enum {
    TSR_SCHED_COSINE = 0, TSR_SCHED_LINEAR, TSR_SCHED_CONSTANT, TSR_SCHED_WSD, TSR_SCHED_COUNT
} tsr_sched_kind;
/* optim.name (docs/training.md "Muon"): AdamW for every tensor, or Muon for the hidden matrices */
typedef enum { TSR_OPTIM_ADAMW = 0, TSR_OPTIM_MUON, TSR_OPTIM_COUNT } tsr_optim_kind;
/* optim.muon.scale: the orthogonalised update's multiplier (rms: rms x sqrt(max(rows, cols)), an
 * update of that RMS, Moonlight's; shape: sqrt(max(1, rows / cols)), Keller Jordan's) */
typedef enum { TSR_MUON_SCALE_RMS = 0, TSR_MUON_SCALE_SHAPE, TSR_MUON_SCALE_COUNT } tsr_muon_scale;
typedef enum { TSR_DEVICE_CPU = 0, TSR_DEVICE_CUDA, TSR_DEVICE_COUNT } tsr_device_kind;
/* save_async_copy: where a background save's copy into the snapshot runs (checkpointing_save.c) */
typedef enum {
    TSR_SNAPCOPY_AUTO = 0,   /* step on a CPU run whose threads take every core, else background */
    TSR_SNAPCOPY_BACKGROUND, /* on the writer thread, while the next step runs */
    TSR_SNAPCOPY_STEP,       /* in the save step, the ranks waiting for it */
    TSR_SNAPCOPY_COUNT
} tsr_snapcopy_kind;
/* precision.fp8 (docs/cuda.md "FP8"): the decoder's linear layers in bf16, or in FP8 with one scale
 * per tensor, or one per row */
typedef enum { TSR_FP8_NONE = 0, TSR_FP8_TENSORWISE, TSR_FP8_ROWWISE, TSR_FP8_COUNT } tsr_fp8_mode;
/* precision.fp8_skip: decoder layers kept in bf16 under precision.fp8 */
typedef enum {
    TSR_FP8_SKIP_NONE = 0,
    TSR_FP8_SKIP_FIRST,
    TSR_FP8_SKIP_LAST,
    TSR_FP8_SKIP_FIRST_LAST,
    TSR_FP8_SKIP_COUNT
} tsr_fp8_skip;
/* what the trainer minimises: next-token cross-entropy, DPO on preference pairs (docs/dpo.md), or
 * GRPO on its own completions of prompts, scored by a reward (docs/rl.md) */
typedef enum { TSR_OBJ_LM = 0, TSR_OBJ_DPO, TSR_OBJ_GRPO, TSR_OBJ_COUNT } tsr_objective_kind;
/* GRPO's loss aggregation (docs/rl.md): sequence = mean over each completion's tokens, then over
 * completions (GRPO); token = over all completion tokens of the batch (DAPO); constant = the sum
 * over tokens / (completions x grpo.max_new_tokens) (Dr. GRPO) */
typedef enum { TSR_GRPO_AGG_SEQUENCE = 0, TSR_GRPO_AGG_TOKEN, TSR_GRPO_AGG_CONSTANT,
               TSR_GRPO_AGG_COUNT } tsr_grpo_agg_kind;
/* GRPO's KL reference: auto = base with LoRA, else initial; base = the base with the adapters
 * off; initial = a frozen copy of the starting weights (posttrain/grpo_ref.c) */
typedef enum { TSR_GRPO_REF_AUTO = 0, TSR_GRPO_REF_BASE, TSR_GRPO_REF_INITIAL,
               TSR_GRPO_REF_COUNT } tsr_grpo_ref_kind;
/* the reward of a completion (docs/rl.md "Rewards") */
typedef enum { TSR_REWARD_ANSWER = 0, TSR_REWARD_REGEX, TSR_REWARD_COMMAND,
               TSR_REWARD_COUNT } tsr_reward_kind;
typedef enum { TSR_EXTRACT_AUTO = 0, TSR_EXTRACT_BOXED, TSR_EXTRACT_MARKER,
               TSR_EXTRACT_COUNT } tsr_extract_kind;
typedef enum { TSR_COMPARE_NUMBER = 0, TSR_COMPARE_EXACT, TSR_COMPARE_COUNT } tsr_compare_kind;
typedef enum { TSR_DPO_SIGMOID = 0, TSR_DPO_IPO, TSR_DPO_LOSS_COUNT } tsr_dpo_loss_kind;
/* DPO's reference model (docs/dpo.md): auto = base with LoRA, else precomputed; base = the base
 * with the adapters off (LoRA only); precomputed = the initial model's log-probabilities of every
 * pair, computed before step 1 and stored in run_dir (posttrain/dpo_ref.h) */
typedef enum { TSR_DPO_REF_AUTO = 0, TSR_DPO_REF_BASE, TSR_DPO_REF_PRECOMPUTED,
               TSR_DPO_REF_COUNT } tsr_dpo_ref_kind;
typedef enum { TSR_SHARD_DDP = 0, TSR_SHARD_ZERO1, TSR_SHARD_ZERO3, TSR_SHARD_HSDP, TSR_SHARD_COUNT } tsr_sharding_kind;
/* device = cuda's transport (docs/cuda.md "Several ranks on one GPU"): NCCL, or MPI staged
 * through pinned host memory (the fallback; several ranks may then share a GPU) */
typedef enum { TSR_GPU_COMM_NCCL = 0, TSR_GPU_COMM_MPI, TSR_GPU_COMM_COUNT } tsr_gpu_comm_kind;
/* parallel.pipeline_schedule (docs/pipeline.md): in src/pipeline/pp_schedule.h's pp_kind order */
typedef enum { TSR_PP_1F1B = 0, TSR_PP_INTERLEAVED, TSR_PP_ZB, TSR_PP_SCHED_COUNT } tsr_pp_sched_kind;

/* Pipeline parallelism (model/model_pp.h; docs/pipeline.md): the part of the whole model that a
 * model of this config is, a rank's stages. Not a key: never in a file, never compared; set on a
 * model's own copy of its config (model_set_pipeline). All zero: the whole model. */
#define TSR_PART_MAX 16 /* ranges a part holds: parallel.pipeline_virtual's most */
typedef struct tsr_model_part {
    int n;                       /* ranges of the whole model's layers (0: every layer) */
    int first[TSR_PART_MAX];     /* range i: the whole model's layers first[i] .. + len[i] - 1, */
    int len[TSR_PART_MAX];       /* this config's layers in order (n_layer: their sum) */
    int no_embed, no_head;       /* without the embedding; without the final norm and the head */
} tsr_model_part;

typedef struct tsr_model_config {
    int n_layer, d_model, n_head;
    int vocab_size;       /* V: real vocabulary */
    int vocab_multiple;   /* Vp = V rounded up to a multiple of this (64 or 128) */
    int max_seq_len;      /* learned position table size; 0 = seq_len */
    tsr_pos_kind pos;
    int bias;             /* biases in linear layers and LayerNorms */
    double expansion_ratio;
    int gelu;             /* tsr_gelu_kind from kernels/ops.h: 0 tanh, 1 exact */
    double init_std;
    tsr_attn_mask_kind attn_mask;
    int eot_token;        /* the end-of-text id that ends a segment (attn_mask = document) */
    tsr_norm_kind norm;
    double norm_eps;      /* RMSNorm's eps (LayerNorm's is fixed at TSR_LN_EPS) */
    tsr_mlp_kind mlp;
    int intermediate_size; /* the MLP width F; 0 = expansion_ratio x d_model */
    int n_kv_head;        /* KVH: key/value heads (GQA; 1 = MQA); 0 = n_head */
    int head_dim;         /* hs; 0 = d_model / n_head */
    int qkv_bias;         /* a bias on the q, k, v projections even with bias = false (Qwen 2) */
    int attn_bias;        /* biases on q, k, v and o even with bias = false (attention_bias) */
    int qk_norm;          /* RMSNorm of each q and k head before RoPE (Qwen 3) */
    tsr_qk_norm_scope qk_norm_scope; /* per head, or over the whole projection (OLMo 2) */
    int tie_embeddings;   /* the LM head is wte; false: its own (Vp, C) matrix */
    /* mixture of experts (docs/moe.md): 0 experts = a dense model */
    int moe_experts;      /* E routed experts per MoE layer, each a SwiGLU MLP */
    int moe_top_k;        /* K experts per token */
    int moe_intermediate_size; /* an expert's hidden width; 0 = the dense MLP width F */
    int moe_every;        /* layer l is MoE when (l + 1) % moe_every == 0 (1: every layer) */
    int moe_norm_topk;    /* the K weights are divided by their sum */
    int moe_shared_size;  /* hidden width of an always-on shared SwiGLU expert; 0 = none */
    int moe_shared_gate;  /* the shared expert's output times sigmoid(x . shgatew) (Qwen3-Next) */
    double moe_aux_loss_coef, moe_z_loss_coef;
    int moe_router_bias;  /* the router's logits + a bias per expert (gpt-oss) */
    int moe_expert_bias;  /* biases on each expert's [gate | up] and down projections (gpt-oss) */
    tsr_moe_act_kind moe_act; /* the experts' unit */
    /* DeepSeekMoE's router (docs/moe.md "DeepSeek's router") */
    tsr_moe_score_kind moe_scoring;
    tsr_moe_topk_kind moe_topk_method;
    int moe_n_group, moe_topk_group; /* expert groups, and the groups a token's experts come from */
    double moe_routed_scaling;       /* the routed experts' weights times this */
    double moe_bias_update_rate;     /* noaux_tc: the correction bias's step after each step */
    int moe_dense_layers;            /* the first this many layers keep the dense MLP */
    double swiglu_limit;  /* moe_act = gptoss: the clamp of gate and up (gpt-oss: 7) */
    double rope_theta;
    tsr_rope_scaling_kind rope_scaling;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_pos;
    /* positions and soft-capping of issue 67 (docs/models.md "Positions") */
    double rope_local_theta;       /* RoPE base of the sliding layers (Gemma 3); 0 = rope_theta */
    double rope_beta_fast, rope_beta_slow; /* YaRN's ramp bounds in rotations */
    int rope_truncate;             /* YaRN: the ramp's bounds rounded to whole dimensions */
    double partial_rotary_factor;  /* RoPE turns the first factor x head_dim dims of a head */
    char no_rope_layers[2048];     /* "" or a 0/1 list (1 = RoPE), one per layer or a pattern */
    double attn_logit_softcapping; /* scores = cap tanh(scores / cap) (Gemma 2); 0 = off */
    double final_logit_softcapping; /* logits = cap tanh(logits / cap) (Gemma 2); 0 = off */
    tsr_actckpt_kind activation_checkpointing;
    int activation_checkpointing_layers; /* the first this many layers are checkpointed; -1 = all */
    char activation_checkpointing_range[32]; /* "A-B": layers A..B (0-based, inclusive) instead */
    tsr_actcomp_kind activation_compression;
    /* attention variants (docs/models.md "Attention variants") */
    char layer_types[2048]; /* "" (every layer full) or a comma list of sliding_attention /
                             * full_attention, one per layer or a pattern repeated over them */
    int sliding_window;   /* W of the sliding layers (0: none; with layer_types "", W > 0 makes
                           * every layer sliding) */
    /* hybrid linear attention (docs/deltanet.md "Wiring"): the linear_attention layers' Gated
     * DeltaNet, Hugging Face Qwen3NextConfig's names */
    int linear_num_key_heads, linear_num_value_heads; /* HK query/key heads, HV value heads */
    int linear_key_head_dim, linear_value_head_dim;   /* dk, dv */
    int linear_conv_kernel_dim;                       /* the short convolution's K */
    int attn_output_gate; /* Qwen3-Next's gated attention: out * sigmoid(gate) before o_proj */
    int attn_sinks;       /* a learned logit per head in every row's softmax (gpt-oss) */
    double query_pre_attn_scalar; /* scores times 1 / sqrt(this) (Gemma); 0 = the head size */
    tsr_norm_placement norm_placement; /* docs/models.md "Norm placements" */
    tsr_embed_scale embed_scale; /* the embedding times sqrt(d_model) (Gemma) */
    /* multi-head latent attention (DeepSeek-V2/V3; docs/models.md "DeepSeek"): kv_lora_rank > 0
     * makes every layer that is not a linear one an MLA layer (src/model/mixer_mla.c) */
    int kv_lora_rank;     /* the keys' and values' compressed latent; 0 = no MLA */
    int q_lora_rank;      /* the queries' low-rank path; 0 = q_proj from the layer's input */
    int qk_nope_head_dim, qk_rope_head_dim, v_head_dim; /* a head's parts and its value size */
    int rope_interleave;  /* the RoPE dimensions of MLA in pairs (2i, 2i+1), not (i, i + d/2) */
    double rope_mscale, rope_mscale_all_dim; /* YaRN's mscale, mscale_all_dim (0 = not given) */
    /* multi-token prediction (DeepSeek-V3; docs/models.md "Multi-token prediction",
     * src/model/mtp.c) */
    int num_nextn_predict_layers; /* MTP depths D (0 = none): module k predicts token i + k + 1 */
    double mtp_loss_weight;       /* the objective's weight of the depths' mean loss */
    char hf_model_type[32]; /* the Hugging Face class an export writes ("": its features choose);
                             * an import sets it (docs/hf.md "Qwen 3.5") */
    tsr_model_part part;    /* a pipeline stage's share (not a key; above) */
} tsr_model_config;

typedef struct tsr_optim_config {
    double lr, beta1, beta2, eps, weight_decay, grad_clip; /* grad_clip 0 = off */
    tsr_duration warmup;
    tsr_sched_kind schedule;
    double alpha_f;       /* final lr = alpha_f * lr */
    char decay[32];       /* schedule = wsd: the final decay, "0.2" (of max_duration) or "200ba" */
    int decay_norms_biases, decay_embeddings;
    tsr_optim_kind name;  /* optim.name */
    struct {              /* optim.muon.* (name = muon; src/optim/muon.h) */
        double lr;        /* peak rate of the Muon matrices; 0 = optim.lr */
        double momentum, weight_decay, rms;
        int nesterov;
        int64_t ns_steps; /* Newton-Schulz iterations */
        tsr_muon_scale scale;
    } muon;
} tsr_optim_config;

/* Data mixing (docs/data-mixing.md): data.mix lists streams, data.curriculum changes their weights
 * from a point of the run on. Parsed by config_mix.c (lists are outside the key table). */
#define TSR_MAX_STREAMS 16
#define TSR_MAX_PHASES 16
typedef enum { TSR_MIX_PROPORTION = 0, TSR_MIX_REPEAT, TSR_MIX_CHOOSE } tsr_mix_kind;
typedef struct tsr_stream_config {
    char name[64];         /* [A-Za-z_][A-Za-z0-9_-]*, unique */
    char path[1024];       /* dataset directory */
    tsr_mix_kind kind;     /* which of proportion / repeat / choose was given */
    double value;          /* its value (> 0) */
} tsr_stream_config;
typedef enum { TSR_PHASE_PROPORTION = 0, TSR_PHASE_SCALE } tsr_phase_kind;
typedef struct tsr_phase_config {
    tsr_duration at;       /* start of the phase; unused when at_percent >= 0 */
    double at_percent;     /* "90%": percent of max_duration; < 0 when `at` is a duration */
    tsr_phase_kind kind;   /* proportion: new weights of the named streams; scale: multipliers */
    double w[TSR_MAX_STREAMS];
    unsigned char named[TSR_MAX_STREAMS]; /* stream k named in this phase */
} tsr_phase_config;

/* data.tokenizer_mismatch: a recipe's data.tokenizer that is not the one the dataset was prepared
 * with stops the start (error), or is used as the recipe says (allow) */
typedef enum { TSR_TOK_MISMATCH_ERROR = 0, TSR_TOK_MISMATCH_ALLOW, TSR_TOK_MISMATCH_COUNT } tsr_tok_mismatch;
typedef struct tsr_data_config {
    char train[1024], val[1024]; /* dataset directories; val "" = no eval */
    char tokenizer[1024];        /* for decoding samples: "gpt2", a directory or a file; "" = none */
    int tokenizer_mismatch;      /* tsr_tok_mismatch: a data.tokenizer other than the dataset's */
    int shuffle, verify;
    int allow_changed;           /* a resume may go on with data sources the checkpoint did not
                                    record (data_sources.c); else such a resume is exit 2 */
    char stage_to[1024];         /* node-local staging directory; "" = read in place */
    char cache_limit[32];        /* size text ("20G"); parsed into cache_limit_bytes */
    uint64_t cache_limit_bytes;  /* 0 = unlimited */
    int64_t stage_window;        /* steps per staging window */
    double stage_wait;           /* seconds a window boundary waits for staging; 0 = none */
    int n_streams, n_phases;     /* data.mix / data.curriculum; 0 = data.train alone */
    tsr_stream_config streams[TSR_MAX_STREAMS];
    tsr_phase_config phases[TSR_MAX_PHASES];
} tsr_data_config;

/* In-context-learning tasks for `tessera eval` (icl_tasks; docs/eval.md; parsed by config_icl.c) */
#define TSR_MAX_ICL_TASKS 32
typedef enum { TSR_ICL_MC = 0, TSR_ICL_LM, TSR_ICL_SCHEMA, TSR_ICL_GEN, TSR_ICL_COUNT } tsr_icl_type;
typedef struct tsr_icl_task_config {
    char label[64];
    tsr_icl_type type;
    char path[1024];          /* JSONL in LLM Foundry's schema for the type */
    int fewshot;
    char continuation_delimiter[16], example_delimiter[16];
} tsr_icl_task_config;
/* "multiple_choice", "language_modeling", "schema", "generation_task_with_answers" */
const char *config_icl_type_name(int type);

typedef enum { TSR_GUARD_ZSCORE = 0, TSR_GUARD_MULTIPLIER, TSR_GUARD_METHOD_COUNT } tsr_guard_method;
typedef enum { TSR_GUARD_WARN = 0, TSR_GUARD_SKIP, TSR_GUARD_ROLLBACK, TSR_GUARD_ACTION_COUNT } tsr_guard_action;

typedef struct tsr_config {
    char source[1024];    /* the file it was read from */
    char run_dir[1024];
    int64_t seed;
    tsr_duration max_duration, eval_interval, save_interval;
    int max_duration_set; /* max_duration came from --set (a trial run cut short): a warmup
                           * longer than it is a warning, not an error (trainer_init.c) */
    int64_t global_batch, micro_batch, seq_len, eval_samples;
    int keep_last, log_interval, threads;
    int save_final;       /* a checkpoint when max_duration is reached (default 1) */
    int save_async;       /* periodic checkpoints written in the background (default 1) */
    tsr_snapcopy_kind save_async_copy; /* where its snapshot copy runs (default auto) */
    tsr_device_kind device;
    double peak_flops;    /* per rank, FLOP/s; 0 = from the device table */
    tsr_model_config model;
    tsr_optim_config optim;
    tsr_data_config data;
    struct {
        int64_t tokens;     /* tokens to sample after training (rank 0); 0 = none */
        double temperature;
        int64_t top_k;      /* 0 = the whole vocabulary */
    } sample;
    tsr_sharding_kind sharding;
    int64_t replica_group;  /* hsdp: ranks per sharding group; 0 = the ranks of one node */
    int64_t expert;         /* expert parallelism: ranks that share one copy of the experts
                             * (docs/moe.md); 1 = every rank holds every expert */
    int64_t context;        /* context parallelism: ranks that share one sequence, N, each
                             * holding 2 of its 2N chunks (docs/parallelism.md); 1 = none */
    int64_t tensor;         /* tensor parallelism: ranks that split each layer's matrices, T
                             * (docs/parallelism.md "Tensor parallelism"); 1 = none */
    int sequence;           /* T > 1: sequence parallelism between the split matrices */
    int tensor_across_nodes;/* a tensor group may span nodes */
    int64_t pipeline;       /* pipeline parallelism: the stages' ranks, P (docs/pipeline.md); 1 =
                             * none */
    tsr_pp_sched_kind pipeline_schedule;
    int64_t pipeline_virtual; /* V: model chunks a rank (interleaved) */
    char pipeline_layout[1024]; /* the cut by hand, Megatron's spelling ("": balanced by cost) */
    tsr_gpu_comm_kind gpu_comm; /* device = cuda: what carries the collectives */
    struct {                  /* precision.* (device = cuda; docs/cuda.md "FP8") */
        tsr_fp8_mode fp8;
        tsr_fp8_skip fp8_skip;
        int fp8_allgather;    /* zero3 / hsdp: the FP8 linear weights gathered as E4M3 */
    } precision;
    tsr_objective_kind objective;
    struct {                  /* objective = dpo (docs/dpo.md) */
        double beta;          /* the KL strength: z = beta ((pi_c - ref_c) - (pi_r - ref_r)) */
        tsr_dpo_loss_kind loss;
        double label_smoothing; /* sigmoid: the share of pairs whose preference is flipped */
        tsr_dpo_ref_kind reference; /* the trainer resolves auto (trainer_init) */
        char reference_checksum[32]; /* precomputed: "crc32c:XXXXXXXX" of the stored file,
                                      * written by the trainer (posttrain/dpo_ref.h) */
    } dpo;
    struct {                  /* objective = grpo (docs/rl.md) */
        int64_t group_size;   /* G: completions per prompt */
        int64_t max_new_tokens;
        double temperature, top_p;
        int64_t top_k;
        int64_t updates;      /* optimizer steps per rollout batch */
        double clip_low, clip_high; /* the ratio is clipped to [1 - clip_low, 1 + clip_high] */
        tsr_grpo_agg_kind loss_agg;
        int scale_rewards;    /* advantages divided by the group's standard deviation */
        int dynamic_sampling; /* groups whose rewards all tie are dropped and refilled (DAPO) */
        int64_t max_rounds;   /* dynamic sampling: generation rounds per step at most */
        int64_t overlong_buffer; /* DAPO's soft overlong penalty over the last this many tokens */
        double overlong_penalty; /* its largest penalty */
        double kl_coef;       /* beta of the KL term to the reference; 0 = none */
        tsr_grpo_ref_kind reference;
        char reference_checksum[32]; /* initial: "crc32c:XXXXXXXX" of run_dir's stored reference */
        int64_t rollout_batch; /* sequences a rank decodes together */
        int64_t eval_prompts; /* data.val prompts scored (pass@1) at each evaluation; 0 = all */
        int64_t log_completions; /* completions per step written to run_dir/completions.jsonl */
    } grpo;
    struct {                  /* objective = grpo: the reward (docs/rl.md "Rewards") */
        tsr_reward_kind kind;
        tsr_extract_kind extract;
        char marker[64];      /* the final answer follows the last one (extract = marker, auto) */
        tsr_compare_kind compare;
        char regex[512];      /* kind = regex: reward 1 when the completion matches */
        char format_regex[512]; /* + format_weight when the completion matches it */
        double format_weight;
        char command[1024];   /* kind = command: a program started once per rank (sh -c) */
        double timeout;       /* seconds the program may take for one step's completions */
        int64_t memory_mib;   /* its address space (ulimit -v), MiB; 0 = unbounded */
    } reward;
    struct {                  /* LoRA adapters (docs/lora.md); rank 0 = full finetuning */
        int64_t rank;         /* r: the adapters' inner width */
        double alpha;         /* the adapter path's scale is alpha / r */
        double dropout;       /* on the adapter path's input, in [0, 1) */
        char targets[128];    /* "all-linear", or a subset of "q,k,v,o,gate,up,down" */
        char base[1024];      /* the frozen base model: a checkpoint, run dir or Hugging Face
                               * directory; "" = --init-from's (or the seed's weights) */
        char base_relative[1024]; /* the base's path relative to run_dir, written by the
                                   * trainer beside the absolute lora.base (a moved tree still
                                   * finds it); "" = none */
        char base_checksum[32]; /* "crc32c:XXXXXXXX" of the base's weights as loaded: written
                                 * by the trainer, checked on resume; "" = not yet */
    } lora;
    int n_icl;
    tsr_icl_task_config icl[TSR_MAX_ICL_TASKS];
    struct {
        int64_t window;       /* steps per straggler/MFU window; 0 = off */
        double slow_factor;   /* a rank slower than the lower median by this factor is slow */
        int64_t patience;     /* consecutive bad windows before checkpoint + exit 86 */
        double min_mfu;       /* MFU floor per window (0..1); 0 = off */
        double hang_timeout;  /* seconds one phase may last before abort; 0 = off */
    } watchdog;
    struct {                  /* metrics for a site's monitoring (docs/site.md "Monitoring") */
        char prometheus_dir[1024]; /* node_exporter textfile collector directory; "" = off */
        double prometheus_interval; /* seconds between rewrites of the file */
    } metrics;
    struct {                  /* loss-spike and NaN guard (docs/spike-guard.md) */
        int64_t window;       /* steps in the rolling window; detection once it is full; 0 = off */
        tsr_guard_method method;
        double threshold;     /* z-score, or multiple of the window mean */
        tsr_guard_action action;
        int64_t patience;     /* consecutive outliers before a rollback */
        int64_t max_rollbacks;
    } guard;
    struct {                  /* silent data corruption caught inside the job (docs/health.md) */
        int64_t fingerprint_interval; /* steps between fingerprint comparisons; 0 = off, -1 =
                                       * auto (sdc_interval) */
        int64_t replay_interval;      /* steps between deterministic replays; 0 = off */
    } health;
} tsr_config;

/* --plan, --time, --gpu-mem and --fit (plans, nothing runs; docs/planning.md): on 1 the loads
 * that follow price a multi-head latent attention model (model.kv_lora_rank > 0) on device =
 * "cuda" whatever its GPU path does not run yet (a head size over 256: a warning there); a start
 * (0, the default) refuses it, and so does a plan of any other model. */
void config_plan_only(int on);
/* Loads defaults, then `path`, then each "key=value" of sets (n_sets of them), validates.
 * Returns 0 or TSR_EXIT_USAGE after printing the error. */
int config_load(tsr_config *cfg, const char *path, const char *const *sets, int n_sets);
/* Values of keys that a model's own files state (a Hugging Face directory's config.json: src/hf
 * hf_config_fill), for config_load_filled. */
#define TSR_FILL_MAX 64
typedef struct tsr_config_fill {
    char source[1100];     /* "DIR/config.json", named in messages */
    int n;
    struct {
        char key[48];      /* "model.n_layer" */
        char value[2048];  /* as --set writes it: "3", "rope", "1e-05", a layer_types list */
        char from[96];     /* what the source says: "num_hidden_layers = 3" */
        int soft;          /* fills the key when the recipe leaves it out, never disagrees (a
                            * model's context, a setting a run may change) */
    } kv[TSR_FILL_MAX];
} tsr_config_fill;
/* config_load, with fill's values for the keys that the file and sets leave out (they count as
 * given: a required model.* key filled is not missing). A key that the file or a --set gives
 * another value than a hard fill entry is a disagreement (derived sizes compared resolved:
 * model.n_kv_head 0 is n_head, head_dim 0 d_model / n_head); all of them are listed in one error,
 * with the --set of each. fill NULL: config_load. Returns 0 or TSR_EXIT_USAGE. */
int config_load_filled(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                       const tsr_config_fill *fill);
/* config_load over another config: the keys the file and sets leave out keep base's values
 * (instead of the key table's defaults; no key is missing), e.g. an evaluation's config over a
 * checkpoint's. A key under one of the prefixes in fixed ("model.") that the file or a --set gives
 * another value than base's is an error naming it and what (base_name) it comes from. Returns 0
 * or TSR_EXIT_USAGE. */
int config_load_over(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                     const tsr_config *base, const char *base_name, const char *const *fixed,
                     int n_fixed);
/* Checks what depends on the world size: parallel.context dividing world (and 2 x it seq_len),
 * global_batch divisible by the data ranks (world / parallel.context), the per-rank batch by
 * micro_batch. Returns 0 or TSR_EXIT_USAGE after printing the error. */
int config_check_world(const tsr_config *cfg, int world);
/* parallel.tensor = T (docs/parallelism.md "Tensor parallelism"): 0 when T splits cfg's model
 * (T divides the query heads, the MLP width, the padded vocabulary, the linear layers' heads, and
 * with parallel.sequence seq_len; the key/value heads are a multiple of T or divide it); else -1
 * with the reason in why and the key it names in *key. T <= 1 always splits. */
int config_tensor_split(const tsr_config *cfg, int T, const char **key, char *why, size_t n);
/* The values of parallel.tensor in 1 .. 256 that split cfg's model, listed into list ("1, 2, 4");
 * returns their count. */
int config_tensor_valid(const tsr_config *cfg, char *list, size_t n);
/* A setting a mode does not run with yet: bad when it is set, its key and its value's words */
typedef struct {
    int bad;
    const char *key, *value;
} tsr_cfg_pair;
/* The first of the n pairs that is bad: its key (its value's words in *value), or NULL */
const char *config_first_pair(const tsr_cfg_pair *pairs, size_t n, const char **value);
/* With parallel.tensor > 1: the first key whose setting tensor parallelism does not run with yet
 * (its value's words in *value), or NULL. (device = "cuda" is the trainer's to refuse, at start:
 * a plan, --plan and --time, prices it.) */
const char *config_tensor_pair(const tsr_config *cfg, const char **value);
/* The same for device = "cuda" (src/gpu/gpu_tp.h): what its tensor parallelism does not run with
 * yet (docs/parallelism.md "Tensor parallelism on the GPU"), or NULL (and NULL on the CPU) */
const char *config_tensor_cuda_pair(const tsr_config *cfg, const char **value);
/* --plan W where the recipe's micro_batch does not divide the per-rank batch of W's data ranks:
 * the largest micro_batch that does (an even one for dpo: whole pairs), else 0 (it divides, it is
 * auto, or none fits: config_check_world then says why) */
long long config_micro_fitting(const tsr_config *cfg, int world);
/* Would `--set key=value` be accepted by the key table (the key's type and range)? 0, or -1 with
 * why (what the key accepts, as --set says it). For messages that suggest a --set: a suggestion
 * is checked before it is made. */
int config_check_set(const char *key, const char *value, char *why, size_t n);
/* LoRA's base (docs/lora.md "Where the base is"): records in cfg the base at path as the run
 * keeps it: lora.base absolute, lora.base_relative from run_dir (both made absolute first). 0, or
 * TSR_EXIT_USAGE after tsr_error (a path longer than the keys hold, one that does not resolve). */
int config_lora_base_record(tsr_config *cfg, const char *path, const char *run_dir);
/* Where cfg's LoRA base is now: lora.base when it exists, else run_dir/lora.base_relative (run_dir:
 * the directory of the checkpoint that records them). 0 with the path in out (lora.base as it is
 * when neither exists but lora.base names nothing: "" = the seed's weights), or TSR_EXIT_DATA
 * after an error saying it is the LoRA base, where it was looked for and --set lora.base=PATH. */
int config_lora_base_find(const tsr_config *cfg, const char *run_dir, char *out, size_t cap);
/* The layers activation checkpointing applies to: [*lo, *lo + *n) (n = 0 with
 * activation_checkpointing = none), from activation_checkpointing_layers (the first N, -1 = all) or
 * activation_checkpointing_range ("A-B", 0-based, inclusive). Returns 0, or -1 with the reason in
 * why and the offending key in *key. */
/* LoRA's target projections (lora.targets; docs/lora.md), in the order of a block's matmuls;
 * then the hybrid layers' (issue 68): a Gated DeltaNet layer's fused in-projections and output
 * projection (PEFT's Qwen3-Next names) and the gated attention's gate (model.attn_output_gate);
 * then multi-head latent attention's (issue 84, PEFT's DeepSeek names; its q_proj and o_proj are
 * q and o). */
typedef enum {
    TSR_LORA_Q = 0, TSR_LORA_K, TSR_LORA_V, TSR_LORA_O, TSR_LORA_GATE, TSR_LORA_UP, TSR_LORA_DOWN,
    TSR_LORA_QKVZ, TSR_LORA_BA, TSR_LORA_OUTPROJ, TSR_LORA_AGATE,
    TSR_LORA_QA, TSR_LORA_QB, TSR_LORA_KVA, TSR_LORA_KVB,
    TSR_LORA_COUNT
} tsr_lora_target;
/* "q", "k", "v", "o", "gate", "up", "down", "in_proj_qkvz", "in_proj_ba", "out_proj",
 * "attn_gate", "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj" */
const char *config_lora_target_name(int t);
/* Parses lora.targets into a bit mask (bit t: target t) and checks it against the model: a
 * name list without repeats; gate and up need a SwiGLU MLP; no MLP target in a model with MoE
 * layers; the DeltaNet targets need linear_attention layers, attn_gate model.attn_output_gate;
 * with multi-head latent attention (model.kv_lora_rank > 0) k and v are none, q is q_proj (no
 * model.q_lora_rank; with one q_a_proj and q_b_proj), kv_a_proj_with_mqa and kv_b_proj are there.
 * Returns 0, or -1 with the reason in why. */
int config_lora_targets(const tsr_model_config *m, const char *s, unsigned *mask, char *why,
                        size_t cap);
int config_actckpt_layers(const tsr_model_config *m, int *lo, int *n, const char **key, char *why,
                          size_t cap);
/* The attention and MLP shape a model config gives (0 = derived keys resolved). */
typedef struct tsr_model_dims {
    int NH, KVH, hs, F; /* heads, key/value heads, head size, MLP width */
    int E, K, FE, S;    /* MoE: experts, experts per token, expert width, shared width (0 none) */
    int LM;             /* MoE layers (0: dense) */
} tsr_model_dims;
/* Resolves n_kv_head, head_dim and the MLP width and checks the architecture keys against each
 * other: the head size (d_model / n_head when head_dim is 0), n_head a multiple of n_kv_head, an
 * even head size with RoPE, a whole MLP width, LayerNorm's fixed eps, the llama3 RoPE scaling's
 * factors. Returns 0, or -1 with the reason in why and the offending key in *key. */
int config_model_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                      size_t cap);
/* The attention window of layer l (0 <= l < n_layer) of a config config_model_dims accepted:
 * model.sliding_window when the layer's model.layer_types entry is sliding_attention (every layer
 * when layer_types is "" and sliding_window > 0), else 0 (full attention). */
int config_layer_window(const tsr_model_config *m, int l);
/* Layer l (0 <= l < n_layer) of a config config_model_dims accepted is a linear_attention layer
 * (Gated DeltaNet in the attention's place; docs/deltanet.md "Wiring"); config_linear_layers:
 * how many of the n_layer are. */
int config_layer_linear(const tsr_model_config *m, int l);
int config_linear_layers(const tsr_model_config *m);
/* Layer l is a mixture-of-experts layer: model.moe_experts > 0, l >= model.moe_dense_layers and
 * (l + 1) a multiple of model.moe_every (config_model_dims' LM counts them). */
int config_moe_layer(const tsr_model_config *m, int l);
/* 1 when layer l turns q and k by RoPE: model.pos = rope and the layer's model.no_rope_layers
 * entry is not 0 (every layer when that key is ""). */
int config_layer_rope(const tsr_model_config *m, int l);
/* The whole model's layer that layer l of a config is: l, or in a pipeline stage's part
 * (tsr_model_part) its place in the whole model. Every per-layer rule above reads it. */
int config_layer_at(const tsr_model_config *m, int l);
/* Pipeline parallelism (docs/pipeline.md). The stages: parallel.pipeline x
 * parallel.pipeline_virtual (1 without a pipeline). */
int config_pipeline_stages(const tsr_config *cfg);
/* A hand cut, parallel.pipeline_layout's spelling (Megatron's --pipeline-model-parallel-layout:
 * E the embedding, t a layer, L the final norm, the head and the loss, | the next stage, t*N and
 * (...)*N repeated, blanks and commas ignored), of n_layer layers into S stages: cut[s] the first
 * layer of stage s, cut[S] = n_layer. 0, or -1 with why (the spelling, the stage count, a stage
 * without a layer, E or L elsewhere than the first item of the first stage and the last of the
 * last, a layer count other than n_layer). */
int config_pipeline_layout(const char *layout, int n_layer, int S, int *cut, char *why, size_t n);
/* parallel.pipeline's keys against the model: the interleaved schedule and the chunks a rank,
 * no more stages than layers, the hand cut. 0, or -1 with the reason in why and the key in *key. */
int config_pipeline_check(const tsr_config *cfg, const char **key, char *why, size_t n);
/* With parallel.pipeline > 1: the first key whose setting the pipeline does not run with yet (its
 * value's words in *value), or NULL. */
const char *config_pipeline_pair(const tsr_config *cfg, const char **value);
/* With parallel.pipeline > 1 and device = "cuda": the first key whose setting the pipeline does
 * not run with on the GPU yet (its value's words in *value), or NULL (docs/parallelism.md
 * "Pipeline parallelism": 1f1b and interleaved, ddp, the dense decoder) */
const char *config_pipeline_cuda_pair(const tsr_config *cfg, const char **value);
/* The model variants of issues 67/68 (docs/models.md), in the order config_attn_variant_key
 * reports them: linear_attention layers, the attention output gate, sliding windows, sinks,
 * query_pre_attn_scalar, norm placement, QK-norm over the projection, embedding scale, GeGLU-tanh,
 * then the "Positions" keys (soft-capping, RoPE scaling, a local base, partial rotary, NoPE
 * layers), then gpt-oss's MoE keys (router bias, expert biases, the unit) and the shared
 * expert's gate, then DeepSeek's multi-head latent attention (model.kv_lora_rank), then DeepSeek's
 * router (model.moe_scoring, moe_topk_method, moe_n_group, moe_routed_scaling, moe_dense_layers:
 * docs/moe.md "DeepSeek's router"). */
typedef enum {
    TSR_VAR_LINEAR = 0, TSR_VAR_ATTN_GATE, TSR_VAR_WINDOW, TSR_VAR_SINKS, TSR_VAR_QPAS,
    TSR_VAR_NORM_PLACEMENT, TSR_VAR_QKN_PROJECTION, TSR_VAR_EMBED_SCALE, TSR_VAR_GEGLU,
    TSR_VAR_ATTN_SOFTCAP, TSR_VAR_FINAL_SOFTCAP, TSR_VAR_ROPE_SCALING, TSR_VAR_ROPE_LOCAL,
    TSR_VAR_PARTIAL_ROTARY, TSR_VAR_NOPE, TSR_VAR_ROUTER_BIAS, TSR_VAR_EXPERT_BIAS,
    TSR_VAR_MOE_ACT, TSR_VAR_SHARED_GATE, TSR_VAR_MLA, TSR_VAR_DS_ROUTER, TSR_VAR_COUNT
} tsr_model_variant;
/* The key that sets variant v in m, or NULL when m does not use it. */
const char *config_variant_key(const tsr_model_config *m, tsr_model_variant v);
/* The first key of docs/models.md "Positions" (soft-capping, linear or YaRN scaling, a local
 * base, partial rotary, NoPE layers) that is set, or NULL; config_attn_variant_key returns it
 * after its own. */
const char *config_position_variant_key(const tsr_model_config *m);
/* Its RoPE keys alone (linear or YaRN scaling, a local base, partial rotary, NoPE layers). */
const char *config_rope_variant_key(const tsr_model_config *m);
/* The model uses linear_attention layers, a gated attention output, a sliding window, attention
 * sinks, a query_pre_attn_scalar other than the head size, a norm placement other than pre,
 * QK-norm over the projection, an embedding scale, GeGLU-tanh, then
 * config_position_variant_key's, then config_moe_variant_key's: the key of the first that is set
 * (config_variant_key's order), or NULL. */
const char *config_attn_variant_key(const tsr_model_config *m);
/* gpt-oss's MoE (docs/moe.md "gpt-oss's experts"): the key of a MoE model that sets
 * model.moe_router_bias, model.moe_expert_bias, model.moe_act = "gptoss" or
 * model.moe_shared_gate, or NULL (config_attn_variant_key returns it last; the CUDA backend runs
 * them: config_checks.c cuda_variants); the Hugging Face export writes gpt-oss's as
 * GptOssForCausalLM and the shared gate as Qwen3NextForCausalLM only; the ring of context
 * parallelism runs them (the MLP is per row). */
const char *config_moe_variant_key(const tsr_model_config *m);
/* The MLP is gated (SwiGLU, GeGLU): fcw holds the gate rows then the up rows (2F) */
int config_mlp_gated(const tsr_model_config *m);
/* What a key does to the model (its row of the key table; docs/config.md "Model keys"):
 * TSR_KEY_SHAPES, it gives the model its tensors or what they compute (a resume keeps it);
 * TSR_KEY_RUNS, a model.* key of how the model trains, which a run may change; TSR_KEY_OTHER,
 * not a model key (also an unknown name). */
typedef enum { TSR_KEY_OTHER = 0, TSR_KEY_SHAPES, TSR_KEY_RUNS } tsr_key_role;
tsr_key_role config_key_role(const char *key);
/* The i-th key of the table (0-based) and its role, or NULL past the last. */
const char *config_key_at(int i, tsr_key_role *role);
/* The keys that shape the model (their rows: TSR_KEY_SHAPES), the config a against b, each
 * compared where it applies, at its effective value (derived sizes resolved, per-layer keys layer
 * by layer): "n_layer 2 vs 4, norm_placement \"pre\" vs \"sandwich\"" into out (empty when they
 * agree; a key that does not apply on one side reads "(unused)" there). What a resume compares
 * with its checkpoint's config. */
void config_model_diff(const tsr_config *a, const tsr_config *b, char *out, size_t cap);
/* The variants m turns on (config_variant_key's list, and Llama 3.1's RoPE scaling) in words, for
 * the plan's model line (docs/planning.md "The model line"): "; "-separated fragments such as
 * "layers: 36 linear + 12 full (repeating 3 linear, 1 full)", "sandwich norms", "attention
 * sinks", "RoPE yarn x32 (original 4096 positions, beta 32/1, not truncated)", "no RoPE in 9 of
 * 36 layers (repeating 3 rope, 1 none)"; "" for a model with none. Cut to cap bytes. */
void config_variants_text(const tsr_model_config *m, char *buf, size_t cap);
/* Writes the effective config in libconfig syntax (loadable by config_load). */
void config_print(FILE *f, const tsr_config *cfg);
/* Writes the effective config to path (temp file + fsync + rename). Returns 0 or TSR_EXIT_DATA.
 * (Not named config_write: libconfig exports a function of that name.) */
int config_save(const char *path, const tsr_config *cfg);
/* Writes docs/config.md (markdown table of every key) from the table. */
void config_doc_markdown(FILE *f);

/* Parses a byte size: "0", "4096", "500M", "20G", "1.5T" (powers of 1024; a trailing "B" or
 * "iB" is accepted). Returns 0 on success. */
int size_parse(const char *s, uint64_t *out);
/* Parses "100ba" / "2e9tok" / "0.5ep". Returns 0 on success. */
int duration_parse(const char *s, tsr_duration *out);
/* optim.decay (schedule = wsd): "F", a fraction of the run in (0, 1] (F x total steps, rounded to
 * the nearest step, at least 1), or a duration ("200ba", "1e9tok", "0.5ep"); its steps in a run
 * of total steps, or -1 when spec is neither. */
int64_t decay_to_steps(const char *spec, int64_t total, int64_t global_batch, int64_t seq_len,
                       uint64_t samples_per_epoch);
/* Formats a duration back ("100ba"). */
void duration_format(char *buf, size_t n, tsr_duration d);
/* Converts to optimizer steps, rounding up: tokens_per_step = global_batch * seq_len,
 * samples_per_epoch of the training set. */
int64_t duration_to_steps(tsr_duration d, int64_t global_batch, int64_t seq_len,
                          uint64_t samples_per_epoch);

#endif

/* config_table.c — the table of every config key (data: name, type, field, default, range,
 * documentation, what it does to the model; the model group's rows in config_keys_model.h, their
 * hooks and the comparison of two models in config_model.c). What is driven by it alone (lookup, defaults, value conversion and range checks,
 * value formatting, sizes and durations) is in config_values.c; the effective-config printout and
 * config_save are in config_print.c.
 * Parsing the libconfig file and --set are in config_load.c, cross-key validation in
 * config_checks.c, docs/config.md in config_doc.c.
 */
#include "config/config_table.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common.h"

/* ---- enum names: index = enum value ---- */

#define NELEM(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const device_names[] = {"cpu", "cuda"};
_Static_assert(NELEM(device_names) == TSR_DEVICE_COUNT, "device_names vs tsr_device_kind");
static const char *const snapcopy_names[] = {"auto", "background", "step"};
_Static_assert(NELEM(snapcopy_names) == TSR_SNAPCOPY_COUNT, "snapcopy_names vs tsr_snapcopy_kind");
static const char *const pos_names[] = {"learned", "alibi", "rope"};
static const char *const norm_names[] = {"layernorm", "rmsnorm"};
_Static_assert(NELEM(norm_names) == TSR_NORM_COUNT, "norm_names vs tsr_norm_kind");
static const char *const mlp_names[] = {"gelu", "swiglu", "geglu_tanh"};
_Static_assert(NELEM(mlp_names) == TSR_MLP_COUNT, "mlp_names vs tsr_mlp_kind");
static const char *const moe_act_names[] = {"swiglu", "gptoss"};
_Static_assert(NELEM(moe_act_names) == TSR_MOE_ACT_COUNT, "moe_act_names vs tsr_moe_act_kind");
static const char *const moe_scoring_names[] = {"softmax", "sigmoid"};
_Static_assert(NELEM(moe_scoring_names) == TSR_MOE_SCORE_COUNT,
               "moe_scoring_names vs tsr_moe_score_kind");
static const char *const moe_topk_names[] = {"greedy", "group_limited_greedy", "noaux_tc"};
_Static_assert(NELEM(moe_topk_names) == TSR_MOE_TOPK_COUNT, "moe_topk_names vs tsr_moe_topk_kind");
static const char *const rope_scaling_names[] = {"none", "llama3", "linear", "yarn"};
static const char *const tok_mismatch_names[] = {"error", "allow"};
_Static_assert(NELEM(rope_scaling_names) == TSR_ROPE_SCALING_COUNT,
               "rope_scaling_names vs tsr_rope_scaling_kind");
_Static_assert(NELEM(pos_names) == TSR_POS_COUNT, "pos_names vs tsr_pos_kind");
static const char *const mask_names[] = {"causal", "document"};
_Static_assert(NELEM(mask_names) == TSR_MASK_COUNT, "mask_names vs tsr_attn_mask_kind");
static const char *const actckpt_names[] = {"none", "block", "attention", "mlp"};
_Static_assert(NELEM(actckpt_names) == TSR_ACTCKPT_COUNT, "actckpt_names vs tsr_actckpt_kind");
static const char *const nplace_names[] = {"pre", "sandwich", "post"};
_Static_assert(NELEM(nplace_names) == TSR_NPLACE_COUNT, "nplace_names vs tsr_norm_placement");
static const char *const qkscope_names[] = {"head", "projection"};
static const char *const embscale_names[] = {"none", "sqrt_d_model"};
_Static_assert(NELEM(embscale_names) == TSR_EMB_SCALE_COUNT, "embscale_names vs tsr_embed_scale");
_Static_assert(NELEM(qkscope_names) == TSR_QKN_COUNT, "qkscope_names vs tsr_qk_norm_scope");
static const char *const actcomp_names[] = {"none", "fp8"};
_Static_assert(NELEM(actcomp_names) == TSR_ACTCOMP_COUNT, "actcomp_names vs tsr_actcomp_kind");
static const char *const sched_names[] = {"cosine", "linear", "constant", "wsd"};
static const char *const optim_names[] = {"adamw", "muon"};
_Static_assert(NELEM(optim_names) == TSR_OPTIM_COUNT, "optim_names vs tsr_optim_kind");
static const char *const muon_scale_names[] = {"rms", "shape"};
_Static_assert(NELEM(muon_scale_names) == TSR_MUON_SCALE_COUNT, "muon_scale_names vs tsr_muon_scale");
static const char *const objective_names[] = {"lm", "dpo", "grpo"};
_Static_assert(NELEM(objective_names) == TSR_OBJ_COUNT, "objective_names vs tsr_objective_kind");
static const char *const dpo_loss_names[] = {"sigmoid", "ipo"};
_Static_assert(NELEM(dpo_loss_names) == TSR_DPO_LOSS_COUNT, "dpo_loss_names vs tsr_dpo_loss_kind");
static const char *const dpo_ref_names[] = {"auto", "base", "precomputed"};
static const char *const grpo_agg_names[] = {"sequence", "token", "constant"};
_Static_assert(NELEM(grpo_agg_names) == TSR_GRPO_AGG_COUNT, "grpo_agg_names vs tsr_grpo_agg_kind");
static const char *const grpo_ref_names[] = {"auto", "base", "initial"};
_Static_assert(NELEM(grpo_ref_names) == TSR_GRPO_REF_COUNT, "grpo_ref_names vs tsr_grpo_ref_kind");
static const char *const reward_kind_names[] = {"answer", "regex", "command"};
_Static_assert(NELEM(reward_kind_names) == TSR_REWARD_COUNT, "reward_kind_names vs tsr_reward_kind");
static const char *const extract_names[] = {"auto", "boxed", "marker"};
_Static_assert(NELEM(extract_names) == TSR_EXTRACT_COUNT, "extract_names vs tsr_extract_kind");
static const char *const compare_names[] = {"number", "exact"};
_Static_assert(NELEM(compare_names) == TSR_COMPARE_COUNT, "compare_names vs tsr_compare_kind");
_Static_assert(NELEM(dpo_ref_names) == TSR_DPO_REF_COUNT, "dpo_ref_names vs tsr_dpo_ref_kind");
_Static_assert(NELEM(sched_names) == TSR_SCHED_COUNT, "sched_names vs tsr_sched_kind");
static const char *const shard_names[] = {"ddp", "zero1", "zero3", "hsdp"};
_Static_assert(NELEM(shard_names) == TSR_SHARD_COUNT, "shard_names vs tsr_sharding_kind");
static const char *const gpu_comm_names[] = {"nccl", "mpi"};
static const char *const pp_sched_names[] = {"1f1b", "interleaved", "zb"};
static const char *const fp8_names[] = {"none", "tensorwise", "rowwise"};
_Static_assert(NELEM(fp8_names) == TSR_FP8_COUNT, "fp8_names vs tsr_fp8_mode");
static const char *const fp8_skip_names[] = {"none", "first", "last", "first_last"};
_Static_assert(NELEM(fp8_skip_names) == TSR_FP8_SKIP_COUNT, "fp8_skip_names vs tsr_fp8_skip");
_Static_assert(NELEM(gpu_comm_names) == TSR_GPU_COMM_COUNT, "gpu_comm_names vs tsr_gpu_comm_kind");
_Static_assert(NELEM(pp_sched_names) == TSR_PP_SCHED_COUNT, "pp_sched_names vs tsr_pp_sched_kind");
/* tsr_gelu_kind of kernels/ops.h (TSR_GELU_TANH = 0, TSR_GELU_EXACT = 1, TSR_GELU_COUNT = 2); not
 * included here so that the config layer does not depend on the kernels. */
static const char *const gelu_names[] = {"tanh", "exact"};
_Static_assert(NELEM(gelu_names) == 2, "gelu_names vs tsr_gelu_kind");
static const char *const guard_methods[] = {"zscore", "multiplier"};
_Static_assert(NELEM(guard_methods) == TSR_GUARD_METHOD_COUNT, "guard_methods vs tsr_guard_method");
static const char *const guard_actions[] = {"warn", "skip", "rollback"};
_Static_assert(NELEM(guard_actions) == TSR_GUARD_ACTION_COUNT, "guard_actions vs tsr_guard_action");

/* Enum fields are stored through an int. */
_Static_assert(sizeof(tsr_device_kind) == sizeof(int) && sizeof(tsr_pos_kind) == sizeof(int) &&
                   sizeof(tsr_attn_mask_kind) == sizeof(int) &&
                   sizeof(tsr_actckpt_kind) == sizeof(int) &&
                   sizeof(tsr_actcomp_kind) == sizeof(int) &&
                   sizeof(tsr_sched_kind) == sizeof(int) && sizeof(tsr_sharding_kind) == sizeof(int) &&
                   sizeof(tsr_optim_kind) == sizeof(int) && sizeof(tsr_muon_scale) == sizeof(int) &&
                   sizeof(tsr_guard_method) == sizeof(int) && sizeof(tsr_guard_action) == sizeof(int) &&
                   sizeof(tsr_fp8_mode) == sizeof(int) && sizeof(tsr_fp8_skip) == sizeof(int),
               "enum fields must be int-sized");

/* ---- the table ---- */

#define FIELD(f) .offset = offsetof(tsr_config, f), .size = sizeof(((tsr_config *)0)->f)
#define ENUM(a) .names = (a), .n_names = NELEM(a)
#define INT32_ONLY .ihi = INT_MAX
#define NO_MAX .hi = HUGE_VAL
/* what a key does to the model (cfgtab_role): it shapes the model (always, or when f says it
 * applies), or it says how the model trains */
#define SHAPES .role = CFGR_SHAPE
#define SHAPES_IF(f) .role = CFGR_SHAPE, .applies = (f)
#define RUNS .role = CFGR_RUN

/* Order: top-level keys first, then one block per group; config_print and the docs follow it. The
 * model group's rows are config_keys_model.h's. */
const cfgtab_key cfgtab_keys[] = {
    {.name = "run_dir", .type = CFGK_STRING, FIELD(run_dir), .def = "runs/default", .ilo = 1,
     .doc = "Run directory: the effective config, metrics, TensorBoard events and checkpoints go here."},
    {.name = "seed", .type = CFGK_INT, FIELD(seed), .def = "42", .ilo = 0, .ihi = INT64_MAX,
     .doc = "Seed of the weight initialization and of the data order."},
    {.name = "max_duration", .type = CFGK_DURATION, FIELD(max_duration), .example = "\"10e9tok\"",
     .doc = "Length of training in optimizer steps (`ba`), tokens (`tok`) or epochs of data.train "
            "(`ep`), rounded up to whole steps."},
    {.name = "global_batch", .type = CFGK_INT, FIELD(global_batch), .example = "512", .ilo = 1,
     .ihi = INT64_MAX,
     .doc = "Sequences per optimizer step over all ranks; a multiple of ranks x micro_batch. "
            "Fixed by the recipe, so the step does not depend on the rank count."},
    {.name = "micro_batch", .type = CFGK_INT, FIELD(micro_batch), .example = "16", .ilo = 1,
     .ihi = INT64_MAX, .auto_word = "auto",
     .doc = "Sequences per forward/backward pass on one rank; gradients accumulate over "
            "global_batch / (ranks x micro_batch) passes. `\"auto\"`: start at the per-rank "
            "batch and halve on out-of-memory (docs/training.md); the choice is kept in "
            "checkpoints."},
    {.name = "seq_len", .type = CFGK_INT, FIELD(seq_len), .example = "1024", .ilo = 1,
     .ihi = 1048576, .doc = "Tokens per training sequence (T)."},
    {.name = "eval_interval", .type = CFGK_DURATION, FIELD(eval_interval), .def = "0ba",
     .doc = "Evaluate on data.val every this long; `0ba` = never."},
    {.name = "eval_samples", .type = CFGK_INT, FIELD(eval_samples), .def = "0", .ilo = 0,
     .ihi = INT64_MAX, .doc = "Validation sequences per evaluation; 0 = the whole val split."},
    {.name = "save_interval", .type = CFGK_DURATION, FIELD(save_interval), .def = "0ba",
     .doc = "Write a checkpoint every this long; `0ba` = only at the end (see save_final) and on "
            "a stop request."},
    {.name = "save_final", .type = CFGK_BOOL, FIELD(save_final), .def = "true",
     .doc = "Write a checkpoint when max_duration is reached. `false` for benchmarks and throwaway "
            "runs (a 7B model's is 80 GB); a stop request and the watchdogs still write theirs. "
            "Relaunched in the same run_dir, a finished run without it resumes from its last "
            "checkpoint and trains the rest again."},
    {.name = "save_async", .type = CFGK_BOOL, FIELD(save_async), .def = "true",
     .doc = "Write the periodic checkpoints in the background: at a save step each rank copies "
            "its part of the state into host memory (the snapshot, in the memory plan) and the "
            "file is created, training goes on while a thread writes it, and it is committed at "
            "a later step boundary (docs/checkpoint-format.md \"Asynchronous save\"). The final "
            "save and those of a stop request, the watchdog and a rollback are synchronous. "
            "`false`: every save stops the run until it is committed. A run whose snapshot does "
            "not fit host memory saves synchronously, with a warning at start."},
    {.name = "keep_last", .type = CFGK_INT, FIELD(keep_last), .def = "2", .ilo = 2, INT32_ONLY,
     .doc = "Checkpoints kept in run_dir; the oldest is deleted only after a newer one is committed."},
    {.name = "save_async_copy", .type = CFGK_ENUM, FIELD(save_async_copy), .def = "auto",
     ENUM(snapcopy_names),
     .doc = "Where a background save (save_async) copies each rank's slices into the snapshot: "
            "`background`, on the writer thread while the next step runs (free cores, as on a GPU "
            "node, make it cost nothing); `step`, in the save step while the ranks wait (counted "
            "in its blocking time; the write itself stays in the background); `auto`, `step` "
            "when device = cpu and the ranks' threads take every core they may run on (the "
            "cores a rank is bound to, else the node's), else `background`. On a node whose cores all train, a background copy takes its rank's "
            "core at an unknown moment and the other ranks wait for that rank at every "
            "all-reduce (docs/benchmarks.md \"Asynchronous checkpoint save\")."},
    {.name = "log_interval", .type = CFGK_INT, FIELD(log_interval), .def = "1", .ilo = 1,
     INT32_ONLY, .doc = "Report metrics every this many optimizer steps."},
    {.name = "threads", .type = CFGK_INT, FIELD(threads), .def = "0", .ilo = 0, INT32_ONLY,
     .doc = "CPU threads per rank (OpenMP); 0 = auto."},
    {.name = "device", .type = CFGK_ENUM, FIELD(device), .def = "cpu", ENUM(device_names),
     .doc = "Where the math runs: `cpu` (fp32 reference ops) or `cuda` (bf16, one GPU per rank)."},
    {.name = "peak_flops", .type = CFGK_FLOAT, FIELD(peak_flops), .def = "0", .lo = 0, NO_MAX,
     .doc = "Peak FLOP/s of one rank's device, for MFU; 0 = from the built-in device table."},

#include "config/config_keys_model.h"

    {.name = "optim.lr", .type = CFGK_FLOAT, FIELD(optim.lr), .example = "6e-4", .lo = 0,
     .lo_open = 1, NO_MAX, .doc = "Peak learning rate (AdamW), reached at the end of warmup."},
    {.name = "optim.beta1", .type = CFGK_FLOAT, FIELD(optim.beta1), .def = "0.9", .lo = 0, .hi = 1,
     .hi_open = 1, .doc = "AdamW decay of the first moment."},
    {.name = "optim.beta2", .type = CFGK_FLOAT, FIELD(optim.beta2), .def = "0.95", .lo = 0, .hi = 1,
     .hi_open = 1, .doc = "AdamW decay of the second moment."},
    {.name = "optim.eps", .type = CFGK_FLOAT, FIELD(optim.eps), .def = "1e-8", .lo = 0, .lo_open = 1,
     NO_MAX, .doc = "AdamW epsilon."},
    {.name = "optim.weight_decay", .type = CFGK_FLOAT, FIELD(optim.weight_decay), .def = "0",
     .lo = 0, NO_MAX, .doc = "AdamW weight decay of the weight matrices; 0 = none."},
    {.name = "optim.grad_clip", .type = CFGK_FLOAT, FIELD(optim.grad_clip), .def = "1", .lo = 0,
     NO_MAX, .doc = "Clip the global gradient norm to this; 0 = off."},
    {.name = "optim.warmup", .type = CFGK_DURATION, FIELD(optim.warmup), .def = "0ba",
     .doc = "Linear warmup of the learning rate from 0 to lr over this long."},
    {.name = "optim.schedule", .type = CFGK_ENUM, FIELD(optim.schedule), .def = "cosine",
     ENUM(sched_names),
     .doc = "Decay after warmup, from lr to alpha_f x lr at max_duration: `cosine`, `linear`, "
            "`constant` (no decay), or `wsd` (warmup-stable-decay: lr until the last optim.decay "
            "of the run, then linear to alpha_f x lr; a run extended later continues at lr "
            "without a jump). Formulas: docs/training.md, \"Schedule\"."},
    {.name = "optim.decay", .type = CFGK_STRING, FIELD(optim.decay), .def = "0.2", .ilo = 1,
     .doc = "`optim.schedule = \"wsd\"`: how long the final decay is, a fraction of max_duration "
            "in (0, 1] (`0.2`: the last 20% of the steps, rounded to the nearest step) or a "
            "duration (`200ba`, `1e9tok`, `0.5ep`). optim.warmup plus the decay must fit in "
            "max_duration. Other schedules ignore it."},
    {.name = "optim.alpha_f", .type = CFGK_FLOAT, FIELD(optim.alpha_f), .def = "0.1", .lo = 0,
     .hi = 1, .doc = "Final learning rate as a fraction of lr."},
    {.name = "optim.decay_norms_biases", .type = CFGK_BOOL, FIELD(optim.decay_norms_biases),
     .def = "false", .doc = "Apply weight decay to LayerNorm weights and to biases too."},
    {.name = "optim.decay_embeddings", .type = CFGK_BOOL, FIELD(optim.decay_embeddings),
     .def = "false", .doc = "Apply weight decay to the token and position embeddings too."},
    {.name = "optim.name", .type = CFGK_ENUM, FIELD(optim.name), .def = "adamw",
     ENUM(optim_names),
     .doc = "The optimizer: `adamw` for every tensor; `muon`: the hidden weight matrices (each "
            "projection of attention and the MLP on its own: q, k, v, o, gate, up, down, the "
            "router, each expert's) by Muon (momentum orthogonalised by a Newton-Schulz "
            "iteration; optim.muon.*), the embeddings, the LM head, norms and biases by AdamW "
            "with the keys above (docs/training.md \"Muon\"). Not with lora.rank > 0."},
    {.name = "optim.muon.lr", .type = CFGK_FLOAT, FIELD(optim.muon.lr), .def = "0", .lo = 0,
     NO_MAX, .doc = "Muon's peak learning rate, on the schedule of optim.lr (warmup, decay); "
                    "0 = optim.lr (with scale = `rms` AdamW's rate carries over)."},
    {.name = "optim.muon.momentum", .type = CFGK_FLOAT, FIELD(optim.muon.momentum), .def = "0.95",
     .lo = 0, .hi = 1, .hi_open = 1,
     .doc = "Muon's momentum: buf = momentum x buf + gradient."},
    {.name = "optim.muon.nesterov", .type = CFGK_BOOL, FIELD(optim.muon.nesterov), .def = "true",
     .doc = "Orthogonalise gradient + momentum x buf (Nesterov) instead of buf."},
    {.name = "optim.muon.ns_steps", .type = CFGK_INT, FIELD(optim.muon.ns_steps), .def = "5",
     .ilo = 1, .ihi = 100,
     .doc = "Newton-Schulz iterations (the quintic of coefficients 3.4445, -4.7750, 2.0315)."},
    {.name = "optim.muon.weight_decay", .type = CFGK_FLOAT, FIELD(optim.muon.weight_decay),
     .def = "0", .lo = 0, NO_MAX,
     .doc = "Decoupled weight decay of the Muon matrices: p = p (1 - lr x weight_decay); 0 = none."},
    {.name = "optim.muon.scale", .type = CFGK_ENUM, FIELD(optim.muon.scale), .def = "rms",
     ENUM(muon_scale_names),
     .doc = "The orthogonalised update's multiplier: `rms` = optim.muon.rms x sqrt(max(rows, "
            "cols)), an update of that RMS, as AdamW's (Moonlight), so AdamW's learning rates "
            "carry over; `shape` = sqrt(max(1, rows / cols)) (Keller Jordan's; lr about 0.02)."},
    {.name = "optim.muon.rms", .type = CFGK_FLOAT, FIELD(optim.muon.rms), .def = "0.2", .lo = 0,
     .lo_open = 1, NO_MAX,
     .doc = "With scale = `rms`: the RMS of the update (0.2: AdamW's typical, Moonlight)."},

    {.name = "data.train", .type = CFGK_STRING, FIELD(data.train), .example = "\"data/train\"",
     .ilo = 1, .doc = "Training dataset directory (written by `tessera prep`), or `s3://BUCKET/PREFIX` "
                      "on an object store (needs data.stage_to; docs/object-storage.md); or, "
                      "instead, several datasets in `data.mix` (see below)."},
    {.name = "data.val", .type = CFGK_STRING, FIELD(data.val), .def = "", .ilo = 0,
     .doc = "Validation dataset directory; \"\" = none (then eval_interval must be `0ba`)."},
    {.name = "data.shuffle", .type = CFGK_BOOL, FIELD(data.shuffle), .def = "true",
     .doc = "Shuffle the samples each epoch (a function of seed, epoch and sample index only, never "
            "of the rank count); false = dataset order."},
    {.name = "data.verify", .type = CFGK_BOOL, FIELD(data.verify), .def = "true",
     .doc = "Verify every shard's checksum when a dataset is opened (reads it once)."},
    {.name = "data.allow_changed", .type = CFGK_BOOL, FIELD(data.allow_changed), .def = "false",
     .doc = "A resume whose data.train, data.mix stream or data.val is not the dataset the "
            "checkpoint recorded (its index.tsv's CRC32C, shard and token counts) goes on with "
            "it, warning with where the sampler continues; false = such a resume stops with exit "
            "2 naming the source and both identities (docs/training.md \"Resuming on the same "
            "data\")."},
    {.name = "data.tokenizer", .type = CFGK_STRING, FIELD(data.tokenizer), .def = "auto", .ilo = 0,
     .doc = "Tokenizer used to decode samples and encode ICL tasks: `gpt2`, a directory holding "
            "one (GPT-2's encoder.json + vocab.bpe or vocab.json + merges.txt, a tokenizer.json, or "
            "tiktoken.model: docs/tokenizer.md), a Hugging Face tokenizer.json, a tiktoken file "
            "(o200k_base.tiktoken) or a `tessera tokenizer train` file; `auto` = the one data.train was prepared with (its "
            "index's `tokenizer`; when it records none, the tokenizer of an --init-from Hugging "
            "Face directory, else none); empty = none (print token ids). With --init-from a "
            "Hugging Face directory that holds a tokenizer, a value from the recipe file counts "
            "as `auto`; only a --set keeps its own."},
    {.name = "data.tokenizer_mismatch", .type = CFGK_ENUM, FIELD(data.tokenizer_mismatch),
     .def = "error", ENUM(tok_mismatch_names),
     .doc = "A data.tokenizer other than the one the dataset was prepared with (its index's "
            "`tokenizer`): `error` stops the start naming both; `allow` decodes with the recipe's."},
    {.name = "data.stage_to", .type = CFGK_STRING, FIELD(data.stage_to), .def = "", .ilo = 0,
     .doc = "Node-local directory (e.g. /local/scratch/$USER) to stage the training shards into "
            "ahead of use, one copy per node (docs/staging.md); \"\" = read in place. Required for "
            "an s3:// dataset (docs/object-storage.md)."},
    {.name = "data.cache_limit", .type = CFGK_STRING, FIELD(data.cache_limit), .def = "0",
     .ilo = 1,
     .doc = "Bytes the staged shards may occupy per dataset and node: `500M`, `20G`, `1.5T` "
            "(powers of 1024); `0` = no limit. Beyond it the oldest unneeded shards are evicted, "
            "and a shard that still does not fit is read in place."},
    {.name = "data.stage_window", .type = CFGK_INT, FIELD(data.stage_window), .def = "50",
     .ilo = 1, .ihi = 1000000000,
     .doc = "Steps per staging window: during one window the shards of the next are staged."},
    {.name = "data.stage_wait", .type = CFGK_FLOAT, FIELD(data.stage_wait), .def = "0", .lo = 0,
     .hi = 86400,
     .doc = "Seconds each window boundary may wait for the copies announced a window earlier "
            "before the ranks go on together; 0 = never wait (read in place while staging lags)."},

    {.name = "sample.tokens", .type = CFGK_INT, FIELD(sample.tokens), .def = "0", .ilo = 0,
     .ihi = 1000000, .doc = "Tokens to sample after training, from an end-of-text prompt (rank 0 "
                            "prints them; under zero3 / hsdp every rank samples, each forward "
                            "gathering); 0 = none."},
    {.name = "sample.temperature", .type = CFGK_FLOAT, FIELD(sample.temperature), .def = "1.0",
     .lo = 0, .hi = 100, .lo_open = 1, .doc = "Sampling temperature (> 0)."},
    {.name = "sample.top_k", .type = CFGK_INT, FIELD(sample.top_k), .def = "40", .ilo = 0,
     .ihi = INT32_MAX, .doc = "Sample among the k most likely tokens; 0 = all of them."},

    {.name = "parallel.sharding", .type = CFGK_ENUM, FIELD(sharding), .def = "ddp",
     ENUM(shard_names),
     .doc = "How ranks share the training state: `ddp` replicates it; `zero1` shards the AdamW "
            "state; `zero3` shards weights, gradients and AdamW state over all ranks, gathering "
            "each layer's weights when it runs; `hsdp` does zero3 within groups of "
            "`parallel.replica_group` ranks and replicates across the groups (docs/sharding.md)."},
    {.name = "parallel.replica_group", .type = CFGK_INT, FIELD(replica_group), .def = "0",
     .ilo = 0, INT32_ONLY,
     .doc = "hsdp: ranks per sharding group (a divisor of the rank count); 0 = the ranks of one "
            "node. Ignored by the other modes."},
    {.name = "parallel.expert", .type = CFGK_INT, FIELD(expert), .def = "1", .ilo = 1,
     INT32_ONLY,
     .doc = "Expert parallelism (MoE models): the experts are split over groups of this many "
            "consecutive ranks, tokens travel to their experts' ranks and back by all-to-all; a "
            "divisor of the rank count and of `model.moe_experts`. 1 = every rank holds every "
            "expert (docs/moe.md)."},
    {.name = "parallel.context", .type = CFGK_INT, FIELD(context), .def = "1", .ilo = 1,
     INT32_ONLY,
     .doc = "Context parallelism (long sequences): every sequence is split over a group of this "
            "many consecutive ranks, each holding two of its 2N chunks (zig-zag), and attention "
            "runs as a ring that passes keys and values around the group; a divisor of the rank "
            "count, and 2N must divide `seq_len`. The ranks form a data x context mesh: the "
            "global batch is split over the rank count / N data ranks. 1 = a sequence lives "
            "whole on one rank (docs/parallelism.md)."},
    {.name = "parallel.tensor", .type = CFGK_INT, FIELD(tensor), .def = "1", .ilo = 1,
     INT32_ONLY,
     .doc = "Tensor parallelism: each layer's matrices are split over a group of this many "
            "consecutive ranks (attention by heads, the MLP by its intermediate width, the "
            "embedding and the LM head by vocabulary rows), the partial results summed inside "
            "the group; it must divide the rank count, the heads, the key/value heads (or be a "
            "multiple of them), the MLP and experts' widths and the padded vocabulary. The ranks "
            "form a tensor "
            "x context x data mesh, tensor innermost. 1 = every rank holds whole matrices "
            "(docs/parallelism.md \"Tensor parallelism\")."},
    {.name = "parallel.sequence", .type = CFGK_BOOL, FIELD(sequence), .def = "true",
     .doc = "With `parallel.tensor` > 1: sequence parallelism, the norms and residual adds "
            "between the split matrices run on 1/T of the tokens (a reduce-scatter and an "
            "all-gather in place of each all-reduce; `seq_len` a multiple of T). false: every "
            "rank of the group runs them on all tokens. Ignored when `parallel.tensor` = 1."},
    {.name = "parallel.tensor_across_nodes", .type = CFGK_BOOL, FIELD(tensor_across_nodes),
     .def = "false",
     .doc = "Allow a `parallel.tensor` group to span nodes (its collectives, several per "
            "layer, then cross the network: slow); by default a group must lie within a node "
            "(checked at start)."},
    {.name = "parallel.pipeline", .type = CFGK_INT, FIELD(pipeline), .def = "1", .ilo = 1,
     INT32_ONLY,
     .doc = "Pipeline parallelism: the layers are cut into this many stages, each on its own "
            "ranks, activations and their gradients sent between neighbouring stages; a step's "
            "microbatches (per-rank batch / `micro_batch`, at least this many) flow through "
            "them by `parallel.pipeline_schedule`. It must divide the rank count; the ranks form "
            "a pipeline x data x context x tensor mesh, pipeline outermost. 1 = every rank holds "
            "every layer (docs/pipeline.md)."},
    {.name = "parallel.pipeline_schedule", .type = CFGK_ENUM, FIELD(pipeline_schedule),
     .def = "1f1b", ENUM(pp_sched_names),
     .doc = "With `parallel.pipeline` > 1, the order of each rank's forwards and backwards: "
            "`1f1b` (one forward, one backward), `interleaved` (`parallel.pipeline_virtual` "
            "model chunks a rank, a smaller bubble; microbatches a multiple of the stages' "
            "ranks), `zb` (zero bubble ZB-H1: each backward split into the input's gradient and "
            "the weights', which fills the bubble) (docs/pipeline.md)."},
    {.name = "parallel.pipeline_virtual", .type = CFGK_INT, FIELD(pipeline_virtual), .def = "1",
     .ilo = 1, .ihi = TSR_PART_MAX,
     .doc = "The interleaved schedule's model chunks a rank, V (2 or more): the layers are cut "
            "into `parallel.pipeline` x V stages, rank r holding stages r, r + P, ... 1 = "
            "one chunk a rank (1f1b, zb)."},
    {.name = "parallel.pipeline_layout", .type = CFGK_STRING, FIELD(pipeline_layout),
     .def = "", .ilo = 0,
     .doc = "The stages' cut by hand, Megatron's --pipeline-model-parallel-layout: E the "
            "embedding, t a layer, L the final norm, the head and the loss, | between stages, "
            "t*N and (...)*N repeated, e.g. \"Et*3|t*4|t*4|t*3L\" (every stage at least one "
            "layer). \"\" = the cut balanced by the plan's cost of each layer, the embedding "
            "and the head (docs/pipeline.md)."},
    {.name = "parallel.gpu_comm", .type = CFGK_ENUM, FIELD(gpu_comm), .def = "nccl",
     ENUM(gpu_comm_names),
     .doc = "device = cuda: what carries the gradient sums, shards and the expert exchange. "
            "`nccl`: NCCL, one GPU per rank. `mpi`: MPI on host copies of the data (device to "
            "pinned host memory, MPI, back; slower), the fallback where NCCL does not work, and "
            "the one that lets several ranks share a GPU (each then plans with its share of the "
            "device memory; docs/cuda.md \"Several ranks on one GPU\"). Needs an MPI with "
            "MPI_THREAD_MULTIPLE. Ignored by device = cpu."},

    {.name = "precision.fp8", .type = CFGK_ENUM, FIELD(precision.fp8), .def = "none",
     ENUM(fp8_names),
     .doc = "device = cuda on a GPU of compute capability 8.9 or newer: the decoder's linear "
            "layers in FP8 (never the embeddings, the LM head, a MoE router). `none`: bf16. "
            "`tensorwise`: E4M3 inputs scaled by each tensor's current amax, fp32 accumulation, "
            "bf16 out, through cuBLASLt, in the forward; the backward stays bf16 (docs/cuda.md "
            "\"FP8\"). `rowwise`: one scale per row (not built yet: refused). Refused with "
            "device = cpu, the fp32 oracle."},
    {.name = "precision.fp8_skip", .type = CFGK_ENUM, FIELD(precision.fp8_skip), .def = "none",
     ENUM(fp8_skip_names),
     .doc = "With precision.fp8: decoder layers whose linear layers stay in bf16: `none`, "
            "`first`, `last` or `first_last` (the layers FP8 recipes most often keep in higher "
            "precision). Ignored with precision.fp8 = `none`."},
    {.name = "precision.fp8_allgather", .type = CFGK_BOOL, FIELD(precision.fp8_allgather),
     .def = "true",
     .doc = "With precision.fp8 under parallel.sharding = `zero3` or `hsdp`: the forward's "
            "all-gather of a decoder layer moves its FP8 linear weights as E4M3 (one byte, scaled "
            "by the whole tensor's amax: a MAX all-reduce of the shards' amax), the rest in bf16, "
            "for layers 0 .. L-3 (the last two stay bf16 for the backward, which gathers bf16). "
            "The same bits as `false` (bf16 gathers, the weight cast after the gather), fewer "
            "bytes (docs/cuda.md \"FP8\"; --time counts them). Ignored otherwise and under "
            "LoRA."},

    {.name = "objective", .type = CFGK_ENUM, FIELD(objective), .def = "lm",
     ENUM(objective_names),
     .doc = "What training minimises: `lm`, next-token cross-entropy over the target tokens; "
            "`dpo`, Direct Preference Optimization on preference pairs (`tessera prep --format "
            "preference`), with LoRA or full finetuning; the reference model: `dpo.reference` "
            "(docs/dpo.md); `grpo`, reinforcement learning on the model's own completions of "
            "prompts (`tessera prep --format prompts`), scored by `reward.*` (docs/rl.md)."},
    {.name = "dpo.beta", .type = CFGK_FLOAT, FIELD(dpo.beta), .def = "0.1", .lo = 0, .lo_open = 1,
     NO_MAX,
     .doc = "DPO: beta, the strength of the implicit KL penalty (TRL's beta)."},
    {.name = "dpo.loss", .type = CFGK_ENUM, FIELD(dpo.loss), .def = "sigmoid",
     ENUM(dpo_loss_names),
     .doc = "DPO: `sigmoid`, -log sigmoid(z) (the DPO paper); `ipo`, (z / beta - 1 / (2 beta))^2 "
            "(IPO)."},
    {.name = "dpo.label_smoothing", .type = CFGK_FLOAT, FIELD(dpo.label_smoothing), .def = "0.0",
     .lo = 0, .hi = 0.5, .hi_open = 1,
     .doc = "DPO, sigmoid loss: the assumed share of pairs whose preference is wrong (cDPO): "
            "-(1-e) log sigmoid(z) - e log sigmoid(-z)."},
    {.name = "dpo.reference", .type = CFGK_ENUM, FIELD(dpo.reference), .def = "auto",
     ENUM(dpo_ref_names),
     .doc = "DPO: the reference model. `base`, the base with the LoRA adapters off (LoRA only; "
            "one more forward per microbatch); `precomputed`, the initial model's "
            "log-probabilities of every pair, computed by a forward-only pass before step 1 and "
            "stored in `run_dir/dpo-reference.bin` (a resume reads them); `auto`, `base` with "
            "LoRA, else `precomputed` (docs/dpo.md)."},
    {.name = "dpo.reference_checksum", .type = CFGK_STRING, FIELD(dpo.reference_checksum),
     .def = "", .ilo = 0,
     .doc = "DPO, `precomputed` reference: `crc32c:XXXXXXXX`, the checksum of "
            "`run_dir/dpo-reference.bin`: written by the trainer into the checkpoints' config; a "
            "resume whose stored reference differs stops (exit 2). Leave it empty."},

    {.name = "grpo.group_size", .type = CFGK_INT, FIELD(grpo.group_size), .def = "8", .ilo = 2,
     .ihi = 1024,
     .doc = "GRPO: G, the completions sampled per prompt; their rewards are normalised within the "
            "group. `global_batch` counts prompts, so a step trains on G x global_batch "
            "completions."},
    {.name = "grpo.max_new_tokens", .type = CFGK_INT, FIELD(grpo.max_new_tokens), .def = "256",
     .ilo = 1, .ihi = 1048576,
     .doc = "GRPO: the longest completion; `seq_len` must hold the longest prompt (the prompts' "
            "`--pack` P, less one) and this many tokens."},
    {.name = "grpo.temperature", .type = CFGK_FLOAT, FIELD(grpo.temperature), .def = "1.0",
     .lo = 0, .lo_open = 1, .hi = 100,
     .doc = "GRPO: the sampling temperature of the rollouts (the objective's ratio uses the "
            "model's own distribution, temperature 1)."},
    {.name = "grpo.top_k", .type = CFGK_INT, FIELD(grpo.top_k), .def = "0", .ilo = 0,
     INT32_ONLY, .doc = "GRPO: sample among the K most likely tokens; 0 = all."},
    {.name = "grpo.top_p", .type = CFGK_FLOAT, FIELD(grpo.top_p), .def = "1.0", .lo = 0,
     .lo_open = 1, .hi = 1, .doc = "GRPO: nucleus sampling of the rollouts; 1 = no cut."},
    {.name = "grpo.updates", .type = CFGK_INT, FIELD(grpo.updates), .def = "1", .ilo = 1,
     .ihi = 64,
     .doc = "GRPO: optimizer steps per rollout batch (each over the whole batch; the old "
            "log-probabilities stay those of the rollout, so the ratio leaves 1 after the first)."},
    {.name = "grpo.clip_low", .type = CFGK_FLOAT, FIELD(grpo.clip_low), .def = "0.2", .lo = 0,
     .hi = 1, .doc = "GRPO: epsilon_low: the ratio is clipped below at 1 - clip_low."},
    {.name = "grpo.clip_high", .type = CFGK_FLOAT, FIELD(grpo.clip_high), .def = "0.2", .lo = 0,
     NO_MAX,
     .doc = "GRPO: epsilon_high: the ratio is clipped above at 1 + clip_high (DAPO's clip-higher: "
            "0.28)."},
    {.name = "grpo.loss_agg", .type = CFGK_ENUM, FIELD(grpo.loss_agg), .def = "sequence",
     ENUM(grpo_agg_names),
     .doc = "GRPO: how the per-token losses make the step's loss: `sequence`, each completion's "
            "mean, then their mean (GRPO); `token`, the mean over all completion tokens of the "
            "batch (DAPO); `constant`, their sum over completions x grpo.max_new_tokens (Dr. "
            "GRPO)."},
    {.name = "grpo.scale_rewards", .type = CFGK_BOOL, FIELD(grpo.scale_rewards), .def = "true",
     .doc = "GRPO: divide each advantage by its group's reward standard deviation (false: Dr. "
            "GRPO)."},
    {.name = "grpo.dynamic_sampling", .type = CFGK_BOOL, FIELD(grpo.dynamic_sampling),
     .def = "false",
     .doc = "GRPO: drop the groups whose rewards all tie (no gradient) and refill the batch with "
            "further prompts (DAPO), for at most grpo.max_rounds generation rounds."},
    {.name = "grpo.max_rounds", .type = CFGK_INT, FIELD(grpo.max_rounds), .def = "3", .ilo = 1,
     .ihi = 64,
     .doc = "GRPO, dynamic sampling: generation rounds per step at most; a batch still short "
            "after them trains with tied groups in the remaining slots (logged)."},
    {.name = "grpo.overlong_buffer", .type = CFGK_INT, FIELD(grpo.overlong_buffer), .def = "0",
     .ilo = 0, .ihi = 1048576,
     .doc = "GRPO: DAPO's soft overlong penalty: a completion longer than max_new_tokens - this "
            "loses up to grpo.overlong_penalty, linearly over these last tokens; 0 = off."},
    {.name = "grpo.overlong_penalty", .type = CFGK_FLOAT, FIELD(grpo.overlong_penalty),
     .def = "1.0", .lo = 0, NO_MAX, .doc = "GRPO: the overlong penalty at max_new_tokens."},
    {.name = "grpo.kl_coef", .type = CFGK_FLOAT, FIELD(grpo.kl_coef), .def = "0.0", .lo = 0,
     NO_MAX,
     .doc = "GRPO: beta of the per-token KL term to the reference (k3 estimator: "
            "exp(ref - pi) - (ref - pi) - 1); 0 = none (DAPO, Dr. GRPO)."},
    {.name = "grpo.reference", .type = CFGK_ENUM, FIELD(grpo.reference), .def = "auto",
     ENUM(grpo_ref_names),
     .doc = "GRPO with kl_coef > 0: the reference. `base`, the base with the LoRA adapters off "
            "(LoRA only); `initial`, a frozen copy of the starting weights, stored in "
            "`run_dir/grpo-reference.bin` (sharded as the weights are); `auto`, `base` with LoRA, "
            "else `initial`."},
    {.name = "grpo.reference_checksum", .type = CFGK_STRING, FIELD(grpo.reference_checksum),
     .def = "", .ilo = 0,
     .doc = "GRPO, `initial` reference: `crc32c:XXXXXXXX` of `run_dir/grpo-reference.bin`, "
            "written by the trainer into the checkpoints' config; a resume whose stored "
            "reference differs stops (exit 2). Leave it empty."},
    {.name = "grpo.rollout_batch", .type = CFGK_INT, FIELD(grpo.rollout_batch), .def = "64",
     .ilo = 1, .ihi = 4096,
     .doc = "GRPO: sequences a rank decodes together (the KV cache holds this many)."},
    {.name = "grpo.eval_prompts", .type = CFGK_INT, FIELD(grpo.eval_prompts), .def = "0",
     .ilo = 0, INT32_ONLY,
     .doc = "GRPO: the data.val prompts whose greedy completion is scored at each evaluation "
            "(pass@1); 0 = all of them."},
    {.name = "grpo.log_completions", .type = CFGK_INT, FIELD(grpo.log_completions), .def = "0",
     .ilo = 0, INT32_ONLY,
     .doc = "GRPO: completions of each step written to `run_dir/completions.jsonl` (the first "
            "ones of the batch, with their rewards); 0 = none."},
    {.name = "reward.kind", .type = CFGK_ENUM, FIELD(reward.kind), .def = "answer",
     ENUM(reward_kind_names),
     .doc = "GRPO's reward: `answer`, 1 when the completion's final answer (reward.extract) equals "
            "the prompt's \"answer\" (reward.compare); `regex`, 1 when the completion matches "
            "reward.regex; `command`, what the program reward.command answers (docs/rl.md). "
            "With gpt-oss's harmony prompts every kind reads the final channel only (docs/rl.md "
            "\"What a reward sees\")."},
    {.name = "reward.extract", .type = CFGK_ENUM, FIELD(reward.extract), .def = "auto",
     ENUM(extract_names),
     .doc = "reward.kind = answer: the final answer is the content of the last `\\boxed{...}` "
            "(boxed), the text after the last reward.marker (marker), or (auto) the first of "
            "them present, else the whole completion; trimmed."},
    {.name = "reward.marker", .type = CFGK_STRING, FIELD(reward.marker), .def = "####",
     .ilo = 1, .doc = "reward.kind = answer: the text the final answer follows (GSM8K's ####)."},
    {.name = "reward.compare", .type = CFGK_ENUM, FIELD(reward.compare), .def = "number",
     ENUM(compare_names),
     .doc = "reward.kind = answer: `number`, both read as numbers (commas and spaces dropped) and "
            "equal within 1e-9 relative; `exact`, the same text."},
    {.name = "reward.regex", .type = CFGK_STRING, FIELD(reward.regex), .def = "", .ilo = 0,
     .doc = "reward.kind = regex: a POSIX extended regular expression; reward 1 when it matches "
            "the completion."},
    {.name = "reward.format_regex", .type = CFGK_STRING, FIELD(reward.format_regex), .def = "",
     .ilo = 0,
     .doc = "A format reward: reward.format_weight is added when this POSIX extended regular "
            "expression matches the completion; \"\" = none."},
    {.name = "reward.format_weight", .type = CFGK_FLOAT, FIELD(reward.format_weight),
     .def = "0.0", .lo = -1e6, .hi = 1e6, .doc = "The format reward's weight."},
    {.name = "reward.command", .type = CFGK_STRING, FIELD(reward.command), .def = "", .ilo = 0,
     .doc = "reward.kind = command: a program (run by sh -c) started once per rank and kept "
            "running: one JSON line per completion on its stdin, one {\"id\", \"reward\"} line "
            "back for each on its stdout (docs/rl.md \"The reward program\")."},
    {.name = "reward.timeout", .type = CFGK_FLOAT, FIELD(reward.timeout), .def = "60.0",
     .lo = 0.1, .hi = 86400,
     .doc = "reward.kind = command: seconds the program may take to answer one step's "
            "completions; past it the run stops (exit 2)."},
    {.name = "reward.memory_mib", .type = CFGK_INT, FIELD(reward.memory_mib), .def = "8192",
     .ilo = 0, .ihi = 1 << 30,
     .doc = "reward.kind = command: the program's address space in MiB (`ulimit -v`, for it and "
            "what it starts); an allocation past it fails in the program, which then exits and "
            "the run stops (exit 2). 0 = unbounded."},

    {.name = "lora.rank", .type = CFGK_INT, FIELD(lora.rank), .def = "0", .ilo = 0, .ihi = 4096,
     .doc = "LoRA (docs/lora.md): the rank r of the low-rank adapters trained beside the frozen "
            "base model (8 to 64 is usual); 0 = no adapters, every weight trains.",
     SHAPES},
    {.name = "lora.alpha", .type = CFGK_FLOAT, FIELD(lora.alpha), .def = "16.0", .lo = 0,
     .lo_open = 1, NO_MAX,
     .doc = "LoRA: the adapter path is scaled by alpha / r (PEFT's lora_alpha).",
     SHAPES_IF(cfgm_lora)},
    {.name = "lora.dropout", .type = CFGK_FLOAT, FIELD(lora.dropout), .def = "0.0", .lo = 0,
     .hi = 1, .hi_open = 1,
     .doc = "LoRA: dropout on the adapter path's input during training (PEFT's lora_dropout); "
            "off in evaluation."},
    {.name = "lora.targets", .type = CFGK_STRING, FIELD(lora.targets),
     .def = "all-linear", .ilo = 1,
     .doc = "LoRA: the projections that get an adapter: `all-linear` (PEFT's name: every one "
            "this model can adapt) or a comma-separated list of `q`, `k`, `v` (the attention "
            "inputs), `o` (its output), `gate`, `up`, `down` (the MLP: a SwiGLU MLP has all "
            "three, a GELU MLP `down` only so far, a MoE model's experts none); with "
            "linear_attention layers `in_proj_qkvz`, `in_proj_ba`, `out_proj` (the Gated "
            "DeltaNet's projections, PEFT's Qwen3-Next names), with model.attn_output_gate "
            "`attn_gate` (the gate's projection).",
     SHAPES_IF(cfgm_lora), .value = cfgm_lora_targets},
    {.name = "lora.base", .type = CFGK_STRING, FIELD(lora.base), .def = "", .ilo = 0,
     .doc = "LoRA: the frozen base model: a checkpoint, a run directory or a Hugging Face "
            "directory; \"\" = the one --init-from names, else the seed's initial weights (a "
            "warning). A resume reads the base again from here."},
    {.name = "lora.base_relative", .type = CFGK_STRING, FIELD(lora.base_relative), .def = "",
     .ilo = 0,
     .doc = "LoRA: the base's path relative to run_dir, written by the trainer beside the "
            "absolute lora.base; where lora.base is gone (a run tree moved or copied), the base is "
            "looked for here. Leave it empty."},
    {.name = "lora.base_checksum", .type = CFGK_STRING, FIELD(lora.base_checksum), .def = "",
     .ilo = 0,
     .doc = "LoRA: `crc32c:XXXXXXXX`, the checksum of the base's weights as loaded: written by the "
            "trainer into the run's config and checkpoints; a start whose base differs stops "
            "(exit 2). Leave it empty."},

    {.name = "watchdog.window", .type = CFGK_INT, FIELD(watchdog.window), .def = "50", .ilo = 0,
     .ihi = INT64_MAX,
     .doc = "Steps per straggler window: each rank's compute time per step is compared across "
            "ranks every this many steps; 0 = no straggler or MFU watchdog."},
    {.name = "watchdog.slow_factor", .type = CFGK_FLOAT, FIELD(watchdog.slow_factor), .def = "2.0",
     .lo = 1, .lo_open = 1, NO_MAX,
     .doc = "A rank whose compute time per step exceeds this factor times the ranks' lower "
            "median in a window is slow."},
    {.name = "watchdog.patience", .type = CFGK_INT, FIELD(watchdog.patience), .def = "3", .ilo = 1,
     INT32_ONLY,
     .doc = "Consecutive slow windows (or windows under min_mfu) before the run checkpoints and "
            "exits 86 (sweep the nodes, then requeue), naming the slow rank and host."},
    {.name = "watchdog.min_mfu", .type = CFGK_FLOAT, FIELD(watchdog.min_mfu), .def = "0", .lo = 0,
     .hi = 1, .doc = "MFU floor per window (0.3 = 30%); 0 = off."},
    {.name = "watchdog.hang_timeout", .type = CFGK_FLOAT, FIELD(watchdog.hang_timeout), .def = "0",
     .lo = 0, NO_MAX,
     .doc = "Seconds one phase (a step's compute, its gradient reduction, an eval, a checkpoint) "
            "may last; longer: the stuck rank names its phase and the run aborts (exit 3) so Slurm "
            "requeues it (ranks waiting for it in a collective wait 2 s or 10% longer). 0 = off; "
            "set it to well above the slowest checkpoint save."},

    {.name = "metrics.prometheus_dir", .type = CFGK_STRING, FIELD(metrics.prometheus_dir),
     .def = "", .ilo = 0,
     .doc = "A directory read by node_exporter's textfile collector (its "
            "--collector.textfile.directory): rank 0 keeps `tessera_train_JOB.prom` there (JOB: "
            "the Slurm job id, else the run directory's name), replaced atomically every "
            "metrics.prometheus_interval seconds: step, loss, tokens/s, MFU, ETA, peak device "
            "memory, last checkpoint age (docs/site.md). \"\" = off."},
    {.name = "metrics.prometheus_interval", .type = CFGK_FLOAT,
     FIELD(metrics.prometheus_interval), .def = "15", .lo = 1, .hi = 86400,
     .doc = "Seconds between rewrites of the metrics.prometheus_dir file (also at every checkpoint "
            "save and at the end)."},

    {.name = "guard.window", .type = CFGK_INT, FIELD(guard.window), .def = "100", .ilo = 0,
     .ihi = 1000,
     .doc = "Steps in the rolling window of losses and gradient norms an outlier is judged "
            "against; judging starts once the window is full. 0 = no spike detection (a NaN or "
            "Inf loss or gradient is still never applied)."},
    {.name = "guard.method", .type = CFGK_ENUM, FIELD(guard.method), .def = "zscore",
     ENUM(guard_methods),
     .doc = "`zscore`: an outlier lies more than threshold standard deviations above the window "
            "mean; `multiplier`: above threshold x the window mean (LLM Foundry's KillLossSpike)."},
    {.name = "guard.threshold", .type = CFGK_FLOAT, FIELD(guard.threshold), .def = "6.0",
     .lo = 0, .lo_open = 1, NO_MAX, .doc = "The z-score or the multiplier of guard.method."},
    {.name = "guard.action", .type = CFGK_ENUM, FIELD(guard.action), .def = "rollback",
     ENUM(guard_actions),
     .doc = "How far to escalate: `warn` logs outliers (and still skips non-finite updates); "
            "`skip` also skips outlier updates; `rollback` also, after guard.patience consecutive "
            "outliers, restores the newest checkpoint older than the spike and skips the data "
            "that led to it."},
    {.name = "guard.patience", .type = CFGK_INT, FIELD(guard.patience), .def = "3", .ilo = 1,
     INT32_ONLY,
     .doc = "Consecutive outlier steps before a rollback (`rollback`), or before the run stops "
            "with exit 2 when they are all non-finite (`warn`, `skip`)."},
    {.name = "guard.max_rollbacks", .type = CFGK_INT, FIELD(guard.max_rollbacks), .def = "3",
     .ilo = 0, .ihi = 64,
     .doc = "Rollbacks allowed in a run (counted across resumes); one more needed stops the run "
            "with exit 2 and a report in run_dir/guard-report.json."},

    {.name = "health.fingerprint_interval", .type = CFGK_INT, FIELD(health.fingerprint_interval),
     .def = "auto", .ilo = 0, INT32_ONLY, .auto_word = "auto", .auto_as = -1,
     .doc = "Steps between fingerprint comparisons (docs/health.md): every rank hashes (CRC32C) "
            "its weights, optimizer state and reduced gradients, the ranks that hold the same "
            "bytes compare, and state without a replica is hashed again before the next update; "
            "a mismatch names tensor, step, ranks and nodes and stops the run with exit 87. "
            "Every checkpoint save compares too. 0 = off (checkpoints then say not compared). "
            "`\"auto\"`: 10 with `device = \"cpu\"`; with `device = \"cuda\"` only at start and "
            "at every save (each check copies the state to the host: docs/health.md \"On the "
            "GPU\")."},
    {.name = "health.replay_interval", .type = CFGK_INT, FIELD(health.replay_interval),
     .def = "100", .ilo = 0, INT32_ONLY,
     .doc = "Steps between deterministic replays (docs/health.md \"Deterministic replay\"): each "
            "rank's first microbatch is recomputed by its neighbour and the gradients' "
            "fingerprints compared bit for bit; a third rank and a second try tell a transient "
            "fault (the step goes on with the microbatches recomputed) from a persistent one "
            "(exit 87). A spike guard's outlier replays the step's whole batches at once (a real "
            "spike: the data). ddp, zero1, zero3, hsdp and LoRA on the CPU, and tensor, context "
            "or expert groups (each recomputing the group before it's work together; two groups "
            "at least), pipelines (each recomputing the pipeline before it's batch through the "
            "schedule; two at least), the lm objective, dpo and grpo (their pass); 0 = off "
            "(neither)."},
};
const int cfgtab_n_keys = NELEM(cfgtab_keys);

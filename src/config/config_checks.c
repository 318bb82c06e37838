/* config_checks.c — the checks across keys of config_load (config_load_int.h): the model's and the
 * batch's sizes, the objectives', LoRA's, the schedule's, Muon's, FP8's and the data's rules, each
 * error with the key's file:line; the rules as docs/config.md lists them.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cuda/cuda_shapes.h" /* the head sizes the GPU's attention has kernels for */
#include "config/config_icl.h"
#include "config/config_load_int.h"
#include "config/config_mix.h"
#include "config/config_table.h"

/* Listed in docs/config.md; keep in step with cfgload_validate(). */
const char *const cfgload_cross_rules[] = {
    "`model.d_model` is a multiple of `model.n_head` (and `n_head <= d_model`).",
    "`global_batch` is a multiple of `micro_batch`; at launch with W ranks, `global_batch` is a "
    "multiple of W and `global_batch / W` a multiple of `micro_batch` (`\"auto\"` picks a divisor).",
    "With `model.pos = \"learned\"`, `model.max_seq_len` is 0 or >= `seq_len`.",
    "`model.expansion_ratio x model.d_model` (the MLP width) is a whole number.",
    "`model.vocab_size` rounded up to a multiple of `model.vocab_multiple` fits in 31 bits.",
    "`eval_interval` other than `0ba` needs `data.val` or `icl_tasks`.",
    "With `model.attn_mask = \"document\"`, `model.eot_token` is below `model.vocab_size`.",
    "With `model.activation_checkpointing` other than `none`, "
    "`model.activation_checkpointing_layers` is -1 (all) or 1 .. `model.n_layer`; "
    "`model.activation_checkpointing_range` is `\"A-B\"` with 0 <= A <= B < `model.n_layer`, given "
    "only with `activation_checkpointing_layers` = -1.",
    "With `parallel.sharding = \"hsdp\"`, `parallel.replica_group` (0: the ranks of one node) "
    "divides the rank count (checked at start, when the rank count is known).",
    "`device = \"cuda\"` needs a build with the CUDA backend (checked at start), and a head size "
    "(`model.head_dim`, else `d_model / n_head`) of " TCU_ATTENTION_HEAD_SIZES ": the sizes the "
    "GPU's attention kernels are built for.",
    "`parallel.expert` above 1 needs a MoE model (`model.moe_experts` a multiple of it), and "
    "divides the rank count (checked at start).",
    "`objective = \"dpo\"` needs an even `micro_batch` (not `\"auto\"`) and no `data.mix`; "
    "`global_batch / W` is even (checked at start); "
    "`dpo.reference = \"base\"` needs `lora.rank` > 0.",
    "`objective = \"grpo\"` needs a `micro_batch` in prompts (not `\"auto\"`), no `data.mix` and "
    "`parallel.expert = 1`; `reward.kind = \"command\"` needs `reward.command`, `\"regex\"` "
    "`reward.regex`; `grpo.overlong_buffer` is at most `grpo.max_new_tokens`; `grpo.reference = "
    "\"base\"` needs `lora.rank` > 0; `grpo.reference_checksum` is \"\" or `crc32c:` and 8 "
    "lowercase hex digits.",
    "With `lora.rank` above 0: `lora.targets` names each of q, k, v, o, gate, up, down, "
    "in_proj_qkvz, in_proj_ba, out_proj, attn_gate, q_a_proj, q_b_proj, kv_a_proj_with_mqa, "
    "kv_b_proj at most once (gate and up with `model.mlp = \"swiglu\"`; no MLP target in a MoE "
    "model; the in_proj/out_proj ones with linear_attention layers, attn_gate with "
    "`model.attn_output_gate`; the last four with `model.kv_lora_rank` > 0, which has no k or v, "
    "and q_a_proj/q_b_proj in place of q with `model.q_lora_rank` > 0), with "
    "`parallel.expert = 1`; on multi-head latent attention not with `parallel.context` or "
    "`parallel.pipeline` > 1 or an `objective` other than \"lm\". "
    "`lora.base_checksum` is \"\" or "
    "`crc32c:` and 8 lowercase hex digits.",
    "Exactly one of `data.train` and `data.mix`; `data.curriculum` needs `data.mix`, its phases "
    "in increasing `at`.",
    "`data.cache_limit` is a size: `500M`, `20G`, `1.5T` (powers of 1024) or `0`.",
    "`optim.muon.*` keys only with `optim.name = \"muon\"`; Muon not with `lora.rank` > 0.",
    "`precision.fp8` other than `none` needs `device = \"cuda\"` (the CPU is the fp32 oracle) and "
    "a GPU of compute capability 8.9 or newer (checked at start); `rowwise` is not built yet. "
    "`model.activation_compression = \"fp8\"` needs `device = \"cuda\"`.",
    "`model.layer_types` lists `sliding_attention` / `full_attention` / `linear_attention` "
    "only (linear: `model.linear_num_value_heads` a multiple of `model.linear_num_key_heads`), "
    "at most `model.n_layer` of them (a shorter list repeats), and names sliding layers only "
    "with `model.sliding_window` > 0. With `device = \"cuda\"`, `linear_attention` layers take "
    "neither `parallel.context` > 1, `objective = \"grpo\"`, `lora.rank` > 0 nor "
    "`precision.fp8`, and head sizes `model.linear_key_head_dim`, `model.linear_value_head_dim` "
    "of 16, 32, .. 128. `model.norm_placement` other than `pre` needs `model.norm = "
    "\"rmsnorm\"`; `model.embed_scale = \"sqrt_d_model\"` needs positions other than "
    "`learned`. The other variants (windows, sinks, `model.query_pre_attn_scalar`, soft caps, "
    "the RoPE variants) run on both devices and under context parallelism.",
    "`model.moe_router_bias`, `model.moe_expert_bias`, `model.moe_act = \"gptoss\"` (gpt-oss's "
    "experts) and `model.moe_shared_gate` (Qwen3-Next's, which needs `model.moe_shared_size` > "
    "0) need a MoE model (`model.moe_experts` > 0).",
    "Every refusal of these rules and the others, with its message and test: docs/limits.md.",
};
const size_t cfgload_n_cross_rules = sizeof cfgload_cross_rules / sizeof *cfgload_cross_rules;

/* "file:line: " of the key, "--set key=value: " for an override, "file: " for a default. */
const char *cfgload_where(const load_ctx *c, const char *name, char *buf, size_t n) {
    const cfgtab_key *k = cfgtab_find(name);
    int i = k ? key_index(k) : 0;
    if (k && c->given[i] && c->line[i] == -2) /* filled from a model's files */
        snprintf(buf, n, "%s: ", c->file[i]);
    else if (k && c->given[i] && c->line[i] > 0)
        snprintf(buf, n, "%s:%d: ", c->file[i] ? c->file[i] : c->path, c->line[i]);
    else if (k && c->given[i])
        snprintf(buf, n, "--set %.500s: ", c->set_arg[i]);
    else
        snprintf(buf, n, "%s%s", c->path ? c->path : "", c->path ? ": " : "");
    return buf;
}

/* multi-head latent attention's heads, which the CUDA backend pads to a kernel's size (src/gpu/
 * gpu_mla.c): any up to the largest, 256 */
static int mla_padded(const tsr_model_config *m, int hs) {
    return m->kv_lora_rank > 0 && hs <= 256 && m->v_head_dim <= 256;
}

static int plan_only; /* config_plan_only */

void config_plan_only(int on) { plan_only = on; }

/* A device = "cuda" refusal for a kernel not built yet: an error at a start, and a warning (the
 * plan prices the GPU target) under config_plan_only for a model of the kind whose CUDA path is
 * being built, multi-head latent attention's (issue 84 item 9); a plain model's head size
 * without a kernel is refused by --plan too (the user's to change, said before the job queues) */
static void kernel_missing(load_ctx *c, const char *where, const char *what) {
    if (plan_only && c->cfg->model.kv_lora_rank > 0) {
        tsr_warn("%s%s; planned anyway (--plan/--time/--gpu-mem/--fit price the GPU target), a "
                 "start refuses it", where, what);
        return;
    }
    tsr_error("%s%s", where, what);
    c->errors++;
}

/* device = "cuda": the attention kernels' head sizes (dims.hs: MLA's query/key heads of
 * qk_nope_head_dim + qk_rope_head_dim) */
static void cuda_head_size(load_ctx *c, const tsr_model_dims *dims) {
    const tsr_model_config *m = &c->cfg->model;
    char at[1200], how[128], what[400];
    if (c->cfg->device != TSR_DEVICE_CUDA || tcu_attention_head_size_ok(dims->hs) ||
        mla_padded(m, dims->hs))
        return;
    /* here, not at the GPU's start: --plan on a login node says so before the job queues */
    const char *key = m->kv_lora_rank      ? "model.qk_nope_head_dim"
                      : m->head_dim > 0 ? "model.head_dim" : "model.n_head";
    if (m->kv_lora_rank)
        snprintf(how, sizeof how, "model.qk_nope_head_dim + model.qk_rope_head_dim = %d + %d = %d",
                 m->qk_nope_head_dim, m->qk_rope_head_dim, dims->hs);
    else if (m->head_dim > 0) snprintf(how, sizeof how, "model.head_dim = %d", dims->hs);
    else snprintf(how, sizeof how, "model.d_model / model.n_head = %d / %d = %d", m->d_model,
                  m->n_head, dims->hs);
    snprintf(what, sizeof what, "device = \"cuda\": head size %s has no attention kernel on the "
             "GPU: it must be %s (change %s, or use device = \"cpu\")", how,
             m->kv_lora_rank ? "at most 256, as model.v_head_dim (multi-head latent attention's "
                               "heads are padded to " TCU_ATTENTION_HEAD_SIZES ")"
                             : TCU_ATTENTION_HEAD_SIZES,
             m->kv_lora_rank ? "the MLA head sizes" : "model.head_dim or model.n_head");
    kernel_missing(c, cfgload_where(c, key, at, sizeof at), what);
}

/* The model's and the batch's sizes against each other. */
static void validate_shapes(load_ctx *c) {
    const tsr_config *g = c->cfg;
    const tsr_model_config *m = &g->model;
    char at[1200];
    tsr_model_dims dims;
    const char *dkey;
    char dwhy[400];
    if (config_model_dims(m, &dims, &dkey, dwhy, sizeof dwhy) != 0) {
        tsr_error("%s%s", cfgload_where(c, dkey, at, sizeof at), dwhy);
        c->errors++;
    } else cuda_head_size(c, &dims);
    if (g->micro_batch > 0 && g->global_batch % g->micro_batch != 0) { /* 0 = auto */
        tsr_error("%sglobal_batch = %lld is not divisible by micro_batch = %lld: choose a "
                  "global_batch that is a multiple of micro_batch (times the number of ranks)",
                  cfgload_where(c, "global_batch", at, sizeof at), (long long)g->global_batch,
                  (long long)g->micro_batch);
        c->errors++;
    }
    if (m->pos == TSR_POS_LEARNED && m->max_seq_len > 0 && m->max_seq_len < g->seq_len) {
        tsr_error("%smodel.max_seq_len = %d is smaller than seq_len = %lld: with model.pos = "
                  "\"learned\" the position table needs max_seq_len >= seq_len (or 0 = seq_len)",
                  cfgload_where(c, "model.max_seq_len", at, sizeof at), m->max_seq_len,
                  (long long)g->seq_len);
        c->errors++;
    }
    int64_t vp = ((int64_t)m->vocab_size + m->vocab_multiple - 1) / m->vocab_multiple * m->vocab_multiple;
    if (vp > INT_MAX) {
        tsr_error("%smodel.vocab_size = %d rounded up to a multiple of model.vocab_multiple = %d is "
                  "%lld, more than %d rows: lower vocab_multiple",
                  cfgload_where(c, "model.vocab_size", at, sizeof at), m->vocab_size, m->vocab_multiple,
                  (long long)vp, INT_MAX);
        c->errors++;
    }
}

/* objective = grpo (docs/rl.md): what it needs, and what does not run with it yet */
static void validate_grpo(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->objective != TSR_OBJ_GRPO) return;
    struct { int bad; const char *key, *why; } rules[] = {
        {g->micro_batch == 0, "micro_batch", "objective = \"grpo\" counts micro_batch in prompts "
         "(each with its grpo.group_size completions): give a number, \"auto\" is not supported"},
        {g->data.n_streams > 0, "objective", "objective = \"grpo\": data.mix is not supported "
         "with it (data.train holds the prompts)"},
        {g->expert > 1, "parallel.expert", "objective = \"grpo\" with expert parallelism is not "
         "supported yet: set parallel.expert = 1"},
        {g->context > 1, "parallel.context", "objective = \"grpo\" with context parallelism is "
         "not supported yet (its rollouts are generated whole on each rank): set "
         "parallel.context = 1"},
        {g->reward.kind == TSR_REWARD_COMMAND && !g->reward.command[0], "reward.command",
         "reward.kind = \"command\" needs the program to run: set reward.command"},
        {g->reward.kind == TSR_REWARD_REGEX && !g->reward.regex[0], "reward.regex",
         "reward.kind = \"regex\" needs reward.regex"},
        {g->grpo.overlong_buffer > g->grpo.max_new_tokens, "grpo.overlong_buffer",
         "grpo.overlong_buffer is longer than grpo.max_new_tokens"},
        {g->device == TSR_DEVICE_CUDA && g->grpo.kl_coef > 0 && g->lora.rank == 0,
         "grpo.kl_coef", "objective = \"grpo\" on device = \"cuda\": a KL term to the initial "
         "weights is not supported there yet (LoRA's base reference is): set grpo.kl_coef = 0 "
         "or use LoRA"},
        {g->grpo.reference == TSR_GRPO_REF_BASE && g->lora.rank == 0, "grpo.reference",
         "grpo.reference = \"base\" needs LoRA (lora.rank > 0): the base is the model with the "
         "adapters off; full finetuning takes \"initial\" (or \"auto\")"},
    };
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (rules[k].bad) {
            tsr_error("%s%s (docs/rl.md)", cfgload_where(c, rules[k].key, at, sizeof at), rules[k].why);
            c->errors++;
        }
}

/* LoRA (docs/lora.md): the targets against the model, and what does not run with it yet. */
static void validate_lora(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200], why[400];
    unsigned mask;
    const char *sums[3][2] = {{"lora.base_checksum", g->lora.base_checksum},
                              {"dpo.reference_checksum", g->dpo.reference_checksum},
                              {"grpo.reference_checksum", g->grpo.reference_checksum}};
    for (int k = 0; k < 3; k++) {
        const char *cs = sums[k][1];
        if (cs[0] && (strncmp(cs, "crc32c:", 7) != 0 || strlen(cs) != 15 ||
                      strspn(cs + 7, "0123456789abcdef") != 8)) {
            tsr_error("%s%s = \"%s\": expected \"crc32c:\" and 8 lowercase hex digits, as the "
                      "trainer writes it (or \"\")", cfgload_where(c, sums[k][0], at, sizeof at),
                      sums[k][0], cs);
            c->errors++;
        }
    }
    if (g->objective == TSR_OBJ_DPO && g->lora.rank == 0 && g->dpo.reference == TSR_DPO_REF_BASE) {
        tsr_error("%sdpo.reference = \"base\" needs LoRA (lora.rank > 0): the base is the model "
                  "with the adapters off; full finetuning takes dpo.reference = \"precomputed\" "
                  "(or \"auto\"; docs/dpo.md)", cfgload_where(c, "dpo.reference", at, sizeof at));
        c->errors++;
    }
    if (g->objective == TSR_OBJ_DPO && (g->micro_batch == 0 || g->micro_batch % 2 != 0)) {
        tsr_error("%smicro_batch = %lld: objective = \"dpo\" runs whole pairs (chosen, rejected) "
                  "in a microbatch: give an even micro_batch (\"auto\" is not supported with dpo)",
                  cfgload_where(c, "micro_batch", at, sizeof at), (long long)g->micro_batch);
        c->errors++;
    }
    if (g->objective == TSR_OBJ_DPO && g->data.n_streams > 0) {
        tsr_error("%sobjective = \"dpo\": data.mix is not supported with it yet",
                  cfgload_where(c, "objective", at, sizeof at));
        c->errors++;
    }
    if (g->lora.rank == 0) return;
    if (config_lora_targets(&g->model, g->lora.targets, &mask, why, sizeof why) != 0) {
        tsr_error("%slora.targets = \"%s\": %s", cfgload_where(c, "lora.targets", at, sizeof at),
                  g->lora.targets, why);
        c->errors++;
    }
    if (g->expert > 1) {
        tsr_error("%slora.rank = %lld: LoRA with expert parallelism is not supported yet; set "
                  "parallel.expert = 1", cfgload_where(c, "lora.rank", at, sizeof at),
                  (long long)g->lora.rank);
        c->errors++;
    }
}

/* optim.decay: the final decay of optim.schedule = "wsd" (docs/training.md): a fraction or a
 * duration. */
static void validate_schedule(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    int md = key_index(cfgtab_find("max_duration"));
    c->cfg->max_duration_set = c->given[md] && c->line[md] == -1;
    /* (another schedule ignores it: every effective config, config.cfg and a checkpoint's,
     * names every key) */
    if (g->optim.schedule != TSR_SCHED_WSD) return;
    if (decay_to_steps(g->optim.decay, 1, 1, 1, 1) < 0) {
        tsr_error("%soptim.decay = \"%s\": expected a fraction of max_duration in (0, 1] (\"0.2\") "
                  "or a duration (\"200ba\", \"1e9tok\", \"0.5ep\")",
                  cfgload_where(c, "optim.decay", at, sizeof at), g->optim.decay);
        c->errors++;
    }
}

/* optim.name = muon (docs/training.md "Muon"): its keys only with it, and not with LoRA (the
 * references orthogonalise full weight matrices, not adapters). */
static void validate_muon(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->optim.name != TSR_OPTIM_MUON) {
        for (int i = 0; i < cfgtab_n_keys; i++) {
            if (!c->given[i] || strncmp(cfgtab_keys[i].name, "optim.muon.", 11) != 0) continue;
            tsr_error("%s%s is a Muon setting, but optim.name = \"adamw\": set optim.name = "
                      "\"muon\" to use Muon, or remove %s", cfgload_where(c, cfgtab_keys[i].name, at,
                      sizeof at), cfgtab_keys[i].name, cfgtab_keys[i].name);
            c->errors++;
        }
        return;
    }
    if (g->lora.rank > 0) {
        tsr_error("%soptim.name = \"muon\" with lora.rank = %lld: Muon orthogonalises whole "
                  "weight matrices, and LoRA trains low-rank adapters beside frozen ones (no "
                  "reference implementation applies Muon to them; docs/training.md): finetune "
                  "the adapters with optim.name = \"adamw\", or train the full model with Muon",
                  cfgload_where(c, "optim.name", at, sizeof at), (long long)g->lora.rank);
        c->errors++;
    }
}

/* A GPU-only setting on device = "cpu": the error naming the key and its value (what the CPU is
 * and what the key needs), counted; 1 when refused. */
static int refuse_on_cpu(load_ctx *c, const char *key, const char *value, const char *off) {
    char at[1200];
    if (c->cfg->device != TSR_DEVICE_CPU) return 0;
    tsr_error("%s%s = \"%s\" with device = \"cpu\": the CPU is the fp32 oracle and trains in fp32 "
              "only; %s needs device = \"cuda\" (or set %s = \"%s\")",
              cfgload_where(c, key, at, sizeof at), key, value, key, key, off);
    c->errors++;
    return 1;
}

/* precision.fp8 (docs/cuda.md "FP8") and model.activation_compression: a GPU's, never the
 * CPU's; what is not built yet refused */
static void validate_fp8(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->model.activation_compression == TSR_ACTCOMP_FP8)
        refuse_on_cpu(c, "model.activation_compression", "fp8", "none");
    if (g->precision.fp8 == TSR_FP8_NONE) return;
    const char *mode = g->precision.fp8 == TSR_FP8_ROWWISE ? "rowwise" : "tensorwise";
    if (refuse_on_cpu(c, "precision.fp8", mode, "none")) return;
    if (g->precision.fp8 == TSR_FP8_ROWWISE) {
        tsr_error("%sprecision.fp8 = \"rowwise\" is not built yet (docs/cuda.md \"FP8\"): use "
                  "\"tensorwise\" or \"none\"", cfgload_where(c, "precision.fp8", at, sizeof at));
        c->errors++;
    }
}

/* Sliding windows, attention sinks and the other variants of docs/models.md
 * (config_variant_key): the CPU's decoder runs them all, the ring of context parallelism too (its
 * blocks take the attention variants; the linear layers pass their state along the ranks:
 * docs/deltanet.md "Context parallelism"); the CUDA backend those of cuda_variants. */
/* Which model variants device = "cuda" runs (docs/cuda.md "Model variants", "Attention
 * variants"): 1 where the CUDA backend has the kernels, 0 where it has not yet. One line per
 * variant: flip it when its kernels are in. The linear layers train on CUDA; what they do not run
 * there yet is validate_linear_cuda's. */
static const struct {
    tsr_model_variant v;
    int cuda;
} cuda_variants[TSR_VAR_COUNT] = {
    {TSR_VAR_LINEAR, 1},         {TSR_VAR_ATTN_GATE, 1},      {TSR_VAR_WINDOW, 1},
    {TSR_VAR_SINKS, 1},          {TSR_VAR_QPAS, 1},           {TSR_VAR_NORM_PLACEMENT, 1},
    {TSR_VAR_QKN_PROJECTION, 1}, {TSR_VAR_EMBED_SCALE, 1},    {TSR_VAR_GEGLU, 1},
    {TSR_VAR_ATTN_SOFTCAP, 1},   {TSR_VAR_FINAL_SOFTCAP, 1},  {TSR_VAR_ROPE_SCALING, 1},
    {TSR_VAR_ROPE_LOCAL, 1},     {TSR_VAR_PARTIAL_ROTARY, 1}, {TSR_VAR_NOPE, 1},
    {TSR_VAR_ROUTER_BIAS, 1},    {TSR_VAR_EXPERT_BIAS, 1},    {TSR_VAR_MOE_ACT, 1},
    {TSR_VAR_SHARED_GATE, 1},    {TSR_VAR_MLA, 1},            {TSR_VAR_DS_ROUTER, 1},
};

/* The first variant of the model that device = "cuda" does not run yet, refused with its key */
static void validate_attn_variants(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->device != TSR_DEVICE_CUDA) return;
    for (int i = 0; i < TSR_VAR_COUNT; i++) {
        const char *key = config_variant_key(&g->model, cuda_variants[i].v);
        char what[300];
        if (!key || cuda_variants[i].cuda) continue;
        snprintf(what, sizeof what, "%s: device = \"cuda\" does not run this model variant yet "
                 "(no CUDA kernel for it: docs/cuda.md \"Model variants\"): use device = "
                 "\"cpu\", or a model without it", key);
        kernel_missing(c, cfgload_where(c, key, at, sizeof at), what);
        return;
    }
}

/* device = "cuda" with linear_attention layers (docs/deltanet.md "CUDA"): training and
 * evaluation run there; the paths that carry the layer's state and convolution tail (context
 * parallelism's ranks, the decode step of GRPO's rollouts) are the CPU's only so far, LoRA on
 * the layer's projections is not checked there yet, and precision.fp8 would leave the layer's
 * projections in bf16 (they are not decoder.c's dec_linear) while the run says FP8 */
static void validate_linear_cuda(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->device != TSR_DEVICE_CUDA || config_linear_layers(&g->model) == 0) return;
    const struct { int bad; const char *key, *alt; } rules[] = {
        {g->context > 1, "parallel.context", ""},
        {g->objective == TSR_OBJ_GRPO, "objective", ""},
        {g->lora.rank > 0, "lora.rank", ""},
        {g->precision.fp8 != TSR_FP8_NONE, "precision.fp8", ", or precision.fp8 = \"none\""},
    };
    const struct { int v; const char *key; } dims[] = {
        {g->model.linear_key_head_dim, "model.linear_key_head_dim"},
        {g->model.linear_value_head_dim, "model.linear_value_head_dim"},
    };
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
        if (dims[k].v < 16 || dims[k].v > 128 || dims[k].v % 16) {
            tsr_error("%s%s = %d: device = \"cuda\" runs the Gated DeltaNet core at head sizes "
                      "16, 32, .. 128 (multiples of 16; docs/deltanet.md \"CUDA\"): change it, "
                      "or use device = \"cpu\"", cfgload_where(c, dims[k].key, at, sizeof at),
                      dims[k].key, dims[k].v);
            c->errors++;
        }
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (rules[k].bad) {
            tsr_error("%s%s: device = \"cuda\" with linear_attention layers (model.layer_types) "
                      "does not run this yet (context parallelism's state passing, GRPO's "
                      "decoding and LoRA on those layers are the CPU's, and their projections "
                      "have no FP8 path: docs/deltanet.md \"CUDA\"): use device = \"cpu\"%s",
                      cfgload_where(c, rules[k].key, at, sizeof at), rules[k].key, rules[k].alt);
            c->errors++;
        }
}

/* model.num_nextn_predict_layers > 0 (multi-token prediction; docs/models.md "Multi-token
 * prediction"): the modes it does not run with yet, each refused naming both keys (on the CPU
 * and device = "cuda" alike: docs/cuda.md "Multi-token prediction") */
static void validate_mtp(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    const int D = g->model.num_nextn_predict_layers;
    if (D == 0) return;
    const tsr_cfg_pair rules[] = {
        {g->tensor > 1, "parallel.tensor", "> 1"},
        {g->pipeline > 1, "parallel.pipeline", "> 1"},
        {g->lora.rank > 0, "lora.rank", "> 0"},
        {g->objective != TSR_OBJ_LM, "objective", "other than \"lm\""},
        {g->model.norm != TSR_NORM_RMSNORM, "model.norm", "other than \"rmsnorm\""},
    };
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (rules[k].bad) {
            tsr_error("%s%s %s with model.num_nextn_predict_layers = %d: multi-token prediction "
                      "does not run with it yet (docs/models.md \"Multi-token prediction\"): "
                      "change %s, or set model.num_nextn_predict_layers = 0",
                      cfgload_where(c, rules[k].key, at, sizeof at), rules[k].key,
                      rules[k].value, D, rules[k].key);
            c->errors++;
        }
}

/* parallel.tensor = T (docs/parallelism.md "Tensor parallelism"): a split of this model, and
 * not with a mode it does not run with yet (both keys named) */
static void validate_tensor(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200], why[400], valid[400];
    const char *key, *value;
    if (g->tensor <= 1) return;
    if (config_tensor_split(g, (int)g->tensor, &key, why, sizeof why) != 0) {
        config_tensor_valid(g, valid, sizeof valid);
        tsr_error("%sparallel.tensor = %lld: %s (each rank holds whole heads, rows or tokens "
                  "of %s); the values of parallel.tensor that split this model: %s",
                  cfgload_where(c, "parallel.tensor", at, sizeof at), (long long)g->tensor, why,
                  key, valid);
        c->errors++;
    }
    if ((key = config_tensor_pair(g, &value)) != NULL) {
        tsr_error("%sparallel.tensor = %lld with %s %s: tensor parallelism does not run with "
                  "it yet (docs/parallelism.md \"What composes with tensor parallelism\"): set "
                  "parallel.tensor = 1, or change %s",
                  cfgload_where(c, "parallel.tensor", at, sizeof at), (long long)g->tensor, key,
                  value, key);
        c->errors++;
    }
}

/* parallel.pipeline = P (docs/pipeline.md): its keys against the model (the stages, the hand
 * cut), and not with a mode it does not run with yet (both keys named) */
static void validate_pipeline(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200], why[1200];
    const char *key, *value;
    if (g->pipeline <= 1) return;
    if (config_pipeline_check(g, &key, why, sizeof why) != 0) {
        tsr_error("%s%s", cfgload_where(c, key, at, sizeof at), why);
        c->errors++;
    }
    if ((key = config_pipeline_pair(g, &value)) != NULL) {
        tsr_error("%sparallel.pipeline = %lld with %s %s: pipeline parallelism does not run with "
                  "it yet (docs/pipeline.md \"What composes with the pipeline\"): set "
                  "parallel.pipeline = 1, or change %s",
                  cfgload_where(c, "parallel.pipeline", at, sizeof at), (long long)g->pipeline, key,
                  value, key);
        c->errors++;
    }
    if ((key = config_pipeline_cuda_pair(g, &value)) != NULL) {
        tsr_error("%sparallel.pipeline = %lld with device = \"cuda\" and %s %s: pipeline "
                  "parallelism on the GPU does not run with it yet (docs/parallelism.md "
                  "\"Pipeline parallelism\"): change %s, or set device = \"cpu\"",
                  cfgload_where(c, "parallel.pipeline", at, sizeof at), (long long)g->pipeline,
                  key, value, key);
        c->errors++;
    }
}

/* Options that need another key: evaluations, the document mask, activation checkpointing. */
static void validate_options(load_ctx *c) {
    const tsr_config *g = c->cfg;
    const tsr_model_config *m = &g->model;
    char at[1200];
    if (g->eval_interval.value > 0 && g->data.val[0] == '\0' && g->n_icl == 0) {
        char d[96];
        duration_format(d, sizeof d, g->eval_interval);
        tsr_error("%seval_interval = \"%s\" but there is nothing to evaluate: set data.val = "
                  "\"<dataset dir>\", give icl_tasks, or set eval_interval = \"0ba\"",
                  cfgload_where(c, "eval_interval", at, sizeof at), d);
        c->errors++;
    }
    if (m->attn_mask == TSR_MASK_DOCUMENT && (m->eot_token < 0 || m->eot_token >= m->vocab_size)) {
        /* the same rule as model_config_check, here with the key's file:line */
        tsr_error("%smodel.eot_token = %d is not a token id of model.vocab_size = %d: with "
                  "model.attn_mask = \"document\" it must be in [0, %d) (the tokenizer's "
                  "<|endoftext|> id; GPT-2's is 50256)", cfgload_where(c, "model.eot_token", at, sizeof at),
                  m->eot_token, m->vocab_size, m->vocab_size);
        c->errors++;
    }
    if (g->expert > 1 && m->moe_experts == 0) {
        tsr_error("%sparallel.expert = %lld: expert parallelism needs a mixture-of-experts model "
                  "(model.moe_experts > 0), and this one is dense: set parallel.expert = 1",
                  cfgload_where(c, "parallel.expert", at, sizeof at), (long long)g->expert);
        c->errors++;
    } else if (g->expert > 1 && m->moe_experts % g->expert != 0) {
        tsr_error("%sparallel.expert = %lld: expert parallelism splits the experts over that many "
                  "ranks, so model.moe_experts (%d) must be a multiple of it; or set "
                  "parallel.expert = 1", cfgload_where(c, "parallel.expert", at, sizeof at),
                  (long long)g->expert, m->moe_experts);
        c->errors++;
    }
    int ck_lo, ck_n;
    const char *ck_key;
    char ck_why[400];
    if (config_actckpt_layers(m, &ck_lo, &ck_n, &ck_key, ck_why, sizeof ck_why) != 0) {
        tsr_error("%s%s", cfgload_where(c, ck_key, at, sizeof at), ck_why);
        c->errors++;
    }
    validate_lora(c);
    validate_muon(c);
    validate_schedule(c);
    validate_grpo(c);
    validate_fp8(c);
    validate_attn_variants(c);
    validate_linear_cuda(c);
    validate_tensor(c);
    validate_pipeline(c);
    validate_mtp(c);
}

/* The data lists: data.mix or data.train, curriculum order, the cache limit. */
static void validate_data(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (c->mix_line && c->present[key_index(cfgtab_find("data.train"))]) {
        tsr_error("%s:%d: data.mix and data.train are both given: train on one dataset with "
                  "data.train, or on several with data.mix", c->mix_file, c->mix_line);
        c->errors++;
    }
    for (int i = 0; i < g->data.n_phases; i++) {
        const tsr_phase_config *ph = &g->data.phases[i], *prev = i ? ph - 1 : NULL;
        int comparable = prev && (ph->at_percent >= 0) == (prev->at_percent >= 0) &&
                         (ph->at_percent >= 0 || ph->at.unit == prev->at.unit);
        double a = ph->at_percent >= 0 ? ph->at_percent : ph->at.value;
        double b = prev ? (prev->at_percent >= 0 ? prev->at_percent : prev->at.value) : -1;
        if (comparable && a <= b) {
            tsr_error("%s: data.curriculum[%d] starts at or before data.curriculum[%d]: list the "
                      "phases in increasing `at`", c->mix_file, i, i - 1);
            c->errors++;
        }
    }
    if (size_parse(g->data.cache_limit, &c->cfg->data.cache_limit_bytes) != 0) {
        tsr_error("%sdata.cache_limit = \"%s\": expected a size such as \"500M\", \"20G\", "
                  "\"1.5T\" (powers of 1024) or \"0\" (no limit)",
                  cfgload_where(c, "data.cache_limit", at, sizeof at), g->data.cache_limit);
        c->errors++;
    }
}

/* The cross-key rules (cfgload_cross_rules above), each error with the key's file:line. */
void cfgload_validate(load_ctx *c) {
    validate_shapes(c);
    validate_options(c);
    validate_data(c);
}

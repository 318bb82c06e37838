/* hf_llama.c — LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM (the
 * rows), and the config.json keys of LlamaConfig that the whole Llama family shares: the sizes,
 * the gate's activation, rms_norm_eps, RoPE (hf_rope.c), the biases, sliding windows, the
 * variants (hf_variants.c), the experts (hf_moe.c); each class reads them by its row's data
 * (hf_family.h) and writes its own keys after them (its row's keys). Written: dropout 0 (tessera
 * trains without dropout, so a transformers finetune starts from the same function), the head's
 * tying. Read: a key that is absent takes transformers' default for it, as transformers itself
 * would do.
 */
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"

/* ---- the rows ---- */

/* Non-parameter buffers: layers.N.self_attn.rotary_emb.inv_freq (computed from config.json). */
static int rotary_buffer(const hf_family *f, const char *name) {
    const char *suf = ".rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suf);
    (void)f;
    return n > k && !strcmp(name + n - k, suf);
}

const hf_names hf_llama_names = {
    .layer = "layers.%ld.%n", .embed = "embed_tokens.weight", .up = "layers.0.mlp.up_proj.weight",
    .up_dim = 0, .keys = {"num_hidden_layers", "hidden_size", "vocab_size", "intermediate_size"},
    .context = "max_position_embeddings", .head_row = 1, .buffer = rotary_buffer};

/* LlamaConfig's pretraining_tp (1: no tensor-parallel emulation). */
static void llama_keys(hf_text *b, const tsr_model *m, const hf_family *f) {
    (void)m, (void)f;
    hfr_add(b, "  \"pretraining_tp\": 1,\n");
}

void hf_mistral_keys(hf_text *b, const tsr_model *m, const hf_family *f) {
    (void)m, (void)f;
    hfr_add(b, "  \"sliding_window\": null,\n");
}

void hf_qwen_keys(hf_text *b, const tsr_model *m, const hf_family *f) {
    (void)f;
    hfr_add(b, "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
            "  \"max_window_layers\": %d,\n", m->L);
}

/* Llama: the class of a model no other names. */
static int llama_claims(const tsr_model *m, const char **by) {
    (void)m, (void)by;
    return 1;
}

static int qwen2_claims(const tsr_model *m, const char **by) {
    (void)by;
    return m->cfg.qkv_bias && !m->cfg.bias;
}

static int qwen3_claims(const tsr_model *m, const char **by) {
    (void)by;
    return m->cfg.qk_norm;
}

/* defaults: vocab, hidden, MLP width, layers, heads, key/value heads, head_dim, sliding_window,
 * rope_theta, rms_norm_eps (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config) */
const hf_family hf_llama = {
    "llama", "LlamaForCausalLM", HF_LLAMA_ROW, .claims = llama_claims,
    .mlp = TSR_MLP_SWIGLU, .head_dim_key = 1, .bias = HF_BIAS_LLAMA, .window = HF_SW_NONE,
    .def = {32000, 4096, 11008, 32, 32, 0, 0, 4096, 10000, 1e-6}, .keys = llama_keys};
const hf_family hf_mistral = {
    "mistral", "MistralForCausalLM", HF_LLAMA_ROW,
    .mlp = TSR_MLP_SWIGLU, .head_dim_key = 1, .bias = HF_BIAS_NONE, .window = HF_SW_ALWAYS,
    .def = {32000, 4096, 14336, 32, 32, 8, 0, 4096, 10000, 1e-6}, .keys = hf_mistral_keys};
const hf_family hf_qwen2 = {
    "qwen2", "Qwen2ForCausalLM", HF_LLAMA_ROW, .claims = qwen2_claims,
    .mlp = TSR_MLP_SWIGLU, .head_dim_key = 1, .bias = HF_BIAS_QKV, .window = HF_SW_SWITCH,
    .def = {151936, 4096, 22016, 32, 32, 32, 0, 4096, 10000, 1e-6}, .keys = hf_qwen_keys};
const hf_family hf_qwen3 = {
    "qwen3", "Qwen3ForCausalLM", HF_LLAMA_ROW, .claims = qwen3_claims,
    .mlp = TSR_MLP_SWIGLU, .qk_norm = 1, .head_dim_key = 1, .bias = HF_BIAS_ATTN,
    .window = HF_SW_SWITCH, .def = {151936, 4096, 22016, 32, 32, 32, 128, 4096, 10000, 1e-6},
    .keys = hf_qwen_keys};

/* The attention_bias classes (q, k, v and o: model.attn_bias; no MLP biases). */
static const char *attn_need(const tsr_model_config *c, const hf_family *f) {
    const int qkv_only = c->qkv_bias && !c->bias && !c->attn_bias;
    if (c->qk_norm == f->qk_norm && !c->bias && !qkv_only) return NULL;
    return f->qk_norm ? "model.qk_norm = true, model.bias false and no model.qkv_bias without "
                        "model.attn_bias (attention_bias: biases on q, k, v and o)"
                      : "model.qk_norm and model.bias false and no model.qkv_bias without "
                        "model.attn_bias (attention_bias: biases on q, k, v and o)";
}

const char *hf_llama_need(const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    const int qkv_only = c->qkv_bias && !c->bias && !c->attn_bias;
    const int any = c->bias || c->qkv_bias || c->attn_bias;
    switch (f->bias) {
    case HF_BIAS_LLAMA: /* attention_bias (q, k, v, o): model.attn_bias, and mlp_bias: model.bias */
        return c->qk_norm || qkv_only ? "model.qk_norm = false and no model.qkv_bias without "
                                        "model.bias or model.attn_bias (q, k, v biases without an "
                                        "o_proj bias)" : NULL;
    case HF_BIAS_QKV: /* q, k, v biases always, none elsewhere */
        return c->qk_norm || !qkv_only ? "model.qkv_bias = true, model.bias and model.attn_bias "
                                         "false and model.qk_norm = false" : NULL;
    case HF_BIAS_ATTN:
        return attn_need(c, f);
    case HF_BIAS_GPTOSS: /* attention_bias = model.bias; the rest: the row's moe need */
        return NULL;
    default:
        if (f->qk_norm)
            return !c->qk_norm || any ? "model.qk_norm = true, model.bias, model.qkv_bias and "
                                        "model.attn_bias false" : NULL;
        return c->qk_norm || any ? "model.qk_norm, model.bias, model.qkv_bias and model.attn_bias "
                                   "false (no biases)" : NULL;
    }
}

/* ---- writing ---- */

/* The sizes, the activation, the norm's eps and RoPE. */
static void write_common(hf_text *b, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    char eps[32], theta[32];
    const int gemma = f->mlp == TSR_MLP_GEGLU_TANH;
    const int experts_width = f->experts && !strcmp(f->experts->width, "intermediate_size");
    hfr_add(b, "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n", m->V, m->C, experts_width ? m->FE : m->F, m->L,
            m->NH, m->KVH);
    if (f->head_dim_key) hfr_add(b, "  \"head_dim\": %d,\n", m->hs);
    hfr_add(b, "  \"%s\": \"%s\",\n", gemma ? "hidden_activation" : "hidden_act",
            gemma ? "gelu_pytorch_tanh" : "silu");
    hfr_add(b, "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n",
            hf_rope_context(m), hfr_double(eps, sizeof eps, c->norm_eps),
            hfr_double(theta, sizeof theta, c->rope_theta));
    hf_rope_write(b, c, f);
}

/* attention_bias (and LlamaConfig's mlp_bias) of the classes that have it. */
static void write_bias(hf_text *b, const tsr_model_config *c, const hf_family *f) {
    const char *attn = c->bias || c->attn_bias ? "true" : "false";
    if (f->bias == HF_BIAS_LLAMA)
        hfr_add(b, "  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n", attn,
                c->bias ? "true" : "false");
    else if (f->bias == HF_BIAS_ATTN || f->bias == HF_BIAS_GPTOSS)
        hfr_add(b, "  \"attention_bias\": %s,\n", attn);
}

static void llama_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    write_common(b, m, f);
    hfr_add(b, "  \"attention_dropout\": 0.0,\n");
    write_bias(b, &m->cfg, f);
    if (f->keys) f->keys(b, m, f);
    if (f->experts) hf_moe_write(b, m, f);
}

/* ---- checking ---- */

/* transformers' head_dim when config.json has none: the class's (Qwen3Config 128, Gemma 256,
 * GptOssConfig 64), else C / NH. */
static long default_head_dim(const hf_family *f, long C, long NH) {
    if (f->def.head_dim) return f->def.head_dim;
    return NH > 0 ? C / NH : 0;
}

/* Sliding-window attention: tessera attends to the whole causal context, so a window is accepted
 * only when it is no shorter than the run's context (then it changes nothing). */
static void check_window(hf_reader *c, const json_value *r, const tsr_model *m, const hf_family *f) {
    const int always = f->window == HF_SW_ALWAYS; /* no use_sliding_window switch */
    if (f->window == HF_SW_NONE || (!always && !hfr_bool(c, r, "use_sliding_window", 0))) return;
    long w = hfr_int(c, r, "sliding_window", f->def.window); /* null: -1 below; absent: the default */
    const json_value *v = hfr_member(r, "sliding_window");
    if ((v && v->type == JSON_NULL) || (!v && !f->def.window)) return; /* (Mixtral's default: none) */
    if (w < m->maxT)
        hfr_fault(c, TSR_EXIT_DATA, "sliding_window = %ld%s%s: tessera's attention sees the whole "
                  "causal context of %d tokens (model.max_seq_len, or seq_len when it is 0), and a "
                  "shorter window computes something else; null or a window >= the context is "
                  "accepted (a run with seq_len <= %ld and model.max_seq_len = 0 fits this one)", w,
                  v ? "" : " (transformers' default for this model_type)",
                  always ? "" : " with use_sliding_window = true", m->maxT, w);
}

/* LlamaConfig's attention_bias (ab) and mlp_bias: both model.bias, attention_bias alone
 * model.attn_bias; MLP biases alone tessera has not. */
static void check_llama_bias(hf_reader *c, const json_value *r, const tsr_model_config *mc, int ab) {
    int mb = hfr_bool(c, r, "mlp_bias", 0);
    if (mb && !ab)
        hfr_fault(c, TSR_EXIT_DATA, "attention_bias = false and mlp_bias = true: tessera's "
                  "model.bias puts biases on the MLP only together with q, k, v and o "
                  "(model.attn_bias on those alone); this mix has no tessera equivalent");
    hfr_same_bool(c, "mlp_bias", mb, "model.bias", mc->bias);
    if (!mb) hfr_same_bool(c, "attention_bias", ab, "model.attn_bias", mc->attn_bias);
    if (!ab) hfr_same_bool(c, "attention_bias", 0, "model.qkv_bias", mc->qkv_bias);
}

/* A class whose attention_bias puts biases on q, k, v and o (ab): model.attn_bias, no others. */
static void check_attn_bias(hf_reader *c, const tsr_model_config *mc, const hf_family *f, int ab) {
    if (mc->bias || (!ab && mc->qkv_bias))
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has %s, but this run has model.bias = "
                  "%s, model.qkv_bias = %s: set --set model.bias=false --set model.qkv_bias=false",
                  f->model_type, ab ? "biases on q, k, v and o only" : "no biases",
                  mc->bias ? "true" : "false", mc->qkv_bias ? "true" : "false");
    hfr_same_bool(c, "attention_bias", ab, "model.attn_bias", mc->attn_bias);
}

/* A class without attention_bias: no biases, or Qwen 2's on q, k and v. */
static void check_no_bias(hf_reader *c, const tsr_model_config *mc, const hf_family *f, int ab) {
    const int qkv = f->bias == HF_BIAS_QKV;
    if (ab)
        hfr_fault(c, TSR_EXIT_DATA, "attention_bias = true: %s has no attention_bias (its "
                  "attention has no biases, whatever the key says); only false or absent is "
                  "accepted", f->class_name);
    else if (mc->bias || mc->qkv_bias != qkv)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has %s, but this run has model.bias = "
                  "%s, model.qkv_bias = %s: set --set model.bias=false --set model.qkv_bias=%s",
                  f->model_type, qkv ? "biases on q, k and v only" : "no biases",
                  mc->bias ? "true" : "false", mc->qkv_bias ? "true" : "false",
                  qkv ? "true" : "false");
    else
        hfr_same_bool(c, "attention_bias", 0, "model.attn_bias", mc->attn_bias);
}

/* The run must have the biases and QK-norm of the class. */
static void check_bias(hf_reader *c, const json_value *r, const tsr_model_config *mc,
                       const hf_family *f) {
    int ab = f->bias == HF_BIAS_QKV ? 0 : hfr_bool(c, r, "attention_bias", f->bias == HF_BIAS_GPTOSS);
    if (f->bias == HF_BIAS_GPTOSS) { /* q, k, v and o biases (no dense MLP to hold others) */
        hfr_same_bool(c, "attention_bias", ab, "model.bias", mc->bias || mc->attn_bias);
        if (!ab) hfr_same_bool(c, "attention_bias", 0, "model.qkv_bias", mc->qkv_bias);
    } else if (f->bias == HF_BIAS_LLAMA) {
        check_llama_bias(c, r, mc, ab);
    } else if (f->bias == HF_BIAS_ATTN) {
        check_attn_bias(c, mc, f, ab);
    } else {
        check_no_bias(c, mc, f, ab);
    }
    if (mc->qk_norm != f->qk_norm)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" %s QK-norm, but this run has "
                  "model.qk_norm = %s: set --set model.qk_norm=%s", f->model_type,
                  f->qk_norm ? "has" : "has no", mc->qk_norm ? "true" : "false",
                  f->qk_norm ? "true" : "false");
}

/* The gate's activation: silu (SwiGLU), or Gemma's hidden_activation gelu_pytorch_tanh. */
static void check_act(hf_reader *c, const json_value *r, const hf_family *f) {
    if (f->mlp == TSR_MLP_GEGLU_TANH) {
        const char *act = hfr_str(c, r, "hidden_activation", "gelu_pytorch_tanh");
        if (strcmp(act, "gelu_pytorch_tanh") != 0)
            hfr_fault(c, TSR_EXIT_DATA, "hidden_activation = \"%s\": tessera's GeGLU gates with the "
                      "tanh GELU (gelu_pytorch_tanh) only", act);
        return;
    }
    const char *act = hfr_str(c, r, "hidden_act", "silu");
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        hfr_fault(c, TSR_EXIT_DATA, "hidden_act = \"%s\": tessera's SwiGLU gates with silu only", act);
}

/* The model's kind (RoPE, RMSNorm, the class's gated MLP): 0, or a fault. */
static int check_kind(hf_reader *c, const tsr_model_config *mc, const hf_family *f) {
    const char *mlp = hf_mlp_word[f->mlp];
    if (mc->pos == TSR_POS_ROPE && mc->norm == TSR_NORM_RMSNORM && mc->mlp == f->mlp) return 0;
    hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" (RoPE, RMSNorm, %s), but this run has "
              "model.pos = \"%s\", model.norm = \"%s\", model.mlp = \"%s\": set --set model.pos=rope "
              "--set model.norm=rmsnorm --set model.mlp=%s", f->model_type, mlp,
              mc->pos == TSR_POS_ROPE ? "rope" : mc->pos == TSR_POS_ALIBI ? "alibi" : "learned",
              mc->norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm", hf_mlp_word[mc->mlp], mlp);
    return TSR_EXIT_USAGE;
}

/* The sizes against the run's. */
static void check_sizes(hf_reader *c, const json_value *r, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *mc = &m->cfg;
    const hf_defaults *d = &f->def;
    long C = hfr_int(c, r, "hidden_size", d->hidden), NH = hfr_int(c, r, "num_attention_heads", d->heads);
    hfr_same(c, "num_hidden_layers", hfr_int(c, r, "num_hidden_layers", d->layers), "model.n_layer",
             mc->n_layer, "");
    hfr_same(c, "hidden_size", C, "model.d_model", mc->d_model, "");
    hfr_same(c, "num_attention_heads", NH, "model.n_head", mc->n_head, "");
    hfr_same(c, "num_key_value_heads", hfr_int(c, r, "num_key_value_heads", d->kv ? d->kv : NH),
             "model.n_kv_head", m->KVH, "");
    long hs = hfr_int(c, r, "head_dim", default_head_dim(f, C, NH));
    hfr_same(c, "head_dim", hs, "model.head_dim", m->hs, "");
    if (!f->moe || m->LD) /* the dense MLP (Mixtral's intermediate_size: the experts') */
        hfr_same(c, "intermediate_size", hfr_int(c, r, "intermediate_size", d->inter),
                 "model.intermediate_size", m->F, "");
    hfr_same(c, "vocab_size", hfr_int(c, r, "vocab_size", d->vocab), "model.vocab_size",
             mc->vocab_size, "");
}

static void llama_check(hf_reader *c, const tsr_model *m, const hf_family *f) {
    const json_value *r = c->root;
    const tsr_model_config *mc = &m->cfg;
    if (!check_kind(c, mc, f)) {
        check_sizes(c, r, m, f);
        check_act(c, r, f);
        hfr_same_num(c, "rms_norm_eps", hfr_num(c, r, "rms_norm_eps", f->def.eps), "model.norm_eps",
                     mc->norm_eps);
        hf_unmapped_check(c, r, f);
        hf_rope_check(c, r, mc, f);
        check_bias(c, r, mc, f);
        check_window(c, r, m, f);
        hf_variants_check(c, r, m, f);
    }
    hf_moe_check(c, r, m, f);
}

/* ---- filling ---- */

/* LlamaConfig's attention_bias and mlp_bias: both model.bias, attention_bias alone
 * model.attn_bias (mlp_bias alone: the check refuses it). */
static void fill_llama_bias(hf_reader *c, const char *mt) {
    const int ab = hfr_bool(c, c->root, "attention_bias", 0), mb = hfr_bool(c, c->root, "mlp_bias", 0);
    char from[80];
    snprintf(from, sizeof from, "attention_bias = %s, mlp_bias = %s", ab ? "true" : "false",
             mb ? "true" : "false");
    hfr_put(c, 0, "model.bias", ab && mb ? "true" : "false", from);
    hfr_put(c, 0, "model.attn_bias", ab && !mb ? "true" : "false", from);
    if (!ab) hfr_put_word(c, "model.qkv_bias", "false", mt, "no q/k/v biases without attention_bias");
}

/* The biases: model.bias, model.attn_bias and model.qkv_bias from attention_bias (and
 * LlamaConfig's mlp_bias), or the class's. */
static void fill_bias(hf_reader *c, const hf_family *f) {
    const char *mt = f->model_type;
    const int qkv = f->bias == HF_BIAS_QKV;
    switch (f->bias) {
    case HF_BIAS_LLAMA:
        fill_llama_bias(c, mt);
        break;
    case HF_BIAS_ATTN:
        hfr_put_word(c, "model.bias", "false", mt, "no MLP biases");
        hfr_put_bool(c, "model.attn_bias", "attention_bias", 0);
        hfr_put_word(c, "model.qkv_bias", "false", mt, "q/k/v biases only with o's: attention_bias");
        break;
    case HF_BIAS_GPTOSS: /* (no dense MLP: model.bias is the attention's) */
        hfr_put_bool(c, "model.bias", "attention_bias", 1);
        if (!hfr_bool(c, c->root, "attention_bias", 1))
            hfr_put_word(c, "model.qkv_bias", "false", mt, "no q/k/v biases without attention_bias");
        break;
    default:
        hfr_put_word(c, "model.bias", "false", mt, "no o_proj or MLP biases");
        hfr_put_word(c, "model.qkv_bias", qkv ? "true" : "false", mt,
                     qkv ? "q/k/v biases" : "no q/k/v biases");
    }
}

/* The sizes. */
static void fill_sizes(hf_reader *c, const hf_family *f) {
    const hf_defaults *d = &f->def;
    const json_value *r = c->root;
    hfr_put_layers(c, "model.n_layer", "num_hidden_layers", d->layers);
    long C = hfr_int(c, r, "hidden_size", d->hidden), NH = hfr_int(c, r, "num_attention_heads", d->heads);
    hfr_put_int(c, 0, "model.d_model", "hidden_size", d->hidden);
    hfr_put_int(c, 0, "model.n_head", "num_attention_heads", d->heads);
    hfr_put_int(c, 0, "model.n_kv_head", "num_key_value_heads", d->kv ? d->kv : NH);
    hfr_put_int(c, 0, "model.head_dim", "head_dim", default_head_dim(f, C, NH));
    if (!f->experts || !f->experts->width_only)
        hfr_put_int(c, 0, "model.intermediate_size", "intermediate_size", d->inter);
    hfr_put_int(c, 0, "model.vocab_size", "vocab_size", d->vocab);
}

static void llama_fill(hf_reader *c, const hf_family *f) {
    const char *mt = f->model_type;
    hfr_put_word(c, "model.pos", "rope", mt, "RoPE");
    hfr_put_word(c, "model.norm", "rmsnorm", mt, "RMSNorm");
    hfr_put_word(c, "model.mlp", hf_mlp_word[f->mlp], mt,
                 f->mlp == TSR_MLP_GEGLU_TANH ? "GeGLU with the tanh GELU" : "a SwiGLU MLP");
    fill_sizes(c, f);
    hfr_put_num(c, "model.norm_eps", c->root, "rms_norm_eps", f->def.eps);
    hf_rope_fill(c, f);
    fill_bias(c, f);
    hfr_put_word(c, "model.qk_norm", f->qk_norm ? "true" : "false", mt,
                 f->qk_norm ? "QK-norm" : "no QK-norm");
    hfr_put_bool(c, "model.tie_embeddings", "tie_word_embeddings", f->tied);
    if (hfr_member(c->root, "max_position_embeddings")) /* the model's context (informational) */
        hfr_put_int(c, 1, "model.max_seq_len", "max_position_embeddings", 0);
    if (f->experts) hf_moe_fill(c, f);
    else hfr_put_word(c, "model.moe_experts", "0", mt, "no experts");
    if (f->variant_keys)
        hf_variants_fill(c, f, hfr_int(c, c->root, "num_hidden_layers", f->def.layers));
}

const hf_family_ops hf_llama_ops = {llama_write, llama_check, llama_fill, hf_llama_table,
                                    hf_llama_moe_need};

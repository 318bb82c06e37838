/* hf_config.c — config.json of a transformers directory: written on export, checked on import.
 *
 * Keys are those of transformers' GPT2Config, MptConfig, LlamaConfig, MistralConfig, Qwen2Config,
 * Qwen3Config, MixtralConfig and Qwen3MoeConfig. Written: the sizes, the GELU form, LayerNorm eps = 1e-5 (TSR_LN_EPS,
 * kernels/ops.h) or RMSNorm's model.norm_eps, RoPE's theta and Llama 3 scaling, dropout 0 (tessera
 * trains without dropout, so a transformers finetune starts from the same function), the head's
 * tying. Read: a key that is absent takes transformers' default for it, as transformers itself
 * would do.
 */
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf.h"
#include "hf/hf_internal.h"
#include "hf/hf_qwen3next.h"
#include "ops.h"
#include "json.h"

/* ================================ writing ================================ */

typedef struct textbuf {
    char s[8192];
    size_t n;
    int overflow;
} textbuf;

static void add(textbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(textbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, sizeof b->s - b->n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof b->s - b->n) b->overflow = 1;
    else b->n += (size_t)k;
}

/* The shortest decimal that reads back as v, as a JSON float ("1e-05", "500000.0"). */
static const char *json_double(char *buf, size_t cap, double v) {
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".en")) { /* "500000" -> "500000.0" (no 'n': inf and nan never get here) */
        size_t n = strlen(buf);
        if (n + 3 <= cap) memcpy(buf + n, ".0", 3);
    }
    return buf;
}

/* MixtralConfig's / Qwen3MoeConfig's experts. router_aux_loss_coef = tessera's coefficient x
 * LM / top_k (hf_aux_coef; docs/moe.md). The router's jitter noise (training only) is off, as in
 * tessera. */
/* transformers' router_aux_loss_coef for tessera's coefficient coef (docs/moe.md): its
 * load_balancing_loss_func divides the counts by N, not N K (K times tessera's value), and pools the
 * LM layers into one loss (about their mean, where tessera sums them): coef x LM / K gives about
 * the same gradient. */
double hf_aux_coef(const tsr_model *m, double coef) { return coef * m->LM / m->K; }

static void write_moe(textbuf *b, const tsr_model *m, hf_arch a) {
    char coef[32];
    json_double(coef, sizeof coef, hf_aux_coef(m, m->cfg.moe_aux_loss_coef));
    if (a == HF_MIXTRAL || a == HF_GPTOSS)
        add(b, "  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n%s", m->E, m->K,
            a == HF_MIXTRAL ? "  \"router_jitter_noise\": 0.0,\n" : "");
    else
        add(b, "  \"num_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
                "  \"moe_intermediate_size\": %d,\n  \"norm_topk_prob\": %s,\n"
                "  \"decoder_sparse_step\": %d,\n  \"mlp_only_layers\": [],\n", m->E, m->K, m->FE,
            m->cfg.moe_norm_topk ? "true" : "false", m->cfg.moe_every);
    add(b, "  \"router_aux_loss_coef\": %s,\n  \"output_router_logits\": false,\n", coef);
}

/* max_position_embeddings: the model's context, not the last run's seq_len: model.max_seq_len
 * (an --init-from Hugging Face run takes the base's), else the context Llama 3's RoPE scaling
 * extends to (original x factor), else the run's seq_len. */
static int rope_context(const tsr_model *m) {
    const tsr_model_config *c = &m->cfg;
    double scaled = c->rope_original_max_pos * c->rope_factor;
    if (c->max_seq_len > 0) return c->max_seq_len;
    int scales = c->rope_scaling == TSR_ROPE_SCALING_LLAMA3 || c->rope_scaling == TSR_ROPE_SCALING_YARN;
    if (scales && scaled > m->maxT && scaled < 1e9) return (int)scaled;
    return m->maxT;
}

/* layer_types of m as Hugging Face's list, one entry per layer. */
static void write_layer_types(textbuf *b, const tsr_model *m) {
    add(b, "  \"layer_types\": [");
    for (int l = 0; l < m->L; l++)
        add(b, "%s\"%s\"", l ? ", " : "", config_layer_window(&m->cfg, l) > 0 ? "sliding_attention"
                                                                              : "full_attention");
    add(b, "],\n");
}

/* A soft cap's value: null when off. */
static void write_cap(textbuf *b, const char *key, double cap) {
    char v[32];
    if (cap > 0) add(b, "  \"%s\": %s,\n", key, json_double(v, sizeof v, cap));
    else add(b, "  \"%s\": null,\n", key);
}

/* The keys of the issue-67 classes (Olmo2Config, Olmo3Config, Gemma3TextConfig, Gemma2Config)
 * beyond LlamaConfig's common ones: the windows, query_pre_attn_scalar, the soft caps, Gemma 3's
 * sliding layers' base (model.rope_local_theta, else the one rope_theta). */
static void write_family(textbuf *b, const tsr_model *m, hf_arch a) {
    const tsr_model_config *c = &m->cfg;
    const hf_family *f = hf_family_of(a);
    char v[32];
    add(b, "  \"attention_bias\": false,\n");
    if (f->windows) {
        add(b, "  \"sliding_window\": %d,\n", c->sliding_window > 0 ? c->sliding_window : 4096);
        write_layer_types(b, m);
    }
    if (f->qpas) {
        double q = c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar : m->hs;
        add(b, "  \"query_pre_attn_scalar\": %s,\n", json_double(v, sizeof v, q));
    }
    if (f->local_theta) {
        double local = c->rope_local_theta > 0 ? c->rope_local_theta : c->rope_theta;
        add(b, "  \"rope_local_base_freq\": %s,\n", json_double(v, sizeof v, local));
    }
    if (!f->softcap) return;
    write_cap(b, "attn_logit_softcapping", c->attn_logit_softcapping);
    write_cap(b, "final_logit_softcapping", c->final_logit_softcapping);
}

/* SmolLM3Config's no_rope_layers, one entry per layer (1: RoPE), and no window. */
static void write_nope(textbuf *b, const tsr_model *m) {
    add(b, "  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n  \"no_rope_layers\": [");
    for (int l = 0; l < m->L; l++) add(b, "%s%d", l ? ", " : "", config_layer_rope(&m->cfg, l));
    add(b, "],\n");
}

/* rope_scaling: Llama 3's, linear (Gemma), YaRN (gpt-oss), or null; gpt-oss without scaling
 * writes {"rope_type": "default"} (GptOssConfig fills its YaRN in place of null: hf_gptoss.h). */
static void write_rope_scaling(textbuf *b, const tsr_model_config *c, hf_arch a) {
    char f[32], lo[32], hi[32];
    if (c->rope_scaling == TSR_ROPE_SCALING_LLAMA3)
        add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"llama3\",\n    \"factor\": %s,\n"
                "    \"low_freq_factor\": %s,\n    \"high_freq_factor\": %s,\n"
                "    \"original_max_position_embeddings\": %d\n  },\n",
            json_double(f, sizeof f, c->rope_factor), json_double(lo, sizeof lo, c->rope_low_freq_factor),
            json_double(hi, sizeof hi, c->rope_high_freq_factor), c->rope_original_max_pos);
    else if (c->rope_scaling == TSR_ROPE_SCALING_LINEAR)
        add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"linear\",\n    \"factor\": %s\n  },\n",
            json_double(f, sizeof f, c->rope_factor));
    else if (c->rope_scaling == TSR_ROPE_SCALING_YARN) /* gpt-oss (hf_arch_of refuses it elsewhere) */
        add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"yarn\",\n    \"factor\": %s,\n"
                "    \"beta_fast\": %s,\n    \"beta_slow\": %s,\n"
                "    \"original_max_position_embeddings\": %d,\n    \"truncate\": %s\n  },\n",
            json_double(f, sizeof f, c->rope_factor), json_double(lo, sizeof lo, c->rope_beta_fast),
            json_double(hi, sizeof hi, c->rope_beta_slow), c->rope_original_max_pos,
            c->rope_truncate ? "true" : "false");
    else if (a == HF_GPTOSS)
        add(b, "  \"rope_scaling\": {\n    \"rope_type\": \"default\"\n  },\n");
    else
        add(b, "  \"rope_scaling\": null,\n");
}

/* GptOssConfig's keys beyond LlamaConfig's: q, k, v, o biases, the windows, the unit's clamp
 * (swiglu_alpha stays transformers' fixed 1.702); the experts' keys follow (write_moe). */
static void write_gptoss(textbuf *b, const tsr_model *m) {
    char v[32];
    add(b, "  \"attention_bias\": %s,\n  \"sliding_window\": %d,\n", m->cfg.bias ? "true" : "false",
        m->cfg.sliding_window > 0 ? m->cfg.sliding_window : 128);
    write_layer_types(b, m);
    add(b, "  \"swiglu_limit\": %s,\n", json_double(v, sizeof v, m->cfg.swiglu_limit));
}

/* The Llama family's keys (LlamaConfig and its relatives). */
static void write_llama(textbuf *b, const tsr_model *m, hf_arch a) {
    const tsr_model_config *c = &m->cfg;
    if (hf_hybrid_of(a)) { /* hf_qwen3next.c */
        char keys[1 << 16];
        double aux = m->E ? hf_aux_coef(m, c->moe_aux_loss_coef) : 0;
        if (hf_qwen3next_config_text(m, a, aux, keys, sizeof keys) < 0) b->overflow = 1;
        else add(b, "%s", keys);
        return;
    }
    char eps[32], theta[32];
    int gemma = hf_family_of(a)->mlp == TSR_MLP_GEGLU_TANH;
    add(b, "  \"vocab_size\": %d,\n  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n"
            "  \"num_hidden_layers\": %d,\n  \"num_attention_heads\": %d,\n"
            "  \"num_key_value_heads\": %d,\n", m->V, m->C,
        a == HF_MIXTRAL || a == HF_GPTOSS ? m->FE : m->F, m->L,
        m->NH, m->KVH);
    if (hf_family_of(a)->head_dim_key) add(b, "  \"head_dim\": %d,\n", m->hs);
    add(b, "  \"%s\": \"%s\",\n", gemma ? "hidden_activation" : "hidden_act",
        gemma ? "gelu_pytorch_tanh" : "silu");
    add(b, "  \"max_position_embeddings\": %d,\n  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n",
        rope_context(m), json_double(eps, sizeof eps, c->norm_eps),
        json_double(theta, sizeof theta, c->rope_theta));
    write_rope_scaling(b, c, a);
    add(b, "  \"attention_dropout\": 0.0,\n");
    if (hf_family_of(a)->llama_bias)
        add(b, "  \"attention_bias\": %s,\n  \"mlp_bias\": %s,\n%s", c->bias ? "true" : "false",
            c->bias ? "true" : "false", a == HF_LLAMA ? "  \"pretraining_tp\": 1,\n" : "");
    if (a == HF_SMOLLM3)
        write_nope(b, m);
    else if (a == HF_MISTRAL || a == HF_MIXTRAL)
        add(b, "  \"sliding_window\": null,\n");
    else if (a == HF_GPTOSS)
        write_gptoss(b, m);
    else if (a >= HF_OLMO2)
        write_family(b, m, a);
    else if (a != HF_LLAMA)
        add(b, "%s  \"use_sliding_window\": false,\n  \"sliding_window\": null,\n"
                "  \"max_window_layers\": %d,\n", hf_arch_qk_norm(a) ? "  \"attention_bias\": false,\n" : "",
            m->L);
    if (hf_arch_moe(a)) write_moe(b, m, a);
}

int hf_config_write(const char *path, const tsr_model *m, hf_arch a, const char *torch_dtype,
                    long bos, long eos) {
    textbuf b = {.n = 0};
    const char *gelu = m->cfg.gelu == TSR_GELU_EXACT ? "gelu" : "gelu_new";
    add(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", hf_class_name[a],
        hf_model_type[a]);
    if (a == HF_GPT2) {
        add(&b, "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
                "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n"
                "  \"activation_function\": \"%s\",\n  \"layer_norm_epsilon\": %g,\n"
                "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
                "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
                "  \"reorder_and_upcast_attn\": false,\n",
            m->V, m->maxT, m->maxT, m->C, m->L, m->NH, m->F, gelu, (double)TSR_LN_EPS);
    } else if (a == HF_MPT) {
        add(&b, "  \"vocab_size\": %d,\n  \"max_seq_len\": %d,\n  \"d_model\": %d,\n  \"n_layers\": %d,\n"
                "  \"n_heads\": %d,\n  \"expansion_ratio\": 4,\n  \"layer_norm_epsilon\": %g,\n"
                "  \"no_bias\": true,\n  \"learned_pos_emb\": false,\n  \"resid_pdrop\": 0.0,\n"
                "  \"emb_pdrop\": 0.0,\n  \"logit_scale\": null,\n  \"embedding_fraction\": 1.0,\n"
                "  \"norm_type\": \"low_precision_layernorm\",\n  \"init_device\": \"cpu\",\n"
                "  \"attn_config\": {\n    \"attn_type\": \"multihead_attention\",\n"
                "    \"attn_impl\": \"torch\",\n    \"attn_pdrop\": 0,\n    \"alibi\": true,\n"
                "    \"alibi_bias_max\": 8,\n    \"clip_qkv\": null,\n    \"softmax_scale\": null,\n"
                "    \"qk_ln\": false,\n    \"prefix_lm\": false,\n    \"attn_uses_sequence_id\": false\n"
                "  },\n",
            m->V, m->maxT, m->C, m->L, m->NH, (double)TSR_LN_EPS);
    } else if (hf_hybrid_of(a) && hf_hybrid_of(a)->nest) { /* Qwen 3.5's VL: the text nested */
        add(&b, "  \"%s\": {\n  \"model_type\": \"%s\",\n", hf_hybrid_of(a)->nest,
            hf_model_type[hf_hybrid_of(a)->text]);
        write_llama(&b, m, a);
        add(&b, "  \"tie_word_embeddings\": %s\n  },\n", m->cfg.tie_embeddings ? "true" : "false");
    } else {
        write_llama(&b, m, a);
    }
    add(&b, "  \"initializer_range\": %.17g,\n  \"tie_word_embeddings\": %s,\n  \"use_cache\": true,\n",
        m->cfg.init_std, m->cfg.tie_embeddings ? "true" : "false");
    if (bos >= 0) add(&b, "  \"bos_token_id\": %ld,\n", bos);
    if (eos >= 0) add(&b, "  \"eos_token_id\": %ld,\n", eos);
    add(&b, "  \"torch_dtype\": \"%s\"\n}\n", torch_dtype);
    if (b.overflow) tsr_die(TSR_EXIT_INTERNAL, "config.json: text buffer too small");
    return hf_write_file(path, b.s, b.n);
}

/* ================================ checking ================================ */

typedef struct checker {
    const char *path;
    const json_value *root;
    int rc;    /* the first fault's status; later faults are not reported */
    int notes; /* say the training choices that differ from the model's (a run's import) */
} checker;

static void fault(checker *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fault(checker *c, int rc, const char *fmt, ...) {
    if (c->rc) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tsr_error("%s: %s", c->path, msg);
    c->rc = rc;
}

static const json_value *member(const json_value *obj, const char *key) {
    return obj && obj->type == JSON_OBJECT ? json_get(obj, key) : NULL;
}

/* An integer key (absent or null: def). */
static long get_int(checker *c, const json_value *obj, const char *key, long def) {
    const json_value *v = member(obj, key);
    if (!v || v->type == JSON_NULL) return def;
    if (v->type != JSON_NUMBER || v->num != floor(v->num) || fabs(v->num) > 1e15) {
        char got[96];
        fault(c, TSR_EXIT_DATA, "%s = %s, expected an integer", key, json_describe(v, got, sizeof got));
        return def;
    }
    return (long)v->num;
}

static double get_num(checker *c, const json_value *obj, const char *key, double def) {
    const json_value *v = member(obj, key);
    if (!v) return def;
    if (v->type != JSON_NUMBER) {
        char got[96];
        fault(c, TSR_EXIT_DATA, "%s = %s, expected a number", key, json_describe(v, got, sizeof got));
        return def;
    }
    return v->num;
}

static int get_bool(checker *c, const json_value *obj, const char *key, int def) {
    const json_value *v = member(obj, key);
    if (!v) return def;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE) {
        char got[96];
        fault(c, TSR_EXIT_DATA, "%s = %s, expected true or false", key, json_describe(v, got, sizeof got));
        return def;
    }
    return v->type == JSON_TRUE;
}

/* A string key (absent: def; null: ""). */
static const char *get_str(checker *c, const json_value *obj, const char *key, const char *def) {
    const json_value *v = member(obj, key);
    if (!v) return def;
    if (v->type == JSON_NULL) return "";
    if (v->type != JSON_STRING) {
        char got[96];
        fault(c, TSR_EXIT_DATA, "%s = %s, expected a string", key, json_describe(v, got, sizeof got));
        return def;
    }
    return v->str;
}

/* A model_type tessera does not import (exit 2): the list of those it does. */
static void unknown_type(checker *c, const char *mt) {
    fault(c, TSR_EXIT_DATA, "model_type = \"%s\": tessera imports \"gpt2\", \"mpt\", \"llama\", "
          "\"mistral\", \"qwen2\", \"qwen3\", \"mixtral\", \"qwen3_moe\", \"olmo2\", \"olmo3\", "
          "\"gemma3_text\", \"gemma2\", \"smollm3\", \"qwen3_next\", \"gpt_oss\", \"qwen3_5\", "
          "\"qwen3_5_text\", \"qwen3_5_moe\" and \"qwen3_5_moe_text\" only", mt);
}

/* config.json's size `key` must equal the run's `run_key`: exit 1 naming both and the --set
 * that makes the run fit, or exit 2 when the file's value is none the key accepts (vocab_size =
 * -5 is a damaged file, not a suggestion). */
static void same(checker *c, const char *key, long hf, const char *run_key, long run, const char *note) {
    char val[32], why[256] = "integers >= 1: a size or count";
    if (hf == run) return;
    snprintf(val, sizeof val, "%ld", hf);
    if (hf < 1 || config_check_set(run_key, val, why, sizeof why) != 0)
        fault(c, TSR_EXIT_DATA, "%s = %ld: no model has that (%s accepts %s): a damaged "
              "config.json, or not one of this family", key, hf, run_key, why);
    else
        fault(c, TSR_EXIT_USAGE, "%s = %ld, but this run has %s = %ld%s: the weights do not fit "
              "the run's model; set --set %s=%ld (or start from weights of the run's shape)", key,
              hf, run_key, run, note, run_key, hf);
}

static void check_eps(checker *c, const json_value *root) {
    double eps = get_num(c, root, "layer_norm_epsilon", 1e-5);
    if (fabs(eps - TSR_LN_EPS) > 1e-6 * TSR_LN_EPS)
        fault(c, TSR_EXIT_DATA, "layer_norm_epsilon = %g, tessera's LayerNorm uses %g", eps,
              (double)TSR_LN_EPS);
}

static void check_gpt2(checker *c, const json_value *r, const tsr_model *m) {
    const tsr_model_config *mc = &m->cfg;
    if (mc->pos != TSR_POS_LEARNED)
        fault(c, TSR_EXIT_USAGE, "model_type = \"gpt2\" (learned positions), but this run has "
              "model.pos = \"alibi\": set --set model.pos=learned");
    long L = get_int(c, r, "n_layer", 12), C = get_int(c, r, "n_embd", 768);
    same(c, "n_layer", L, "model.n_layer", mc->n_layer, "");
    same(c, "n_embd", C, "model.d_model", mc->d_model, "");
    same(c, "n_head", get_int(c, r, "n_head", 12), "model.n_head", mc->n_head, "");
    same(c, "vocab_size", get_int(c, r, "vocab_size", 50257), "model.vocab_size", mc->vocab_size, "");
    same(c, "n_positions", get_int(c, r, "n_positions", 1024), "model.max_seq_len", m->maxT,
         mc->max_seq_len ? "" : " (0 = seq_len)");
    long F = get_int(c, r, "n_inner", 4 * C);
    if (!c->rc && F != m->F)
        fault(c, TSR_EXIT_USAGE, "n_inner = %ld (MLP width), but this run's is %d "
              "(model.expansion_ratio = %g): set --set model.expansion_ratio=%.17g", F, m->F,
              mc->expansion_ratio, (double)F / (double)C);
    const char *act = get_str(c, r, "activation_function", "gelu_new");
    int tanh_form = !strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_fast");
    if (!tanh_form && strcmp(act, "gelu") != 0)
        fault(c, TSR_EXIT_DATA, "activation_function = \"%s\": tessera has the tanh GELU "
              "(gelu_new, gelu_pytorch_tanh, gelu_fast) and the exact one (gelu) only", act);
    else if (tanh_form != (mc->gelu == TSR_GELU_TANH))
        fault(c, TSR_EXIT_USAGE, "activation_function = \"%s\", but this run has model.gelu = "
              "\"%s\": set --set model.gelu=%s", act, tanh_form ? "exact" : "tanh",
              tanh_form ? "tanh" : "exact");
    if (!get_bool(c, r, "scale_attn_weights", 1) || get_bool(c, r, "scale_attn_by_inverse_layer_idx", 0))
        fault(c, TSR_EXIT_DATA, "scale_attn_weights must be true and scale_attn_by_inverse_layer_idx "
              "false: tessera scales attention scores by 1/sqrt(head size) only");
}

static void check_mpt(checker *c, const json_value *r, const tsr_model *m) {
    const tsr_model_config *mc = &m->cfg;
    if (mc->pos != TSR_POS_ALIBI || mc->bias || mc->gelu != TSR_GELU_EXACT)
        fault(c, TSR_EXIT_USAGE, "model_type = \"mpt\" (ALiBi, no biases, exact GELU), but this run "
              "has model.pos = \"%s\", model.bias = %s, model.gelu = \"%s\": set --set model.pos=alibi "
              "--set model.bias=false --set model.gelu=exact", mc->pos == TSR_POS_ALIBI ? "alibi" : "learned",
              mc->bias ? "true" : "false", mc->gelu == TSR_GELU_EXACT ? "exact" : "tanh");
    same(c, "n_layers", get_int(c, r, "n_layers", 24), "model.n_layer", mc->n_layer, "");
    same(c, "d_model", get_int(c, r, "d_model", 2048), "model.d_model", mc->d_model, "");
    same(c, "n_heads", get_int(c, r, "n_heads", 16), "model.n_head", mc->n_head, "");
    same(c, "vocab_size", get_int(c, r, "vocab_size", 50368), "model.vocab_size", mc->vocab_size, "");
    double er = get_num(c, r, "expansion_ratio", 4);
    if (!c->rc && (er != 4 || m->F != 4 * m->C))
        fault(c, er != 4 ? TSR_EXIT_DATA : TSR_EXIT_USAGE, "expansion_ratio = %g, this run has "
              "model.expansion_ratio = %g (transformers' MPT MLP is always 4 x d_model wide)", er,
              mc->expansion_ratio);
    if (!get_bool(c, r, "no_bias", 1))
        fault(c, TSR_EXIT_DATA, "no_bias = false: transformers' MptForCausalLM has no biases, and "
              "tessera imports MPT without biases only");
    const json_value *ls = member(r, "logit_scale");
    if (ls && ls->type != JSON_NULL)
        fault(c, TSR_EXIT_DATA, "logit_scale is set: tessera has no logit scaling");
    const json_value *ac = member(r, "attn_config");
    if (ac && ac->type != JSON_OBJECT) fault(c, TSR_EXIT_DATA, "attn_config is not an object");
    if (!get_bool(c, ac, "alibi", 1) || get_num(c, ac, "alibi_bias_max", 8) != 8)
        fault(c, TSR_EXIT_DATA, "attn_config: alibi must be true with alibi_bias_max 8 (tessera's "
              "ALiBi slopes)");
    const json_value *ss = member(ac, "softmax_scale"), *cq = member(ac, "clip_qkv");
    if ((ss && ss->type != JSON_NULL) || (cq && cq->type != JSON_NULL) ||
        get_bool(c, ac, "qk_ln", 0) || get_bool(c, ac, "prefix_lm", 0))
        fault(c, TSR_EXIT_DATA, "attn_config: softmax_scale and clip_qkv must be null, qk_ln and "
              "prefix_lm false (tessera's attention has none of them)");
    if (strcmp(get_str(c, ac, "attn_type", "multihead_attention"), "multihead_attention") != 0)
        fault(c, TSR_EXIT_DATA, "attn_config.attn_type must be \"multihead_attention\"");
}

/* A real-valued key that must equal the run's (relative 1e-6: a float32 value printed to JSON). */
static void same_num(checker *c, const char *key, double hf, const char *run_key, double run) {
    char h[32], r[32];
    if (!c->rc && !(fabs(hf - run) <= 1e-6 * fabs(run)))
        fault(c, TSR_EXIT_USAGE, "%s = %s, but this run has %s = %s: set --set %s=%s", key,
              json_double(h, sizeof h, hf), run_key, json_double(r, sizeof r, run), run_key, h);
}

static void same_bool(checker *c, const char *key, int hf, const char *run_key, int run) {
    if (hf != run)
        fault(c, TSR_EXIT_USAGE, "%s = %s, but this run has %s = %s: set --set %s=%s", key,
              hf ? "true" : "false", run_key, run ? "true" : "false", run_key, hf ? "true" : "false");
}

/* rope_scaling of type "linear" (the classes with hf_family.rope_linear): factor = rope_factor. */
static void check_linear(checker *c, const json_value *rs, const char *key,
                         const tsr_model_config *mc) {
    char name[64];
    snprintf(name, sizeof name, "%s.factor", key);
    double v = get_num(c, rs, "factor", NAN);
    if (isnan(v)) fault(c, TSR_EXIT_DATA, "%s is missing (rope_type \"linear\" needs it)", name);
    if (mc->rope_scaling != TSR_ROPE_SCALING_LINEAR)
        fault(c, TSR_EXIT_USAGE, "%s.rope_type = \"linear\", but this run's model.rope_scaling "
              "differs: set --set model.rope_scaling=linear --set model.rope_factor=%g", key, v);
    same_num(c, name, v, "model.rope_factor", mc->rope_factor);
}

static const char *const scaling_word[] = {"none", "llama3", "linear", "yarn"};

/* One scaling key of rope_scaling and the run's model.rope_* double it is (def NAN: required). */
typedef struct scaling_key {
    const char *hf, *run;
    size_t off;
    double def;
} scaling_key;

/* The n keys of a rope_scaling of type `type` (its object rs, named key) and its
 * original_max_position_embeddings (required) against the run's. */
static void same_scaling(checker *c, const json_value *rs, const char *key, const char *type,
                         const scaling_key *k, size_t n, const tsr_model_config *mc) {
    char name[96];
    for (size_t i = 0; i < n; i++) {
        double v = get_num(c, rs, k[i].hf, k[i].def);
        snprintf(name, sizeof name, "%s.%s", key, k[i].hf);
        if (isnan(v)) fault(c, TSR_EXIT_DATA, "%s is missing (rope_type \"%s\" needs it)", name, type);
        same_num(c, name, v, k[i].run, *(const double *)((const char *)mc + k[i].off));
    }
    snprintf(name, sizeof name, "%s.original_max_position_embeddings", key);
    long omp = get_int(c, rs, "original_max_position_embeddings", -1);
    if (omp < 0) fault(c, TSR_EXIT_DATA, "%s is missing (rope_type \"%s\" needs it)", name, type);
    same(c, name, omp, "model.rope_original_max_pos", mc->rope_original_max_pos, "");
}

/* rope_scaling of type "yarn" (gpt-oss): factor, beta_fast, beta_slow,
 * original_max_position_embeddings and truncate against the run's model.rope_* keys; an
 * attention factor of its own (attention_factor, mscale, mscale_all_dim) is refused: tessera's is
 * 0.1 ln(factor) + 1, transformers' default. */
static void check_yarn(checker *c, const json_value *rs, const char *key, const tsr_model_config *mc) {
    static const scaling_key k[] = {
        {"factor", "model.rope_factor", offsetof(tsr_model_config, rope_factor), NAN},
        {"beta_fast", "model.rope_beta_fast", offsetof(tsr_model_config, rope_beta_fast), 32},
        {"beta_slow", "model.rope_beta_slow", offsetof(tsr_model_config, rope_beta_slow), 1},
    };
    static const char *const own[] = {"attention_factor", "mscale", "mscale_all_dim"};
    char name[96];
    if (mc->rope_scaling != TSR_ROPE_SCALING_YARN)
        fault(c, TSR_EXIT_USAGE, "%s.rope_type = \"yarn\", but this run has model.rope_scaling = "
              "\"%s\": set --set model.rope_scaling=yarn (and the rope_* keys)", key,
              scaling_word[mc->rope_scaling]);
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        const json_value *v = member(rs, own[i]);
        if (v && v->type != JSON_NULL)
            fault(c, TSR_EXIT_DATA, "%s.%s is set: not supported (tessera's YaRN scales attention "
                  "by 0.1 ln(factor) + 1, transformers' default); only null is accepted", key, own[i]);
    }
    same_scaling(c, rs, key, "yarn", k, sizeof k / sizeof k[0], mc);
    snprintf(name, sizeof name, "%s.truncate", key);
    same_bool(c, name, get_bool(c, rs, "truncate", 1), "model.rope_truncate", mc->rope_truncate);
}

/* transformers' defaults when config.json has no rope_theta / rms_norm_eps: GptOssConfig's
 * 150000 and 1e-5, LlamaConfig's 10000 and 1e-6 (the Llama family's readings). */
static double default_theta(hf_arch a) { return a == HF_GPTOSS ? 150000 : 10000; }
static double default_eps(hf_arch a) { return a == HF_GPTOSS ? 1e-5 : 1e-6; }

/* transformers 5's rope_parameters per layer type ({"full_attention": {...}, "sliding_attention":
 * {...}}: Gemma 3's): the entry of layer type `type`, or NULL when the form is flat or absent */
static const json_value *rope_per_type(const json_value *r, const char *type) {
    const json_value *rp = member(r, "rope_parameters"), *e = rp ? member(rp, type) : NULL;
    return e && e->type == JSON_OBJECT ? e : NULL;
}

/* The object holding the (full layers') rope_theta and scaling, and its name: rope_scaling, else
 * transformers 5's rope_parameters (flat, or its full_attention entry) */
static const json_value *rope_object(const json_value *r, const char **key) {
    const json_value *rs = member(r, *key = "rope_scaling");
    if (rs && rs->type != JSON_NULL) return rs;
    const json_value *full = rope_per_type(r, "full_attention");
    if (full) return *key = "rope_parameters.full_attention", full;
    const json_value *rp = member(r, "rope_parameters");
    if (rp) *key = "rope_parameters";
    return rp ? rp : rs;
}

/* Gemma 3's sliding layers' base: rope_local_base_freq, or rope_parameters' sliding_attention
 * entry (plain frequencies only) */
static double local_base(checker *c, const json_value *r) {
    const json_value *s = rope_per_type(r, "sliding_attention");
    if (!s) return get_num(c, r, "rope_local_base_freq", 10000);
    const char *type = get_str(c, s, "rope_type", "default");
    if (strcmp(type, "default") != 0)
        fault(c, TSR_EXIT_DATA, "rope_parameters.sliding_attention.rope_type = \"%s\": tessera "
              "turns the sliding layers by the plain frequencies only", type);
    return get_num(c, s, "rope_theta", 10000);
}

/* A class without a local base (hf_family.local_theta) turns every layer alike: rope_parameters'
 * sliding_attention entry, if any, must be its full_attention one */
static void check_same_types(checker *c, const json_value *r, hf_arch a) {
    const json_value *s = rope_per_type(r, "sliding_attention");
    const json_value *f = rope_per_type(r, "full_attention");
    if (!s || hf_family_of(a)->local_theta) return;
    if (!f || get_num(c, s, "rope_theta", 10000) != get_num(c, f, "rope_theta", 10000) ||
        strcmp(get_str(c, s, "rope_type", "default"), get_str(c, f, "rope_type", "default")))
        fault(c, TSR_EXIT_DATA, "rope_parameters: the sliding_attention layers turn otherwise than "
              "the full_attention ones, which %s does not hold in tessera (one RoPE for every "
              "layer)", hf_class_name[a]);
}

/* rope_theta and rope_scaling (or transformers 5's rope_parameters holding both). */
static void check_rope(checker *c, const json_value *r, const tsr_model_config *mc, hf_arch a) {
    double theta = get_num(c, r, "rope_theta", default_theta(a));
    const char *key;
    const json_value *rs = rope_object(r, &key);
    if (strcmp(key, "rope_scaling") != 0) theta = get_num(c, rs, "rope_theta", theta);
    check_same_types(c, r, a);
    const char *type = "default";
    if (rs && rs->type != JSON_NULL && rs->type != JSON_OBJECT)
        fault(c, TSR_EXIT_DATA, "%s is a JSON %s, expected an object or null", key, json_type_name(rs->type));
    else if (rs && rs->type == JSON_OBJECT)
        type = get_str(c, rs, "rope_type", get_str(c, rs, "type", "default"));
    else if (hf_family_of(a)->gptoss) /* GptOssConfig's own YaRN default; null differs by version */
        fault(c, TSR_EXIT_DATA, "rope_scaling (or rope_parameters) is absent or null: GptOssConfig "
              "then fills its own YaRN default (transformers 4.55 reads null as no scaling, 5.x as "
              "that default); state it, as the published config.json does");
    same_num(c, "rope_theta", theta, "model.rope_theta", mc->rope_theta);
    int llama3 = mc->rope_scaling == TSR_ROPE_SCALING_LLAMA3;
    if (!strcmp(type, "default")) {
        if (mc->rope_scaling != TSR_ROPE_SCALING_NONE)
            fault(c, TSR_EXIT_USAGE, "%s has no scaling, but this run has model.rope_scaling = "
                  "\"%s\": set --set model.rope_scaling=none", key, scaling_word[mc->rope_scaling]);
        return;
    }
    if (!strcmp(type, "yarn") && hf_family_of(a)->gptoss) {
        check_yarn(c, rs, key, mc);
        return;
    }
    if (!strcmp(type, "linear") && hf_family_of(a)->rope_linear) {
        check_linear(c, rs, key, mc);
        return;
    }
    if (strcmp(type, "llama3") != 0) {
        fault(c, TSR_EXIT_DATA, "%s.rope_type = \"%s\": tessera reads the plain frequencies, "
              "Llama 3's scaling (\"llama3\"), for Gemma 2 and 3 \"linear\" and for gpt-oss \"yarn\" "
              "only; dynamic, longrope and the others are not supported for %s", key, type,
              hf_class_name[a]);
        return;
    }
    if (!llama3)
        fault(c, TSR_EXIT_USAGE, "%s.rope_type = \"llama3\", but this run has model.rope_scaling = "
              "\"none\": set --set model.rope_scaling=llama3 (and the rope_* keys)", key);
    static const scaling_key k[] = {
        {"factor", "model.rope_factor", offsetof(tsr_model_config, rope_factor), NAN},
        {"low_freq_factor", "model.rope_low_freq_factor",
         offsetof(tsr_model_config, rope_low_freq_factor), NAN},
        {"high_freq_factor", "model.rope_high_freq_factor",
         offsetof(tsr_model_config, rope_high_freq_factor), NAN},
    };
    same_scaling(c, rs, key, "llama3", k, sizeof k / sizeof k[0], mc);
}

/* Sliding-window attention: tessera attends to the whole causal context, so a window is accepted
 * only when it is no shorter than the run's context (then it changes nothing). */
static void check_window(checker *c, const json_value *r, const tsr_model *m, hf_arch a) {
    int always = a == HF_MISTRAL || a == HF_MIXTRAL; /* no use_sliding_window switch */
    if (a == HF_LLAMA || (!always && !get_bool(c, r, "use_sliding_window", 0))) return;
    long w = get_int(c, r, "sliding_window", 4096); /* null: -1 below; absent: the default */
    const json_value *v = member(r, "sliding_window");
    if ((v && v->type == JSON_NULL) || (!v && a == HF_MIXTRAL)) return; /* Mixtral's default: none */
    if (w < m->maxT)
        fault(c, TSR_EXIT_DATA, "sliding_window = %ld%s%s: tessera's attention sees the whole "
              "causal context of %d tokens (model.max_seq_len, or seq_len when it is 0), and a "
              "shorter window computes something else; null or a window >= the context is "
              "accepted (a run with seq_len <= %ld and model.max_seq_len = 0 fits this one)", w,
              v ? "" : " (transformers' default for this model_type)",
              always ? "" : " with use_sliding_window = true", m->maxT, w);
}

/* The run must have the biases and QK-norm of the class. */
static void check_llama_extras(checker *c, const json_value *r, const tsr_model_config *mc, hf_arch a) {
    int ab = a == HF_QWEN2 ? 0 : get_bool(c, r, "attention_bias", a == HF_GPTOSS);
    if (a == HF_GPTOSS) { /* q, k, v and o biases (no dense MLP to hold others) = model.bias */
        same_bool(c, "attention_bias", ab, "model.bias", mc->bias);
        if (!ab) same_bool(c, "attention_bias", 0, "model.qkv_bias", mc->qkv_bias);
    } else if (hf_family_of(a)->llama_bias) {
        int mb = get_bool(c, r, "mlp_bias", 0);
        if (ab != mb)
            fault(c, TSR_EXIT_DATA, "attention_bias = %s and mlp_bias = %s: tessera's model.bias "
                  "puts biases on q, k, v, o and the MLP together, model.qkv_bias on q, k, v only; "
                  "this mix has no tessera equivalent", ab ? "true" : "false", mb ? "true" : "false");
        same_bool(c, "attention_bias", ab, "model.bias", mc->bias);
        if (!ab) same_bool(c, "attention_bias", 0, "model.qkv_bias", mc->qkv_bias);
    } else if (ab) {
        fault(c, TSR_EXIT_DATA, "attention_bias = true: %s then has an o_proj bias, which "
              "tessera's model.qkv_bias (q, k, v only) cannot hold", hf_class_name[a]);
    } else {
        int qkv = a == HF_QWEN2;
        if (mc->bias || mc->qkv_bias != qkv)
            fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has %s, but this run has model.bias = %s, "
                  "model.qkv_bias = %s: set --set model.bias=false --set model.qkv_bias=%s",
                  hf_model_type[a], qkv ? "biases on q, k and v only" : "no biases",
                  mc->bias ? "true" : "false", mc->qkv_bias ? "true" : "false", qkv ? "true" : "false");
    }
    int qkn = hf_arch_qk_norm(a);
    if (mc->qk_norm != qkn)
        fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" %s QK-norm, but this run has model.qk_norm = "
              "%s: set --set model.qk_norm=%s", hf_model_type[a], qkn ? "has" : "has no",
              mc->qk_norm ? "true" : "false", qkn ? "true" : "false");
}

/* transformers' defaults per class (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
 * MixtralConfig, Qwen3MoeConfig). */
static const struct llama_defaults {
    long vocab, hidden, inter, layers, heads, kv; /* kv 0: = heads */
} llama_def[] = {
    [HF_LLAMA] = {32000, 4096, 11008, 32, 32, 0},     [HF_MISTRAL] = {32000, 4096, 14336, 32, 32, 8},
    [HF_QWEN2] = {151936, 4096, 22016, 32, 32, 32},   [HF_QWEN3] = {151936, 4096, 22016, 32, 32, 32},
    [HF_MIXTRAL] = {32000, 4096, 14336, 32, 32, 8},   [HF_QWEN3_MOE] = {151936, 2048, 6144, 24, 32, 4},
    [HF_OLMO2] = {50304, 4096, 11008, 32, 32, 0},     [HF_OLMO3] = {50304, 4096, 11008, 32, 32, 0},
    [HF_GEMMA3] = {262208, 2304, 9216, 26, 8, 4},     [HF_GEMMA2] = {256000, 2304, 9216, 26, 8, 4},
    [HF_SMOLLM3] = {128256, 2048, 11008, 36, 16, 4},
    [HF_QWEN3NEXT] = {151936, 2048, 5632, 48, 16, 2}, /* (hf_qwen3next.c reads its config) */
    [HF_GPTOSS] = {201088, 2880, 2880, 36, 64, 8},
    [HF_QWEN35] = {0}, [HF_QWEN35_MOE] = {0}, [HF_QWEN35_VL] = {0}, /* (hf_qwen3next.c's hf_hybrid) */
    [HF_QWEN35_MOE_VL] = {0},
};
_Static_assert(sizeof llama_def / sizeof llama_def[0] == HF_ARCH_COUNT, "one row per class");

/* gpt-oss's clamped unit: swiglu_limit = model.swiglu_limit; swiglu_alpha (transformers 5) must
 * be the 1.702 tessera's unit has. */
static void check_gptoss_unit(checker *c, const json_value *r, const tsr_model_config *mc) {
    same_num(c, "swiglu_limit", get_num(c, r, "swiglu_limit", 7.0), "model.swiglu_limit",
             mc->swiglu_limit);
    double alpha = get_num(c, r, "swiglu_alpha", 1.702);
    if (alpha != 1.702)
        fault(c, TSR_EXIT_DATA, "swiglu_alpha = %g: tessera's gpt-oss unit has the fixed 1.702 of "
              "transformers' GptOssExperts", alpha);
}

/* The experts: a dense class into a MoE run (or the reverse) is refused; E, K, FE, the layers
 * that are MoE and the weights' normalisation must be the run's. */
static void check_moe(checker *c, const json_value *r, const tsr_model *m, hf_arch a) {
    const tsr_model_config *mc = &m->cfg;
    int mix = a == HF_MIXTRAL || a == HF_GPTOSS, oss = a == HF_GPTOSS; /* gpt-oss: Mixtral's keys */
    const char *ek = mix ? "num_local_experts" : "num_experts";
    long E = hf_arch_moe(a) ? get_int(c, r, ek, mix && !oss ? 8 : 128) : 0;
    if (!hf_arch_moe(a) || !m->E) {
        if (hf_arch_moe(a) != (m->E > 0))
            fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" %s, but this run has model.moe_experts = "
                  "%d: set --set model.moe_experts=%ld (and the other model.moe_* keys of docs/hf.md)",
                  hf_model_type[a], E ? "is a mixture of experts" : "has no experts", m->E, E);
        return;
    }
    same(c, ek, E, "model.moe_experts", m->E, "");
    same(c, "num_experts_per_tok", get_int(c, r, "num_experts_per_tok", oss ? 4 : mix ? 2 : 8),
         "model.moe_top_k", m->K, "");
    const char *fe = mix ? "intermediate_size" : "moe_intermediate_size";
    same(c, fe, get_int(c, r, fe, oss ? 2880 : mix ? 14336 : 768), "model.moe_intermediate_size", m->FE,
         mc->moe_intermediate_size ? "" : " (0 = the dense MLP width)");
    const char *need = hf_moe_need(m, a);
    if (need)
        fault(c, TSR_EXIT_USAGE, "%s cannot hold this run's experts: it needs %s (set those keys "
              "with --set)", hf_class_name[a], need);
    if (oss) check_gptoss_unit(c, r, &m->cfg);
    if (!mix) {
        same(c, "decoder_sparse_step", get_int(c, r, "decoder_sparse_step", 1), "model.moe_every",
             mc->moe_every, "");
        same_bool(c, "norm_topk_prob", get_bool(c, r, "norm_topk_prob", 0), "model.moe_norm_topk",
                  mc->moe_norm_topk);
        const json_value *ml = member(r, "mlp_only_layers");
        if (ml && ml->type != JSON_NULL && (ml->type != JSON_ARRAY || ml->len))
            fault(c, TSR_EXIT_DATA, "mlp_only_layers is %s: tessera's MoE layers are every "
                  "decoder_sparse_step-th (model.moe_every) and cannot be made dense one by one; "
                  "only an empty list (or null) is accepted", ml->type == JSON_ARRAY ?
                  "not empty" : json_type_name(ml->type));
    }
    double hf = get_num(c, r, "router_aux_loss_coef", 0.001);
    double run = hf_aux_coef(m, mc->moe_aux_loss_coef), back = hf * m->K / m->LM;
    char h[32], own[32], per[32], fix[32];
    if (c->notes && !c->rc && !(fabs(hf - run) <= 1e-6 * fabs(hf))) /* a training choice: said
                                                                       * to a run, not refused */
        tsr_warn("%s: router_aux_loss_coef = %s is tessera's model.moe_aux_loss_coef x %d MoE "
                 "layers / top_k = %d (docs/moe.md), but this run has %s (which is %s there): it "
                 "trains with its own; --set model.moe_aux_loss_coef=%s trains with the model's",
                 c->path, json_double(h, sizeof h, hf), m->LM, m->K,
                 json_double(own, sizeof own, mc->moe_aux_loss_coef),
                 json_double(per, sizeof per, run), json_double(fix, sizeof fix, back));
}

/* ---- the families of issue 67 (hf_family): one reading of config.json for check and fill ---- */

/* config.json keys of these classes that tessera cannot represent yet: refused naming the key and
 * its value (exit 2) unless null or absent. When
 * tessera gains the key, its row becomes a mapping (docs/models.md "Families (issue 67)"). */
static const struct unmapped {
    hf_arch arch;
    const char *key;
    const char *why;
} unmapped[] = {
    {HF_OLMO3, "rope_scaling", "Olmo 3 scales the full-attention layers' RoPE only; "
     "tessera's scaling applies to every layer"},
};

static void check_unmapped(checker *c, const json_value *r, hf_arch a) {
    char got[96];
    for (size_t i = 0; i < sizeof unmapped / sizeof unmapped[0]; i++) {
        const struct unmapped *u = &unmapped[i];
        const json_value *v = member(r, u->key);
        if (u->arch != a || !v || v->type == JSON_NULL) continue;
        json_describe(v, got, sizeof got);
        fault(c, TSR_EXIT_DATA, "%s = %s: not supported (%s); only null is accepted", u->key, got,
              u->why);
    }
}

#define HF_MAX_LAYERS 1024 /* of a class with layer_types (a model past it: raise it) */

/* The decoder variants config.json gives (the classes with hf_family.windows / .qpas). */
typedef struct hf_variants {
    char types[2048]; /* model.layer_types: the shortest pattern that repeats into every layer's */
    long window;      /* sliding_window (0: null) */
    int sliding[HF_MAX_LAYERS];
    double qpas;      /* query_pre_attn_scalar (0: not read) */
    double cap_attn, cap_final; /* the soft caps (0: null or not read) */
    double local;     /* rope_local_base_freq (0: not read) */
    int rope[HF_MAX_LAYERS]; /* no_rope_layers: 1 = RoPE (every layer when not read) */
    char nope[2048];  /* model.no_rope_layers: its shortest repeating pattern ("" = all RoPE) */
} hf_variants;

/* A soft cap of config.json: null is off (0), absent the class's default. 0 is refused: only null
 * means no cap to transformers, which computes cap tanh(x / cap) for any other value (0 gives 0 or
 * NaN logits), and tessera's 0 would import it as off. */
static double get_cap(checker *c, const json_value *r, const char *key, double def) {
    const json_value *v = member(r, key);
    if (v && v->type == JSON_NULL) return 0;
    double x = get_num(c, r, key, def);
    if (!(x > 0))
        fault(c, TSR_EXIT_DATA, "%s = %g: expected null or a cap > 0 (null is no cap; "
              "transformers computes cap x tanh(x / cap) for any other value)", key, x);
    return x;
}

/* A positive real of config.json that tessera's key reads 0 as unset (query_pre_attn_scalar,
 * rope_local_base_freq): 0 or less is no model's (transformers raises 0 to a negative power). */
static void positive(checker *c, const char *key, double x, const char *what) {
    if (!(x > 0)) fault(c, TSR_EXIT_DATA, "%s = %g: expected a number > 0 (%s)", key, x, what);
}

/* Each layer's type: layer_types, else sliding_window_pattern (older Gemma 3 files), else the
 * class's default (Olmo3Config: every 4th layer full; Gemma3TextConfig: every 6th; Gemma2Config:
 * every 2nd, layer 0 sliding). */
static void read_layer_types(checker *c, const json_value *r, hf_arch a, long L, hf_variants *v) {
    const json_value *lt = member(r, "layer_types");
    if (lt && lt->type != JSON_NULL) {
        if (lt->type != JSON_ARRAY || (long)lt->len != L)
            fault(c, TSR_EXIT_DATA, "layer_types is not a list of num_hidden_layers = %ld entries", L);
        const json_value *e = lt->type == JSON_ARRAY ? lt->child : NULL;
        for (long l = 0; !c->rc && l < L; l++, e = e->next) {
            int sl = e->type == JSON_STRING && !strcmp(e->str, "sliding_attention");
            if (!sl && (e->type != JSON_STRING || strcmp(e->str, "full_attention") != 0))
                fault(c, TSR_EXIT_DATA, "layer_types entry %ld is not \"sliding_attention\" or "
                      "\"full_attention\"", l);
            v->sliding[l] = sl;
        }
        return;
    }
    long p = get_int(c, r, "sliding_window_pattern", hf_family_of(a)->period);
    if (p < 1) fault(c, TSR_EXIT_DATA, "sliding_window_pattern = %ld, expected >= 1", p);
    for (long l = 0; l < L && p >= 1; l++) v->sliding[l] = (l + 1) % p != 0;
}

/* The shortest period p of x[0 .. L): x[l] = x[l % p] for every l. */
static long period_of(const int *x, long L) {
    long p = 1;
    while (p < L) {
        long l = p;
        while (l < L && x[l] == x[l % p]) l++;
        if (l == L) break;
        p++;
    }
    return p;
}

/* SmolLM3's no_rope_layers (at least num_hidden_layers entries of 0 or 1), else every
 * no_rope_layer_interval-th layer without RoPE (SmolLM3Config's default, 4); the pattern. */
static void read_nope(checker *c, const json_value *r, long L, hf_variants *v) {
    const json_value *nl = member(r, "no_rope_layers");
    long every = get_int(c, r, "no_rope_layer_interval", 4);
    if (nl && nl->type != JSON_NULL && (nl->type != JSON_ARRAY || (long)nl->len < L))
        fault(c, TSR_EXIT_DATA, "no_rope_layers is not a list of at least num_hidden_layers = %ld "
              "entries", L);
    else if ((!nl || nl->type == JSON_NULL) && every < 1)
        fault(c, TSR_EXIT_DATA, "no_rope_layer_interval = %ld, expected >= 1", every);
    const json_value *e = nl && nl->type == JSON_ARRAY ? nl->child : NULL;
    for (long l = 0; !c->rc && l < L; l++, e = e ? e->next : NULL) {
        v->rope[l] = e ? e->type == JSON_NUMBER && e->num == 1 : (l + 1) % every != 0;
        if (e && !(e->type == JSON_NUMBER && (e->num == 0 || e->num == 1)))
            fault(c, TSR_EXIT_DATA, "no_rope_layers entry %ld is not 0 or 1", l);
    }
    long p = period_of(v->rope, L), all = 1, n = 0;
    for (long l = 0; l < L; l++) all &= v->rope[l];
    for (long l = 0; !all && l < p; l++) /* at most 2 x HF_MAX_LAYERS bytes: it fits */
        n += snprintf(v->nope + n, sizeof v->nope - (size_t)n, "%s%d", l ? "," : "", v->rope[l]);
}

static void family_read(checker *c, const json_value *r, hf_arch a, long L, hf_variants *v) {
    memset(v, 0, sizeof *v);
    if (L < 1 || L > HF_MAX_LAYERS) {
        fault(c, TSR_EXIT_DATA, "num_hidden_layers = %ld: expected 1 to %d", L, HF_MAX_LAYERS);
        return;
    }
    const hf_family *f = hf_family_of(a);
    if (f->qpas) v->qpas = get_num(c, r, "query_pre_attn_scalar", 256);
    if (f->qpas) positive(c, "query_pre_attn_scalar", v->qpas, "the scores are q.k / sqrt(it)");
    if (f->softcap) {
        v->cap_attn = get_cap(c, r, "attn_logit_softcapping", f->cap_attn);
        v->cap_final = get_cap(c, r, "final_logit_softcapping", f->cap_final);
    }
    if (f->local_theta) v->local = local_base(c, r);
    if (f->local_theta)
        positive(c, rope_per_type(r, "sliding_attention") ? "rope_parameters.sliding_attention."
                 "rope_theta" : "rope_local_base_freq", v->local, "the sliding layers' RoPE base");
    for (long l = 0; l < L; l++) v->rope[l] = 1;
    if (f->nope) read_nope(c, r, L, v);
    if (!f->windows) return;
    read_layer_types(c, r, a, L, v);
    v->window = get_int(c, r, "sliding_window", f->gptoss ? 128 : 4096);
    int any = 0;
    long p = period_of(v->sliding, L);
    for (long l = 0; l < L; l++) any |= v->sliding[l];
    if (member(r, "sliding_window") && member(r, "sliding_window")->type == JSON_NULL) v->window = 0;
    if (any && v->window < 1)
        fault(c, TSR_EXIT_DATA, "sliding_window = %ld with sliding_attention layers: expected a "
              "window of at least 1 token", v->window);
    size_t n = 0;
    for (long l = 0; l < p; l++)
        n += (size_t)snprintf(v->types + n, sizeof v->types - n, "%s%s", l ? "," : "",
                              v->sliding[l] ? "sliding_attention" : "full_attention");
    if (n >= sizeof v->types) fault(c, TSR_EXIT_DATA, "layer_types: no pattern of %zu bytes "
                                    "repeats into it", sizeof v->types);
}

static const char *const place_word[] = {"pre", "sandwich", "post"};
static const char *const mlp_word[] = {"gelu", "swiglu", "geglu_tanh"};

/* The soft caps and Gemma 3's local base against the run's. Without scaling, a run with
 * model.rope_local_theta = 0 turns its sliding layers with rope_theta: the same as a local base
 * equal to it; with scaling, its sliding layers would be scaled where Gemma 3's are not. */
static void check_family_rope(checker *c, const hf_variants *v, const tsr_model_config *mc,
                              const hf_family *f) {
    same_num(c, "attn_logit_softcapping", v->cap_attn, "model.attn_logit_softcapping",
             mc->attn_logit_softcapping);
    same_num(c, "final_logit_softcapping", v->cap_final, "model.final_logit_softcapping",
             mc->final_logit_softcapping);
    if (!f->local_theta) return;
    int own = mc->rope_local_theta > 0 || mc->rope_scaling != TSR_ROPE_SCALING_NONE;
    same_num(c, "rope_local_base_freq", v->local, "model.rope_local_theta",
             own ? mc->rope_local_theta : mc->rope_theta);
}

/* The run's variants against the class's (hf_family) and config.json's. */
static void check_family(checker *c, const json_value *r, const tsr_model *m, hf_arch a) {
    const tsr_model_config *mc = &m->cfg;
    const hf_family *f = hf_family_of(a);
    hf_variants v;
    family_read(c, r, a, m->L, &v);
    const char *mt = hf_model_type[a];
    if (mc->norm_placement != f->place)
        fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has %s norms, but this run has "
              "model.norm_placement = \"%s\": set --set model.norm_placement=%s", mt,
              place_word[f->place], place_word[mc->norm_placement], place_word[f->place]);
    if (f->qk_norm && mc->qk_norm_scope != f->scope)
        fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has QK-norm over the %s, but this run has "
              "model.qk_norm_scope = \"%s\": set --set model.qk_norm_scope=%s", mt,
              f->scope ? "projection" : "head", mc->qk_norm_scope ? "projection" : "head",
              f->scope ? "projection" : "head");
    if (mc->embed_scale != f->embed)
        fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" %s the embedding by sqrt(hidden_size), but "
              "this run has model.embed_scale = \"%s\": set --set model.embed_scale=%s", mt,
              f->embed ? "scales" : "does not scale", mc->embed_scale ? "sqrt_d_model" : "none",
              f->embed ? "sqrt_d_model" : "none");
    if (mc->attn_sinks != f->gptoss)
        fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has %s, but this run has model.attn_sinks = "
              "%s: set --set model.attn_sinks=%s", mt, f->gptoss ? "attention sinks" :
              "no attention sinks", mc->attn_sinks ? "true" : "false", f->gptoss ? "true" : "false");
    double q = v.qpas > 0 ? v.qpas : m->hs, run = mc->query_pre_attn_scalar > 0 ? mc->query_pre_attn_scalar : m->hs;
    if (!c->rc && q != run)
        fault(c, TSR_EXIT_USAGE, "query_pre_attn_scalar = %g, but this run's is %g: set --set "
              "model.query_pre_attn_scalar=%g", q, run, q);
    check_family_rope(c, &v, mc, f);
    for (int l = 0; l < m->L && !c->rc; l++)
        if (config_layer_rope(mc, l) != v.rope[l])
            fault(c, TSR_EXIT_USAGE, "layer %d %s RoPE (no_rope_layers), but this run's %s: set "
                  "--set model.no_rope_layers=%s", l, v.rope[l] ? "uses" : "has no",
                  v.rope[l] ? "has none" : "does", v.nope[0] ? v.nope : "\"\"");
    for (int l = 0; l < m->L && !c->rc; l++) {
        int want = v.sliding[l] ? (int)v.window : 0;
        if (config_layer_window(mc, l) != want)
            fault(c, TSR_EXIT_USAGE, "layer %d is %s (layer_types, sliding_window = %ld), but this "
                  "run's attends %s: set --set model.layer_types=%s --set model.sliding_window=%ld",
                  l, want ? "sliding_attention" : "full_attention", v.window,
                  config_layer_window(mc, l) ? "through a window" : "fully",
                  v.types[0] ? v.types : "full_attention", v.window);
    }
}

/* transformers' head_dim when config.json has none: Qwen3Config 128, Gemma 256, GptOssConfig 64,
 * else C / NH. */
static long default_head_dim(hf_arch a, long C, long NH) {
    if (a == HF_QWEN3) return 128;
    if (a == HF_GPTOSS) return 64;
    if (hf_family_of(a)->mlp == TSR_MLP_GEGLU_TANH) return 256;
    return NH > 0 ? C / NH : 0;
}

/* The gate's activation: silu (SwiGLU), or Gemma's hidden_activation gelu_pytorch_tanh. */
static void check_act(checker *c, const json_value *r, hf_arch a) {
    if (hf_family_of(a)->mlp == TSR_MLP_GEGLU_TANH) {
        const char *act = get_str(c, r, "hidden_activation", "gelu_pytorch_tanh");
        if (strcmp(act, "gelu_pytorch_tanh") != 0)
            fault(c, TSR_EXIT_DATA, "hidden_activation = \"%s\": tessera's GeGLU gates with the "
                  "tanh GELU (gelu_pytorch_tanh) only", act);
        return;
    }
    const char *act = get_str(c, r, "hidden_act", "silu");
    if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
        fault(c, TSR_EXIT_DATA, "hidden_act = \"%s\": tessera's SwiGLU gates with silu only", act);
}

static void check_llama(checker *c, const json_value *r, const tsr_model *m, hf_arch a) {
    const tsr_model_config *mc = &m->cfg;
    const struct llama_defaults *d = &llama_def[a];
    const char *mlp = mlp_word[hf_family_of(a)->mlp];
    if (mc->pos != TSR_POS_ROPE || mc->norm != TSR_NORM_RMSNORM || mc->mlp != hf_family_of(a)->mlp) {
        fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" (RoPE, RMSNorm, %s), but this run has "
              "model.pos = \"%s\", model.norm = \"%s\", model.mlp = \"%s\": set --set model.pos=rope "
              "--set model.norm=rmsnorm --set model.mlp=%s", hf_model_type[a], mlp,
              mc->pos == TSR_POS_ROPE ? "rope" : mc->pos == TSR_POS_ALIBI ? "alibi" : "learned",
              mc->norm == TSR_NORM_RMSNORM ? "rmsnorm" : "layernorm", mlp_word[mc->mlp], mlp);
        return;
    }
    long C = get_int(c, r, "hidden_size", d->hidden), NH = get_int(c, r, "num_attention_heads", d->heads);
    same(c, "num_hidden_layers", get_int(c, r, "num_hidden_layers", d->layers), "model.n_layer", mc->n_layer, "");
    same(c, "hidden_size", C, "model.d_model", mc->d_model, "");
    same(c, "num_attention_heads", NH, "model.n_head", mc->n_head, "");
    same(c, "num_key_value_heads", get_int(c, r, "num_key_value_heads", d->kv ? d->kv : NH),
         "model.n_kv_head", m->KVH, "");
    long hs = get_int(c, r, "head_dim", default_head_dim(a, C, NH));
    same(c, "head_dim", hs, "model.head_dim", m->hs, "");
    if (!hf_arch_moe(a) || m->LD) /* the dense MLP (Mixtral's intermediate_size: the experts') */
        same(c, "intermediate_size", get_int(c, r, "intermediate_size", d->inter),
             "model.intermediate_size", m->F, "");
    same(c, "vocab_size", get_int(c, r, "vocab_size", d->vocab), "model.vocab_size", mc->vocab_size, "");
    check_act(c, r, a);
    same_num(c, "rms_norm_eps", get_num(c, r, "rms_norm_eps", default_eps(a)), "model.norm_eps",
             mc->norm_eps);
    check_unmapped(c, r, a);
    check_rope(c, r, mc, a);
    check_llama_extras(c, r, mc, a);
    check_window(c, r, m, a);
    check_family(c, r, m, a);
}

/* quantization_config: absent or null, or MXFP4 experts of gpt-oss (out->mxfp4; hf_gptoss.h). */
static void check_quant(checker *c, const json_value *r, hf_config *out) {
    const json_value *q = member(r, "quantization_config");
    out->mxfp4 = 0;
    if (!q || q->type == JSON_NULL) return;
    const char *how = get_str(c, q, "quant_method", "");
    if (out->arch == HF_GPTOSS && !strcmp(how, "mxfp4"))
        out->mxfp4 = 1;
    else if (!c->rc)
        fault(c, TSR_EXIT_DATA, "quantization_config.quant_method = \"%s\": tessera reads "
              "unquantised weights, and gpt-oss's MXFP4 experts (\"mxfp4\") only", how);
}

int hf_config_check(const char *path, const tsr_model *m, int notes, hf_config *out) {
    char *text;
    size_t n;
    int rc = fs_read_all(path, 0, &text, &n);
    if (rc) return rc;
    json_doc doc;
    json_doc_init(&doc);
    json_value *root = NULL;
    json_error err;
    checker c = {path, NULL, 0, notes};
    if (json_parse(&doc, text, n, &root, &err) != 0)
        fault(&c, TSR_EXIT_DATA, "not valid JSON: %s at byte %zu", err.msg, err.pos);
    else if (root->type != JSON_OBJECT)
        fault(&c, TSR_EXIT_DATA, "a JSON %s, expected an object", json_type_name(root->type));
    const char *mt = c.rc ? "" : get_str(&c, root, "model_type", "");
    if (!c.rc && (out->arch = hf_arch_named(mt)) == HF_ARCH_COUNT) unknown_type(&c, mt);
    const hf_hybrid *hy = c.rc ? NULL : hf_hybrid_of(out->arch);
    if (!c.rc) {
        if (out->arch == HF_GPT2) check_gpt2(&c, root, m);
        else if (out->arch == HF_MPT) check_mpt(&c, root, m);
        else if (hy) c.rc = hf_qwen3next_check(root, path, out->arch, m);
        else check_llama(&c, root, m, out->arch);
        if (!hy) check_moe(&c, root, m, out->arch);
        check_quant(&c, root, out);
        if (out->arch < HF_LLAMA) check_eps(&c, root);
        const json_value *tr = hy && hy->nest ? json_get(root, hy->nest) : NULL; /* (checked) */
        out->tied = get_bool(&c, tr && json_get(tr, "tie_word_embeddings") ? tr : root,
                             "tie_word_embeddings", out->arch < HF_LLAMA ||
                             hf_family_of(out->arch)->tied);
        if (out->arch >= HF_LLAMA)
            same_bool(&c, "tie_word_embeddings", out->tied, "model.tie_embeddings",
                      m->cfg.tie_embeddings);
    }
    json_doc_free(&doc);
    free(text);
    return c.rc;
}

/* ================================ filling a run's config ================================ */

typedef struct filler {
    checker c;
    tsr_config_fill *f;
} filler;

/* One entry: the run's key gets value; from says where config.json states it. */
static void put(filler *F, int soft, const char *run_key, const char *value, const char *from) {
    tsr_config_fill *f = F->f;
    if (f->n == TSR_FILL_MAX) tsr_die(TSR_EXIT_INTERNAL, "hf_config_fill: raise TSR_FILL_MAX");
    snprintf(f->kv[f->n].key, sizeof f->kv[0].key, "%s", run_key);
    snprintf(f->kv[f->n].value, sizeof f->kv[0].value, "%s", value);
    snprintf(f->kv[f->n].from, sizeof f->kv[0].from, "config.json has %.79s", from);
    f->kv[f->n++].soft = soft;
}

/* A key's value as config.json states it, or transformers' default when absent. */
static void put_key(filler *F, int soft, const char *run_key, const json_value *obj,
                    const char *hf_key, const char *value) {
    char from[96];
    if (member(obj, hf_key)) snprintf(from, sizeof from, "%s = %s", hf_key, value);
    else snprintf(from, sizeof from, "no %s (transformers' default: %s)", hf_key, value);
    put(F, soft, run_key, value, from);
}

/* A size or count (absent: def). Below 1 is no model's: tessera reads 0 of some of these keys as
 * "derived" (model.n_kv_head, head_dim, intermediate_size), which config.json's 0 is not. */
static void put_int(filler *F, int soft, const char *run_key, const char *hf_key, long def) {
    char v[32];
    long x = get_int(&F->c, F->c.root, hf_key, def);
    if (x < 1) fault(&F->c, TSR_EXIT_DATA, "%s = %ld: expected an integer >= 1 (a size or count)",
                     hf_key, x);
    snprintf(v, sizeof v, "%ld", x);
    put_key(F, soft, run_key, F->c.root, hf_key, v);
}

static void put_num(filler *F, const char *run_key, const json_value *obj, const char *hf_key,
                    double def) {
    char v[32];
    put_key(F, 0, run_key, obj, hf_key, json_double(v, sizeof v, get_num(&F->c, obj, hf_key, def)));
}

static void put_bool(filler *F, const char *run_key, const char *hf_key, int def) {
    put_key(F, 0, run_key, F->c.root, hf_key,
            get_bool(&F->c, F->c.root, hf_key, def) ? "true" : "false");
}

/* A value the model_type implies ("model_type \"qwen2\" (q, k, v biases)"). */
static void put_word(filler *F, const char *run_key, const char *word, hf_arch a, const char *what) {
    char from[96];
    snprintf(from, sizeof from, "model_type \"%s\" (%s)", hf_model_type[a], what);
    put(F, 0, run_key, word, from);
}

/* A scaling's original_max_position_embeddings (absent: def). */
static void put_original(filler *F, const json_value *rs, long def) {
    char v[32];
    snprintf(v, sizeof v, "%ld", get_int(&F->c, rs, "original_max_position_embeddings", def));
    put_key(F, 0, "model.rope_original_max_pos", rs, "original_max_position_embeddings", v);
}

/* rope_theta and the scaling (rope_scaling, or transformers 5's rope_parameters): Llama 3's,
 * linear (Gemma) or YaRN (gpt-oss); another type fills nothing (hf_config_check refuses it by
 * name, as it refuses linear or YaRN for a class without them). */
static void fill_rope(filler *F, hf_arch a) {
    const json_value *r = F->c.root;
    const char *key;
    const json_value *rs = rope_object(r, &key);
    int obj = rs && rs->type == JSON_OBJECT;
    const char *type = obj ? get_str(&F->c, rs, "rope_type", get_str(&F->c, rs, "type", "default")) : "default";
    if (obj && member(rs, "rope_theta")) put_num(F, "model.rope_theta", rs, "rope_theta", 10000);
    else put_num(F, "model.rope_theta", r, "rope_theta", default_theta(a));
    char from[96];
    snprintf(from, sizeof from, "%s of type \"%s\"", key, type);
    if (!strcmp(type, "default")) put(F, 0, "model.rope_scaling", "none", from);
    if (!strcmp(type, "linear")) { /* hf_config_check refuses it for a class without it */
        put(F, 0, "model.rope_scaling", "linear", from);
        put_num(F, "model.rope_factor", rs, "factor", 1);
    }
    if (!strcmp(type, "yarn")) { /* gpt-oss; hf_config_check refuses it for a class without it */
        put(F, 0, "model.rope_scaling", "yarn", from);
        put_num(F, "model.rope_factor", rs, "factor", 32);
        put_num(F, "model.rope_beta_fast", rs, "beta_fast", 32);
        put_num(F, "model.rope_beta_slow", rs, "beta_slow", 1);
        put_key(F, 0, "model.rope_truncate", rs, "truncate",
                get_bool(&F->c, rs, "truncate", 1) ? "true" : "false");
        put_original(F, rs, 4096);
    }
    if (strcmp(type, "llama3") != 0) return;
    put(F, 0, "model.rope_scaling", "llama3", from);
    put_num(F, "model.rope_factor", rs, "factor", 8);
    put_num(F, "model.rope_low_freq_factor", rs, "low_freq_factor", 1);
    put_num(F, "model.rope_high_freq_factor", rs, "high_freq_factor", 4);
    put_original(F, rs, 8192);
}

/* GptOssForCausalLM's router and experts (docs/moe.md "gpt-oss's experts"). */
static void fill_gptoss(filler *F, hf_arch a) {
    put_word(F, "model.moe_router_bias", "true", a, "a router bias");
    put_word(F, "model.moe_expert_bias", "true", a, "expert biases");
    put_word(F, "model.moe_act", "gptoss", a, "the clamped unit");
    put_num(F, "model.swiglu_limit", F->c.root, "swiglu_limit", 7.0);
    put_word(F, "model.attn_sinks", "true", a, "a sink logit per head");
}

static void fill_moe(filler *F, hf_arch a) {
    int mix = a == HF_MIXTRAL || a == HF_GPTOSS, oss = a == HF_GPTOSS;
    put_int(F, 0, "model.moe_experts", mix ? "num_local_experts" : "num_experts", mix && !oss ? 8 : 128);
    put_int(F, 0, "model.moe_top_k", "num_experts_per_tok", oss ? 4 : mix ? 2 : 8);
    put_int(F, 0, "model.moe_intermediate_size", mix ? "intermediate_size" : "moe_intermediate_size",
            oss ? 2880 : mix ? 14336 : 768);
    if (oss) fill_gptoss(F, a);
    put_word(F, "model.moe_shared_size", "0", a, "no shared expert");
    if (mix) {
        put_word(F, "model.moe_every", "1", a, "experts in every layer");
        put_word(F, "model.moe_norm_topk", "true", a, "renormalised top-k weights");
    } else {
        put_int(F, 0, "model.moe_every", "decoder_sparse_step", 1);
        put_bool(F, "model.moe_norm_topk", "norm_topk_prob", 0);
    }
}

/* A soft cap read by family_read (0: off). */
static void put_cap(filler *F, const char *run_key, const char *hf_key, double cap) {
    char v[32];
    put_key(F, 0, run_key, F->c.root, hf_key, json_double(v, sizeof v, cap));
}

/* The variant keys of the issue-67 classes (hf_family, family_read). */
static void fill_family(filler *F, hf_arch a, long L) {
    const hf_family *f = hf_family_of(a);
    hf_variants v;
    char val[32];
    check_unmapped(&F->c, F->c.root, a);
    family_read(&F->c, F->c.root, a, L, &v);
    if (F->c.rc) return;
    put_word(F, "model.norm_placement", place_word[f->place], a, f->place == TSR_NPLACE_POST ?
             "norms after the attention and the MLP" : "norms before and after both branches");
    put_word(F, "model.qk_norm_scope", f->scope ? "projection" : "head", a,
             f->scope ? "QK-norm over the projections" : "QK-norm per head");
    put_word(F, "model.embed_scale", f->embed ? "sqrt_d_model" : "none", a,
             f->embed ? "the embedding times sqrt(hidden_size)" : "no embedding scale");
    if (f->qpas) put_num(F, "model.query_pre_attn_scalar", F->c.root, "query_pre_attn_scalar", 256);
    if (f->softcap) {
        put_cap(F, "model.attn_logit_softcapping", "attn_logit_softcapping", v.cap_attn);
        put_cap(F, "model.final_logit_softcapping", "final_logit_softcapping", v.cap_final);
    }
    const json_value *sl = rope_per_type(F->c.root, "sliding_attention");
    if (f->local_theta)
        put_num(F, "model.rope_local_theta", sl ? sl : F->c.root,
                sl ? "rope_theta" : "rope_local_base_freq", 10000);
    if (f->nope) put(F, 0, "model.no_rope_layers", v.nope, "no_rope_layers (its shortest repeating "
                     "pattern; \"\": every layer turns by RoPE)");
    if (!f->windows) return;
    put(F, 0, "model.layer_types", v.types, "layer_types (its shortest repeating pattern)");
    snprintf(val, sizeof val, "%ld", v.window);
    put(F, 0, "model.sliding_window", val, member(F->c.root, "sliding_window") ? "sliding_window"
        : f->gptoss ? "no sliding_window (transformers' default: 128)"
        : "no sliding_window (transformers' default: 4096)");
}

static void fill_llama(filler *F, hf_arch a) {
    const struct llama_defaults *d = &llama_def[a];
    const json_value *r = F->c.root;
    put_word(F, "model.pos", "rope", a, "RoPE");
    put_word(F, "model.norm", "rmsnorm", a, "RMSNorm");
    put_word(F, "model.mlp", mlp_word[hf_family_of(a)->mlp], a,
             hf_family_of(a)->mlp == TSR_MLP_GEGLU_TANH ? "GeGLU with the tanh GELU" : "a SwiGLU MLP");
    put_int(F, 0, "model.n_layer", "num_hidden_layers", d->layers);
    long C = get_int(&F->c, r, "hidden_size", d->hidden), NH = get_int(&F->c, r, "num_attention_heads", d->heads);
    put_int(F, 0, "model.d_model", "hidden_size", d->hidden);
    put_int(F, 0, "model.n_head", "num_attention_heads", d->heads);
    put_int(F, 0, "model.n_kv_head", "num_key_value_heads", d->kv ? d->kv : NH);
    put_int(F, 0, "model.head_dim", "head_dim", default_head_dim(a, C, NH));
    if (a != HF_MIXTRAL) put_int(F, 0, "model.intermediate_size", "intermediate_size", d->inter);
    put_int(F, 0, "model.vocab_size", "vocab_size", d->vocab);
    put_num(F, "model.norm_eps", r, "rms_norm_eps", default_eps(a));
    fill_rope(F, a);
    int lb = hf_family_of(a)->llama_bias || a == HF_GPTOSS;
    if (lb) put_bool(F, "model.bias", "attention_bias", a == HF_GPTOSS);
    else put_word(F, "model.bias", "false", a, "no o_proj or MLP biases");
    if (lb && !get_bool(&F->c, r, "attention_bias", a == HF_GPTOSS))
        put_word(F, "model.qkv_bias", "false", a, "no q/k/v biases without attention_bias");
    else if (!lb)
        put_word(F, "model.qkv_bias", a == HF_QWEN2 ? "true" : "false", a,
                 a == HF_QWEN2 ? "q/k/v biases" : "no q/k/v biases");
    put_word(F, "model.qk_norm", hf_arch_qk_norm(a) ? "true" : "false", a,
             hf_arch_qk_norm(a) ? "QK-norm" : "no QK-norm");
    put_bool(F, "model.tie_embeddings", "tie_word_embeddings", hf_family_of(a)->tied);
    if (member(r, "max_position_embeddings")) /* the model's context (informational with RoPE) */
        put_int(F, 1, "model.max_seq_len", "max_position_embeddings", 0);
    if (hf_arch_moe(a)) fill_moe(F, a);
    else put_word(F, "model.moe_experts", "0", a, "no experts");
    if (a >= HF_OLMO2) fill_family(F, a, get_int(&F->c, r, "num_hidden_layers", d->layers));
}

static void fill_gpt2_mpt(filler *F, hf_arch a) {
    const json_value *r = F->c.root;
    int gpt2 = a == HF_GPT2;
    put_word(F, "model.pos", gpt2 ? "learned" : "alibi", a, gpt2 ? "learned positions" : "ALiBi");
    put_word(F, "model.norm", "layernorm", a, "LayerNorm");
    put_word(F, "model.mlp", "gelu", a, "a GELU MLP");
    put_word(F, "model.moe_experts", "0", a, "no experts");
    put_int(F, 0, "model.n_layer", gpt2 ? "n_layer" : "n_layers", gpt2 ? 12 : 24);
    put_int(F, 0, "model.d_model", gpt2 ? "n_embd" : "d_model", gpt2 ? 768 : 2048);
    put_int(F, 0, "model.n_head", gpt2 ? "n_head" : "n_heads", gpt2 ? 12 : 16);
    put_int(F, 0, "model.vocab_size", "vocab_size", gpt2 ? 50257 : 50368);
    put_int(F, !gpt2, "model.max_seq_len", gpt2 ? "n_positions" : "max_seq_len", gpt2 ? 1024 : 2048);
    if (!gpt2) {
        put_word(F, "model.bias", "false", a, "no biases");
        put_word(F, "model.gelu", "exact", a, "the exact GELU");
        put_num(F, "model.expansion_ratio", r, "expansion_ratio", 4);
        return;
    }
    long C = get_int(&F->c, r, "n_embd", 768), Fw = get_int(&F->c, r, "n_inner", 4 * C);
    char v[32], from[96];
    json_double(v, sizeof v, C > 0 ? (double)Fw / (double)C : 4);
    snprintf(from, sizeof from, "n_inner = %ld at n_embd = %ld", Fw, C);
    put(F, 0, "model.expansion_ratio", v, from);
    const char *act = get_str(&F->c, r, "activation_function", "gelu_new");
    snprintf(from, sizeof from, "activation_function = \"%s\"", act);
    put(F, 0, "model.gelu", strcmp(act, "gelu") ? "tanh" : "exact", from);
    put_word(F, "model.bias", "true", a, "biases; a run without them takes all-zero ones");
    F->f->kv[F->f->n - 1].soft = 1;
}

int hf_config_fill(const char *dir, tsr_config_fill *f) {
    memset(f, 0, sizeof *f);
    if (tsr_snprintf(f->source, sizeof f->source, "%s/config.json", dir)) {
        tsr_error("%.200s...: path too long", dir);
        return TSR_EXIT_USAGE;
    }
    char *text;
    size_t n;
    int rc = fs_read_all(f->source, 0, &text, &n);
    if (rc) return rc;
    json_doc doc;
    json_doc_init(&doc);
    json_error err;
    json_value *root = NULL;
    filler F = {{f->source, NULL, 0, 0}, f};
    if (json_parse(&doc, text, n, &root, &err) != 0)
        fault(&F.c, TSR_EXIT_DATA, "not valid JSON: %s at byte %zu", err.msg, err.pos);
    else if (root->type != JSON_OBJECT)
        fault(&F.c, TSR_EXIT_DATA, "a JSON %s, expected an object", json_type_name(root->type));
    F.c.root = root;
    const char *mt = F.c.rc ? "" : get_str(&F.c, root, "model_type", "");
    hf_arch a = F.c.rc ? HF_ARCH_COUNT : hf_arch_named(mt);
    if (!F.c.rc && a == HF_ARCH_COUNT) unknown_type(&F.c, mt);
    if (!F.c.rc) {
        if (a < HF_LLAMA) fill_gpt2_mpt(&F, a);
        else if (hf_hybrid_of(a)) F.c.rc = hf_qwen3next_fill(root, f->source, a, f);
        else fill_llama(&F, a);
    }
    json_doc_free(&doc);
    free(text);
    return F.c.rc;
}

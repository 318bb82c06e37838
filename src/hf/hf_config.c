/* hf_config.c — config.json of a transformers directory: written on export, checked on import.
 *
 * Keys are those of transformers' GPT2Config and MptConfig. Written: the sizes, the GELU form,
 * LayerNorm eps = 1e-5 (TSR_LN_EPS, kernels/ops.h), dropout 0 (tessera trains without dropout, so
 * a transformers finetune starts from the same function), tied embeddings. Read: a key that is
 * absent takes transformers' default for it, as transformers itself would do.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf_internal.h"
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

int hf_config_write(const char *path, const tsr_model *m, hf_arch a, const char *torch_dtype,
                    long eot) {
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
    } else {
        add(&b, "  \"vocab_size\": %d,\n  \"max_seq_len\": %d,\n  \"d_model\": %d,\n  \"n_layers\": %d,\n"
                "  \"n_heads\": %d,\n  \"expansion_ratio\": 4,\n  \"layer_norm_epsilon\": %g,\n"
                "  \"no_bias\": true,\n  \"learned_pos_emb\": false,\n  \"resid_pdrop\": 0.0,\n"
                "  \"emb_pdrop\": 0.0,\n  \"logit_scale\": null,\n  \"embedding_fraction\": 1.0,\n"
                "  \"norm_type\": \"low_precision_layernorm\",\n  \"init_device\": \"cpu\",\n"
                "  \"attn_config\": {\n    \"attn_type\": \"multihead_attention\",\n"
                "    \"attn_impl\": \"torch\",\n    \"attn_pdrop\": 0.0,\n    \"alibi\": true,\n"
                "    \"alibi_bias_max\": 8,\n    \"clip_qkv\": null,\n    \"softmax_scale\": null,\n"
                "    \"qk_ln\": false,\n    \"prefix_lm\": false,\n    \"attn_uses_sequence_id\": false\n"
                "  },\n",
            m->V, m->maxT, m->C, m->L, m->NH, (double)TSR_LN_EPS);
    }
    add(&b, "  \"initializer_range\": %.17g,\n  \"tie_word_embeddings\": true,\n  \"use_cache\": true,\n",
        m->cfg.init_std);
    if (eot >= 0) add(&b, "  \"bos_token_id\": %ld,\n  \"eos_token_id\": %ld,\n", eot, eot);
    add(&b, "  \"torch_dtype\": \"%s\"\n}\n", torch_dtype);
    if (b.overflow) tsr_die(TSR_EXIT_INTERNAL, "config.json: text buffer too small");
    return hf_write_file(path, b.s, b.n);
}

/* ================================ checking ================================ */

typedef struct checker {
    const char *path;
    const json_value *root;
    int rc; /* the first fault's status; later faults are not reported */
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
        fault(c, TSR_EXIT_DATA, "%s is %s, expected an integer", key,
              v->type == JSON_NUMBER ? "not an integer" : json_type_name(v->type));
        return def;
    }
    return (long)v->num;
}

static double get_num(checker *c, const json_value *obj, const char *key, double def) {
    const json_value *v = member(obj, key);
    if (!v) return def;
    if (v->type != JSON_NUMBER) {
        fault(c, TSR_EXIT_DATA, "%s is a JSON %s, expected a number", key, json_type_name(v->type));
        return def;
    }
    return v->num;
}

static int get_bool(checker *c, const json_value *obj, const char *key, int def) {
    const json_value *v = member(obj, key);
    if (!v) return def;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE) {
        fault(c, TSR_EXIT_DATA, "%s is a JSON %s, expected true or false", key, json_type_name(v->type));
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
        fault(c, TSR_EXIT_DATA, "%s is a JSON %s, expected a string", key, json_type_name(v->type));
        return def;
    }
    return v->str;
}

/* config.json's size `key` must equal the run's `run_key`: exit 1 naming both. */
static void same(checker *c, const char *key, long hf, const char *run_key, long run, const char *note) {
    if (hf != run)
        fault(c, TSR_EXIT_USAGE, "%s = %ld, but this run has %s = %ld%s: the weights do not fit the "
              "run's model; set --set %s=%ld (or start from weights of the run's shape)", key, hf,
              run_key, run, note, run_key, hf);
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

int hf_config_check(const char *path, const tsr_model *m, hf_config *out) {
    char *text;
    size_t n;
    int rc = fs_read_all(path, 0, &text, &n);
    if (rc) return rc;
    json_doc doc;
    json_doc_init(&doc);
    json_value *root = NULL;
    json_error err;
    checker c = {path, NULL, 0};
    if (json_parse(&doc, text, n, &root, &err) != 0)
        fault(&c, TSR_EXIT_DATA, "not valid JSON: %s at byte %zu", err.msg, err.pos);
    else if (root->type != JSON_OBJECT)
        fault(&c, TSR_EXIT_DATA, "a JSON %s, expected an object", json_type_name(root->type));
    const char *mt = c.rc ? "" : get_str(&c, root, "model_type", "");
    if (!c.rc) {
        if (!strcmp(mt, "gpt2")) out->arch = HF_GPT2;
        else if (!strcmp(mt, "mpt")) out->arch = HF_MPT;
        else fault(&c, TSR_EXIT_DATA, "model_type = \"%s\": tessera imports \"gpt2\" "
                   "(GPT2LMHeadModel) and \"mpt\" (MptForCausalLM) only", mt);
    }
    if (!c.rc) {
        if (out->arch == HF_GPT2) check_gpt2(&c, root, m);
        else check_mpt(&c, root, m);
        check_eps(&c, root);
        out->tied = get_bool(&c, root, "tie_word_embeddings", 1);
    }
    json_doc_free(&doc);
    free(text);
    return c.rc;
}

/* hf_variants.c — the decoder variants of the Llama family's classes (issue 67: norm placement,
 * QK-norm's scope, the embedding scale, sliding windows, query_pre_attn_scalar, the soft caps,
 * Gemma 3's local RoPE base, SmolLM3's NoPE layers) as config.json states them: one reading of
 * the keys for the check and the fill, their writing, and what a model's variants need of a class
 * (hf_llama.h). Each class says which keys it has by its row's flags (hf_family.h).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hf/hf_llama.h"

const char *const hf_place_word[] = {"pre", "sandwich", "post"};
const char *const hf_mlp_word[] = {"gelu", "swiglu", "geglu_tanh"};
static const char *const scope_word[] = {"head", "projection"};
_Static_assert(sizeof hf_place_word / sizeof hf_place_word[0] == TSR_NPLACE_COUNT, "a word each");
_Static_assert(sizeof hf_mlp_word / sizeof hf_mlp_word[0] == TSR_MLP_COUNT, "a word each");
_Static_assert(sizeof scope_word / sizeof scope_word[0] == TSR_QKN_COUNT, "a word each");

int hf_has_window(const tsr_model_config *c) {
    for (int l = 0; l < c->n_layer; l++)
        if (config_layer_window(c, l) > 0) return 1;
    return 0;
}

/* ---- reading ---- */

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
static double get_cap(hf_reader *c, const json_value *r, const char *key, double def) {
    const json_value *v = hfr_member(r, key);
    if (v && v->type == JSON_NULL) return 0;
    double x = hfr_num(c, r, key, def);
    if (!(x > 0))
        hfr_fault(c, TSR_EXIT_DATA, "%s = %g: expected null or a cap > 0 (null is no cap; "
                  "transformers computes cap x tanh(x / cap) for any other value)", key, x);
    return x;
}

/* A positive real of config.json that tessera's key reads 0 as unset (query_pre_attn_scalar,
 * rope_local_base_freq): 0 or less is no model's (transformers raises 0 to a negative power). */
static void positive(hf_reader *c, const char *key, double x, const char *what) {
    if (!(x > 0)) hfr_fault(c, TSR_EXIT_DATA, "%s = %g: expected a number > 0 (%s)", key, x, what);
}

/* Each layer's type: layer_types, else sliding_window_pattern (older Gemma 3 files), else the
 * class's default (Olmo3Config: every 4th layer full; Gemma3TextConfig: every 6th; Gemma2Config:
 * every 2nd, layer 0 sliding). */
static void read_layer_types(hf_reader *c, const json_value *r, const hf_family *f, long L,
                             hf_variants *v) {
    const json_value *lt = hfr_member(r, "layer_types");
    if (lt && lt->type != JSON_NULL) {
        if (lt->type != JSON_ARRAY || (long)lt->len != L)
            hfr_fault(c, TSR_EXIT_DATA, "layer_types is not a list of num_hidden_layers = %ld "
                      "entries", L);
        const json_value *e = lt->type == JSON_ARRAY ? lt->child : NULL;
        for (long l = 0; !c->rc && l < L; l++, e = e->next) {
            int sl = e->type == JSON_STRING && !strcmp(e->str, "sliding_attention");
            if (!sl && (e->type != JSON_STRING || strcmp(e->str, "full_attention") != 0))
                hfr_fault(c, TSR_EXIT_DATA, "layer_types entry %ld is not \"sliding_attention\" or "
                          "\"full_attention\"", l);
            v->sliding[l] = sl;
        }
        return;
    }
    long p = hfr_int(c, r, "sliding_window_pattern", f->period);
    if (p < 1) hfr_fault(c, TSR_EXIT_DATA, "sliding_window_pattern = %ld, expected >= 1", p);
    for (long l = 0; l < L && p >= 1; l++) v->sliding[l] = (l + 1) % p != 0;
}

long hf_period_of(const int *x, long L) {
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
static void read_nope(hf_reader *c, const json_value *r, long L, hf_variants *v) {
    const json_value *nl = hfr_member(r, "no_rope_layers");
    long every = hfr_int(c, r, "no_rope_layer_interval", 4);
    if (nl && nl->type != JSON_NULL && (nl->type != JSON_ARRAY || (long)nl->len < L))
        hfr_fault(c, TSR_EXIT_DATA, "no_rope_layers is not a list of at least num_hidden_layers = "
                  "%ld entries", L);
    else if ((!nl || nl->type == JSON_NULL) && every < 1)
        hfr_fault(c, TSR_EXIT_DATA, "no_rope_layer_interval = %ld, expected >= 1", every);
    const json_value *e = nl && nl->type == JSON_ARRAY ? nl->child : NULL;
    for (long l = 0; !c->rc && l < L; l++, e = e ? e->next : NULL) {
        v->rope[l] = e ? e->type == JSON_NUMBER && e->num == 1 : (l + 1) % every != 0;
        if (e && !(e->type == JSON_NUMBER && (e->num == 0 || e->num == 1)))
            hfr_fault(c, TSR_EXIT_DATA, "no_rope_layers entry %ld is not 0 or 1", l);
    }
    long p = hf_period_of(v->rope, L), all = 1, n = 0;
    for (long l = 0; l < L; l++) all &= v->rope[l];
    for (long l = 0; !all && l < p; l++) /* at most 2 x HF_MAX_LAYERS bytes: it fits */
        n += snprintf(v->nope + n, sizeof v->nope - (size_t)n, "%s%d", l ? "," : "", v->rope[l]);
}

/* The windows: each layer's type and sliding_window, and the pattern of the types. */
static void read_windows(hf_reader *c, const json_value *r, const hf_family *f, long L,
                         hf_variants *v) {
    read_layer_types(c, r, f, L, v);
    v->window = hfr_int(c, r, "sliding_window", f->def.window);
    int any = 0;
    long p = hf_period_of(v->sliding, L);
    for (long l = 0; l < L; l++) any |= v->sliding[l];
    if (hfr_member(r, "sliding_window") && hfr_member(r, "sliding_window")->type == JSON_NULL)
        v->window = 0;
    if (any && v->window < 1)
        hfr_fault(c, TSR_EXIT_DATA, "sliding_window = %ld with sliding_attention layers: expected "
                  "a window of at least 1 token", v->window);
    size_t n = 0;
    for (long l = 0; l < p; l++)
        n += (size_t)snprintf(v->types + n, sizeof v->types - n, "%s%s", l ? "," : "",
                              v->sliding[l] ? "sliding_attention" : "full_attention");
    if (n >= sizeof v->types) hfr_fault(c, TSR_EXIT_DATA, "layer_types: no pattern of %zu bytes "
                                        "repeats into it", sizeof v->types);
}

/* One reading of config.json's variant keys (L: its layer count) for the check and the fill. */
static void variants_read(hf_reader *c, const json_value *r, const hf_family *f, long L,
                          hf_variants *v) {
    memset(v, 0, sizeof *v);
    if (L < 1 || L > HF_MAX_LAYERS) {
        hfr_fault(c, TSR_EXIT_DATA, "num_hidden_layers = %ld: expected 1 to %d", L, HF_MAX_LAYERS);
        return;
    }
    if (f->qpas) v->qpas = hfr_num(c, r, "query_pre_attn_scalar", 256);
    if (f->qpas) positive(c, "query_pre_attn_scalar", v->qpas, "the scores are q.k / sqrt(it)");
    if (f->softcap) {
        v->cap_attn = get_cap(c, r, "attn_logit_softcapping", f->cap_attn);
        v->cap_final = get_cap(c, r, "final_logit_softcapping", f->cap_final);
    }
    if (f->local_theta) v->local = hf_rope_local_base(c, r);
    if (f->local_theta)
        positive(c, hf_rope_per_type(r, "sliding_attention") ? "rope_parameters.sliding_attention."
                 "rope_theta" : "rope_local_base_freq", v->local, "the sliding layers' RoPE base");
    for (long l = 0; l < L; l++) v->rope[l] = 1;
    if (f->nope) read_nope(c, r, L, v);
    if (f->windows) read_windows(c, r, f, L, v);
}

void hf_unmapped_check(hf_reader *c, const json_value *r, const hf_family *f) {
    char got[96];
    for (const hf_unmapped *u = f->unmapped; u && u->key; u++) {
        const json_value *v = hfr_member(r, u->key);
        if (!v || v->type == JSON_NULL) continue;
        json_describe(v, got, sizeof got);
        hfr_fault(c, TSR_EXIT_DATA, "%s = %s: not supported (%s); only null is accepted", u->key,
                  got, u->why);
    }
}

/* ---- checking ---- */

/* The soft caps and Gemma 3's local base against the run's. Without scaling, a run with
 * model.rope_local_theta = 0 turns its sliding layers with rope_theta: the same as a local base
 * equal to it; with scaling, its sliding layers would be scaled where Gemma 3's are not. */
static void check_caps_local(hf_reader *c, const hf_variants *v, const tsr_model_config *mc,
                             const hf_family *f) {
    hfr_same_num(c, "attn_logit_softcapping", v->cap_attn, "model.attn_logit_softcapping",
                 mc->attn_logit_softcapping);
    hfr_same_num(c, "final_logit_softcapping", v->cap_final, "model.final_logit_softcapping",
                 mc->final_logit_softcapping);
    if (!f->local_theta) return;
    int own = mc->rope_local_theta > 0 || mc->rope_scaling != TSR_ROPE_SCALING_NONE;
    hfr_same_num(c, "rope_local_base_freq", v->local, "model.rope_local_theta",
                 own ? mc->rope_local_theta : mc->rope_theta);
}

/* The variants the class fixes (its row) against the run's. */
static void check_fixed(hf_reader *c, const tsr_model_config *mc, const hf_family *f) {
    const char *mt = f->model_type;
    if (mc->norm_placement != f->place)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has %s norms, but this run has "
                  "model.norm_placement = \"%s\": set --set model.norm_placement=%s", mt,
                  hf_place_word[f->place], hf_place_word[mc->norm_placement], hf_place_word[f->place]);
    if (f->qk_norm && mc->qk_norm_scope != f->scope)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has QK-norm over the %s, but this run "
                  "has model.qk_norm_scope = \"%s\": set --set model.qk_norm_scope=%s", mt,
                  scope_word[f->scope], scope_word[mc->qk_norm_scope], scope_word[f->scope]);
    if (mc->embed_scale != f->embed)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" %s the embedding by sqrt(hidden_size), "
                  "but this run has model.embed_scale = \"%s\": set --set model.embed_scale=%s", mt,
                  f->embed ? "scales" : "does not scale", mc->embed_scale ? "sqrt_d_model" : "none",
                  f->embed ? "sqrt_d_model" : "none");
    if (mc->attn_sinks != f->gptoss)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"%s\" has %s, but this run has "
                  "model.attn_sinks = %s: set --set model.attn_sinks=%s", mt, f->gptoss ?
                  "attention sinks" : "no attention sinks", mc->attn_sinks ? "true" : "false",
                  f->gptoss ? "true" : "false");
}

/* Each layer's RoPE and window against the run's. */
static void check_layers(hf_reader *c, const hf_variants *v, const tsr_model *m) {
    const tsr_model_config *mc = &m->cfg;
    for (int l = 0; l < m->L && !c->rc; l++)
        if (config_layer_rope(mc, l) != v->rope[l])
            hfr_fault(c, TSR_EXIT_USAGE, "layer %d %s RoPE (no_rope_layers), but this run's %s: "
                      "set --set model.no_rope_layers=%s", l, v->rope[l] ? "uses" : "has no",
                      v->rope[l] ? "has none" : "does", v->nope[0] ? v->nope : "\"\"");
    for (int l = 0; l < m->L && !c->rc; l++) {
        int want = v->sliding[l] ? (int)v->window : 0;
        if (config_layer_window(mc, l) != want)
            hfr_fault(c, TSR_EXIT_USAGE, "layer %d is %s (layer_types, sliding_window = %ld), but "
                      "this run's attends %s: set --set model.layer_types=%s --set "
                      "model.sliding_window=%ld", l, want ? "sliding_attention" : "full_attention",
                      v->window, config_layer_window(mc, l) ? "through a window" : "fully",
                      v->types[0] ? v->types : "full_attention", v->window);
    }
}

void hf_variants_check(hf_reader *c, const json_value *r, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *mc = &m->cfg;
    hf_variants v;
    variants_read(c, r, f, m->L, &v);
    check_fixed(c, mc, f);
    double q = v.qpas > 0 ? v.qpas : m->hs;
    double run = mc->query_pre_attn_scalar > 0 ? mc->query_pre_attn_scalar : m->hs;
    if (!c->rc && q != run)
        hfr_fault(c, TSR_EXIT_USAGE, "query_pre_attn_scalar = %g, but this run's is %g: set --set "
                  "model.query_pre_attn_scalar=%g", q, run, q);
    check_caps_local(c, &v, mc, f);
    check_layers(c, &v, m);
}

/* ---- filling ---- */

/* A soft cap read by variants_read (0: off). */
static void put_cap(hf_reader *c, const char *run_key, const char *hf_key, double cap) {
    char v[32];
    hfr_put_key(c, 0, run_key, c->root, hf_key, hfr_double(v, sizeof v, cap));
}

/* The variants the class fixes, as words of its model_type. */
static void fill_fixed(hf_reader *c, const hf_family *f) {
    const char *mt = f->model_type;
    hfr_put_word(c, "model.norm_placement", hf_place_word[f->place], mt,
                 f->place == TSR_NPLACE_POST ? "norms after the attention and the MLP"
                                             : "norms before and after both branches");
    hfr_put_word(c, "model.qk_norm_scope", scope_word[f->scope], mt,
                 f->scope ? "QK-norm over the projections" : "QK-norm per head");
    hfr_put_word(c, "model.embed_scale", f->embed ? "sqrt_d_model" : "none", mt,
                 f->embed ? "the embedding times sqrt(hidden_size)" : "no embedding scale");
}

/* The windows' keys: the layer types' pattern and the window. */
static void fill_windows(hf_reader *c, const hf_family *f, const hf_variants *v) {
    char val[32], from[64];
    hfr_put(c, 0, "model.layer_types", v->types, "layer_types (its shortest repeating pattern)");
    snprintf(val, sizeof val, "%ld", v->window);
    snprintf(from, sizeof from, "no sliding_window (transformers' default: %ld)", f->def.window);
    hfr_put(c, 0, "model.sliding_window", val,
            hfr_member(c->root, "sliding_window") ? "sliding_window" : from);
}

void hf_variants_fill(hf_reader *c, const hf_family *f, long L) {
    hf_variants v;
    hf_unmapped_check(c, c->root, f);
    variants_read(c, c->root, f, L, &v);
    if (c->rc) return;
    fill_fixed(c, f);
    if (f->qpas) hfr_put_num(c, "model.query_pre_attn_scalar", c->root, "query_pre_attn_scalar", 256);
    if (f->softcap) {
        put_cap(c, "model.attn_logit_softcapping", "attn_logit_softcapping", v.cap_attn);
        put_cap(c, "model.final_logit_softcapping", "final_logit_softcapping", v.cap_final);
    }
    const json_value *sl = hf_rope_per_type(c->root, "sliding_attention");
    if (f->local_theta)
        hfr_put_num(c, "model.rope_local_theta", sl ? sl : c->root,
                    sl ? "rope_theta" : "rope_local_base_freq", 10000);
    if (f->nope) hfr_put(c, 0, "model.no_rope_layers", v.nope, "no_rope_layers (its shortest "
                         "repeating pattern; \"\": every layer turns by RoPE)");
    if (f->windows) fill_windows(c, f, &v);
}

/* ---- writing ---- */

void hf_layer_types_write(hf_text *b, const tsr_model *m) {
    hfr_add(b, "  \"layer_types\": [");
    for (int l = 0; l < m->L; l++)
        hfr_add(b, "%s\"%s\"", l ? ", " : "", config_layer_window(&m->cfg, l) > 0 ?
                "sliding_attention" : "full_attention");
    hfr_add(b, "],\n");
}

/* A soft cap's value: null when off. */
static void write_cap(hf_text *b, const char *key, double cap) {
    char v[32];
    if (cap > 0) hfr_add(b, "  \"%s\": %s,\n", key, hfr_double(v, sizeof v, cap));
    else hfr_add(b, "  \"%s\": null,\n", key);
}

void hf_variants_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *c = &m->cfg;
    char v[32];
    if (f->windows) {
        hfr_add(b, "  \"sliding_window\": %ld,\n", c->sliding_window > 0 ? (long)c->sliding_window
                                                                   : f->def.window);
        hf_layer_types_write(b, m);
    }
    if (f->qpas) {
        double q = c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar : m->hs;
        hfr_add(b, "  \"query_pre_attn_scalar\": %s,\n", hfr_double(v, sizeof v, q));
    }
    if (f->local_theta) {
        double local = c->rope_local_theta > 0 ? c->rope_local_theta : c->rope_theta;
        hfr_add(b, "  \"rope_local_base_freq\": %s,\n", hfr_double(v, sizeof v, local));
    }
    if (!f->softcap) return;
    write_cap(b, "attn_logit_softcapping", c->attn_logit_softcapping);
    write_cap(b, "final_logit_softcapping", c->final_logit_softcapping);
}

/* ---- what a model's variants need of a class ---- */

const char *hf_unexported_key(const tsr_model_config *c, const hf_family *f) {
    const char *k = NULL;
    if (!f->softcap && c->attn_logit_softcapping > 0) k = "model.attn_logit_softcapping";
    else if (!f->softcap && c->final_logit_softcapping > 0) k = "model.final_logit_softcapping";
    else if ((c->rope_scaling == TSR_ROPE_SCALING_YARN && !f->gptoss && !f->mla) ||
             (c->rope_scaling == TSR_ROPE_SCALING_LINEAR && !f->rope_linear))
        k = "model.rope_scaling";
    else if (c->rope_local_theta > 0 && !f->local_theta) k = "model.rope_local_theta";
    else if (c->partial_rotary_factor != 1.0 && !f->hybrid) k = "model.partial_rotary_factor";
    else if (c->no_rope_layers[0] && !f->nope) k = "model.no_rope_layers";
    if (!k && !f->gptoss) k = config_moe_variant_key(c);
    if (!k && !f->mla) k = config_variant_key(c, TSR_VAR_DS_ROUTER); /* (DeepSeek's only) */
    if (k && f->hybrid && !strcmp(k, "model.moe_shared_gate")) k = NULL; /* Qwen3-Next's */
    if (!k && !f->hybrid && config_linear_layers(c) > 0) k = "model.layer_types";
    if (!k && !f->hybrid && c->attn_output_gate) k = "model.attn_output_gate";
    return k;
}

int hf_variants_need(const tsr_model *m, const hf_family *f, char *need, size_t cap) {
    const tsr_model_config *c = &m->cfg;
    if (f->local_theta && c->rope_scaling != TSR_ROPE_SCALING_NONE && !c->rope_local_theta &&
        hf_has_window(c))
        snprintf(need, cap, "model.rope_local_theta > 0 (its sliding layers turn without "
                 "rope_scaling, with rope_local_base_freq)");
    else if (c->norm_placement != f->place)
        snprintf(need, cap, "model.norm_placement = \"%s\"", hf_place_word[f->place]);
    else if (c->mlp != f->mlp)
        snprintf(need, cap, "model.mlp = \"%s\"", hf_mlp_word[f->mlp]);
    else if (c->embed_scale != f->embed)
        snprintf(need, cap, "model.embed_scale = \"%s\"", f->embed ? "sqrt_d_model" : "none");
    else if (c->qk_norm && f->qk_norm && c->qk_norm_scope != f->scope)
        snprintf(need, cap, "model.qk_norm_scope = \"%s\"", scope_word[f->scope]);
    else if (!f->windows && hf_has_window(c))
        snprintf(need, cap, "no sliding window (model.layer_types, model.sliding_window)");
    else if (c->attn_sinks && !f->gptoss)
        snprintf(need, cap, "model.attn_sinks = false (GptOssForCausalLM's attention has sinks)");
    else if (!f->qpas && c->query_pre_attn_scalar > 0 && c->query_pre_attn_scalar != m->hs)
        snprintf(need, cap, "model.query_pre_attn_scalar = 0 (the head size)");
    else if (!f->head_dim_key && m->hs * m->NH != m->C)
        snprintf(need, cap, "model.head_dim = d_model / n_head (its config has no head_dim)");
    else
        return 0;
    return 1;
}

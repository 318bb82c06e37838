/* config_model.c — what a model key does, read from its row of the key table (cfgtab_role,
 * config_table.h): the hooks the model rows name (when a key applies, its effective value, a
 * per-layer key's value at a layer) and the comparison of two configs' models that a resume makes
 * (config_model_diff: every row that shapes the model, no list of keys here).
 */
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "config/config_table.h"

/* ---- when a key applies ---- */

int cfgm_rope(const tsr_config *c) { return c->model.pos == TSR_POS_ROPE; }
int cfgm_rope_scaled(const tsr_config *c) {
    return cfgm_rope(c) && c->model.rope_scaling != TSR_ROPE_SCALING_NONE;
}
int cfgm_llama3(const tsr_config *c) {
    return cfgm_rope(c) && c->model.rope_scaling == TSR_ROPE_SCALING_LLAMA3;
}
int cfgm_yarn(const tsr_config *c) {
    return cfgm_rope(c) && c->model.rope_scaling == TSR_ROPE_SCALING_YARN;
}
/* the scalings that read the original context (llama3, yarn) */
int cfgm_original_ctx(const tsr_config *c) { return cfgm_llama3(c) || cfgm_yarn(c); }
int cfgm_learned(const tsr_config *c) { return c->model.pos == TSR_POS_LEARNED; }
int cfgm_gelu_mlp(const tsr_config *c) { return c->model.mlp == TSR_MLP_GELU; }
int cfgm_qk_norm(const tsr_config *c) { return c->model.qk_norm; }
int cfgm_moe(const tsr_config *c) { return c->model.moe_experts > 0; }
int cfgm_moe_shared(const tsr_config *c) { return cfgm_moe(c) && c->model.moe_shared_size > 0; }
int cfgm_gptoss(const tsr_config *c) {
    return cfgm_moe(c) && c->model.moe_act == TSR_MOE_ACT_GPTOSS;
}
int cfgm_lora(const tsr_config *c) { return c->lora.rank > 0; }

/* some layer attends within a window (model.layer_types, model.sliding_window) */
int cfgm_sliding(const tsr_config *c) {
    for (int l = 0; l < c->model.n_layer; l++)
        if (config_layer_window(&c->model, l) > 0) return 1;
    return 0;
}

int cfgm_linear(const tsr_config *c) { return config_linear_layers(&c->model) > 0; }
int cfgm_mla(const tsr_config *c) { return c->model.kv_lora_rank > 0; }

/* ---- effective values ---- */

/* the model's resolved sizes (both configs of a comparison are loaded: they resolve) */
static tsr_model_dims dims_of(const tsr_config *c) {
    tsr_model_dims d;
    const char *key;
    char why[400];
    if (config_model_dims(&c->model, &d, &key, why, sizeof why) != 0) memset(&d, 0, sizeof d);
    return d;
}

void cfgm_kv_heads(const tsr_config *c, char *buf, size_t n) {
    snprintf(buf, n, "%d", dims_of(c).KVH);
}
void cfgm_head_size(const tsr_config *c, char *buf, size_t n) {
    snprintf(buf, n, "%d", dims_of(c).hs);
}
/* the MLP width: intermediate_size, or expansion_ratio x d_model */
void cfgm_mlp_width(const tsr_config *c, char *buf, size_t n) {
    snprintf(buf, n, "%d", dims_of(c).F);
}
void cfgm_expert_width(const tsr_config *c, char *buf, size_t n) {
    snprintf(buf, n, "%d", dims_of(c).FE);
}
/* query_pre_attn_scalar: 0 where it is the head size (the plain 1 / sqrt(hs)) */
void cfgm_score_scale(const tsr_config *c, char *buf, size_t n) {
    const double q = c->model.query_pre_attn_scalar;
    cfgtab_format_double(buf, n, q != dims_of(c).hs ? q : 0);
}
/* the learned position table's rows: max_seq_len, 0 = seq_len */
void cfgm_positions(const tsr_config *c, char *buf, size_t n) {
    const long long t = c->model.max_seq_len ? c->model.max_seq_len : c->seq_len;
    snprintf(buf, n, "%lld", t);
}
/* the projections the adapters sit on, resolved ("all-linear": this model's) */
void cfgm_lora_targets(const tsr_config *c, char *buf, size_t n) {
    unsigned mask = 0;
    char why[400];
    size_t o = 0;
    config_lora_targets(&c->model, c->lora.targets, &mask, why, sizeof why);
    buf[0] = '\0';
    for (int t = 0; t < TSR_LORA_COUNT && o < n; t++)
        if (mask >> t & 1u)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? "," : "\"",
                                  config_lora_target_name(t));
    if (o < n) snprintf(buf + o, n - o, "%s", o ? "\"" : "\"\"");
}

/* layer l's kind: its model.layer_types entry as it takes effect (a window of 0 is full) */
void cfgm_layer_kind(const tsr_model_config *m, int l, char *buf, size_t n) {
    snprintf(buf, n, "\"%s\"", config_layer_linear(m, l)          ? "linear_attention"
                               : config_layer_window(m, l) > 0 ? "sliding_attention"
                                                               : "full_attention");
}
/* layer l turns q and k (model.no_rope_layers' 1) or not (0) */
void cfgm_layer_rope(const tsr_model_config *m, int l, char *buf, size_t n) {
    snprintf(buf, n, "%d", config_layer_rope(m, l));
}

/* ---- the roles, the comparison ---- */

tsr_key_role config_key_role(const char *key) {
    const cfgtab_key *k = cfgtab_find(key);
    if (!k || k->role == CFGR_NONE) return TSR_KEY_OTHER;
    return k->role == CFGR_SHAPE ? TSR_KEY_SHAPES : TSR_KEY_RUNS;
}

const char *config_key_at(int i, tsr_key_role *role) {
    if (i < 0 || i >= cfgtab_n_keys) return NULL;
    *role = config_key_role(cfgtab_keys[i].name);
    return cfgtab_keys[i].name;
}

/* key k's effective value in c as text: "(unused)" where it does not apply, a float shortest */
static void effective(const cfgtab_key *k, const tsr_config *c, char *buf, size_t n) {
    if (k->applies && !k->applies(c)) snprintf(buf, n, "(unused)");
    else if (k->value) k->value(c, buf, n);
    else if (k->type == CFGK_FLOAT)
        cfgtab_format_double(buf, n, *(const double *)((const char *)c + k->offset));
    else cfgtab_format(k, c, buf, n);
}

/* a per-layer key: the first layer (of both) whose value differs, as " at layer l: x vs y" */
static int layer_differs(const cfgtab_key *k, const tsr_config *a, const tsr_config *b,
                         char *out, size_t cap) {
    char u[96], v[96];
    const int on_a = !k->applies || k->applies(a), on_b = !k->applies || k->applies(b);
    for (int l = 0; l < a->model.n_layer && l < b->model.n_layer; l++) {
        if (on_a) k->layer(&a->model, l, u, sizeof u);
        else snprintf(u, sizeof u, "(unused)");
        if (on_b) k->layer(&b->model, l, v, sizeof v);
        else snprintf(v, sizeof v, "(unused)");
        if (strcmp(u, v) != 0) return snprintf(out, cap, " at layer %d: %s vs %s", l, u, v) > 0;
    }
    return 0;
}

/* key k compared: " x vs y" into out, 1 when a and b differ */
static int key_differs(const cfgtab_key *k, const tsr_config *a, const tsr_config *b, char *out,
                       size_t cap) {
    char u[1100], v[1100];
    if (k->layer) return layer_differs(k, a, b, out, cap);
    effective(k, a, u, sizeof u);
    effective(k, b, v, sizeof v);
    return strcmp(u, v) != 0 && snprintf(out, cap, " %s vs %s", u, v) > 0;
}

void config_model_diff(const tsr_config *a, const tsr_config *b, char *out, size_t cap) {
    size_t o = 0;
    char d[2400];
    out[0] = '\0';
    for (int i = 0; i < cfgtab_n_keys && o < cap; i++) {
        const cfgtab_key *k = &cfgtab_keys[i];
        if (k->role != CFGR_SHAPE || k->via || !key_differs(k, a, b, d, sizeof d)) continue;
        const char *name = strncmp(k->name, "model.", 6) == 0 ? k->name + 6 : k->name;
        o += (size_t)snprintf(out + o, cap - o, "%s%s%s", o ? ", " : "", name, d);
    }
}

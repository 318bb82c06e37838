/* config_describe.c — the model's variants in words (config.h config_variants_text): what the
 * plan's model line adds to the sizes, so that a start (and --dry-run / --plan) says which of
 * docs/models.md's variants the recipe turns on. Built on config_variant_key's one list of them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config/config.h"

/* Appends a formatted fragment to buf (cap bytes, NUL-terminated), "; " before all but the
 * first; what does not fit is cut. */
static void put(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put(char *buf, size_t cap, const char *fmt, ...) {
    size_t n = strlen(buf);
    if (n + 3 >= cap) return;
    if (n) memcpy(buf + n, "; ", 3), n += 2;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* The shortest p such that kind[l] = kind[l % p] for every layer (L when none is shorter). */
static int period_of(const unsigned char *kind, int L) {
    for (int p = 1; p < L; p++) {
        int l = p;
        while (l < L && kind[l] == kind[l % p]) l++;
        if (l == L) return p;
    }
    return L;
}

/* " (repeating 3 linear, 1 full)": the runs of the layers' shortest repeating pattern; when none
 * is shorter than the layers, the runs of all of them (" (1 full, 3 sliding)") if they are at
 * most 8 and, when counted (the caller lists the counts in the kinds' order), that order does not
 * tell them already; "" for layers all of one kind. */
static void pattern_text(const unsigned char *kind, int L, const char *const *name, int counted,
                         char *out, size_t cap) {
    const int p = period_of(kind, L);
    int runs = 0, sorted = 1;
    for (int l = 0; l < p; l++) {
        runs += l == 0 || kind[l] != kind[l - 1];
        sorted &= l == 0 || kind[l] >= kind[l - 1];
    }
    out[0] = '\0';
    if (p == 1 || (p == L && ((counted && sorted) || runs > 8))) return;
    size_t n = (size_t)snprintf(out, cap, " (%s", p < L ? "repeating " : "");
    for (int l = 0; l < p && n < cap;) {
        int r = l;
        while (r < p && kind[r] == kind[l]) r++;
        n += (size_t)snprintf(out + n, cap - n, "%s%d %s", l ? ", " : "", r - l, name[kind[l]]);
        l = r;
    }
    if (n < cap) snprintf(out + n, cap - n, ")");
}

enum { K_LINEAR = 0, K_SLIDING, K_FULL, K_KINDS };

/* "layers: 36 linear + 12 full (repeating 3 linear, 1 full)", the window beside "sliding" */
static void layers_text(const tsr_model_config *m, char *buf, size_t cap) {
    static const char *const name[K_KINDS] = {"linear", "sliding", "full"};
    const int L = m->n_layer;
    unsigned char *kind = tsr_malloc((size_t)L);
    int count[K_KINDS] = {0};
    for (int l = 0; l < L; l++) {
        kind[l] = config_layer_linear(m, l) ? K_LINEAR
                  : config_layer_window(m, l) > 0 ? K_SLIDING : K_FULL;
        count[kind[l]]++;
    }
    char terms[160] = "", pat[200];
    size_t n = 0;
    for (int k = 0; k < K_KINDS; k++) {
        if (!count[k] || n >= sizeof terms) continue;
        char win[32] = "";
        if (k == K_SLIDING) snprintf(win, sizeof win, " (window %d)", m->sliding_window);
        n += (size_t)snprintf(terms + n, sizeof terms - n, "%s%d %s%s", n ? " + " : "", count[k],
                              name[k], win);
    }
    pattern_text(kind, L, name, 1, pat, sizeof pat);
    free(kind);
    put(buf, cap, "layers: %s%s", terms, pat);
}

/* "no RoPE in 9 of 36 layers (repeating 3 rope, 1 none)" */
static void nope_text(const tsr_model_config *m, char *buf, size_t cap) {
    static const char *const name[2] = {"none", "rope"};
    const int L = m->n_layer;
    unsigned char *kind = tsr_malloc((size_t)L);
    int none = 0;
    for (int l = 0; l < L; l++) none += !(kind[l] = (unsigned char)config_layer_rope(m, l));
    char pat[200];
    pattern_text(kind, L, name, 0, pat, sizeof pat);
    free(kind);
    put(buf, cap, "no RoPE in %d of %d layers%s", none, L, pat);
}

/* the RoPE scaling: Llama 3.1's, linear (Gemma 3) or YaRN (gpt-oss), with its factors */
static void scaling_text(const tsr_model_config *m, char *buf, size_t cap) {
    switch (m->rope_scaling) {
    case TSR_ROPE_SCALING_LLAMA3:
        put(buf, cap, "RoPE llama3 x%g (original %d positions)", m->rope_factor,
            m->rope_original_max_pos);
        break;
    case TSR_ROPE_SCALING_LINEAR:
        put(buf, cap, "RoPE linear x%g%s", m->rope_factor,
            m->rope_local_theta > 0 ? " (full layers)" : "");
        break;
    case TSR_ROPE_SCALING_YARN:
        put(buf, cap, "RoPE yarn x%g (original %d positions, beta %g/%g%s)", m->rope_factor,
            m->rope_original_max_pos, m->rope_beta_fast, m->rope_beta_slow,
            m->rope_truncate ? "" : ", not truncated");
        break;
    default: break;
    }
}

/* multi-head latent attention's sizes */
static void mla_text(const tsr_model_config *m, char *buf, size_t cap) {
    put(buf, cap, "MLA latent %d + rope %d (q latent %d), heads %d+%d / v %d%s", m->kv_lora_rank,
        m->qk_rope_head_dim, m->q_lora_rank, m->qk_nope_head_dim, m->qk_rope_head_dim,
        m->v_head_dim, m->rope_interleave ? ", interleaved RoPE" : "");
}

/* DeepSeek's router (docs/moe.md "DeepSeek's router") */
static void ds_router_text(const tsr_model_config *m, char *buf, size_t cap) {
    static const char *const method[] = {"greedy", "group-limited", "noaux_tc"};
    put(buf, cap, "%s router, %s, %d of %d groups, scale %g, first %d layers dense",
        m->moe_scoring == TSR_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax",
        method[m->moe_topk_method], m->moe_topk_group, m->moe_n_group, m->moe_routed_scaling,
        m->moe_dense_layers);
}

/* variant v's words (v set in m) */
static void variant_text(const tsr_model_config *m, tsr_model_variant v, char *buf, size_t cap) {
    switch (v) {
    case TSR_VAR_LINEAR: layers_text(m, buf, cap); break;
    case TSR_VAR_WINDOW: if (!config_variant_key(m, TSR_VAR_LINEAR)) layers_text(m, buf, cap); break;
    case TSR_VAR_ATTN_GATE: put(buf, cap, "gated attention output"); break;
    case TSR_VAR_SINKS: put(buf, cap, "attention sinks"); break;
    case TSR_VAR_QPAS: put(buf, cap, "scores / sqrt(%g)", m->query_pre_attn_scalar); break;
    case TSR_VAR_NORM_PLACEMENT:
        put(buf, cap, "%s norms", m->norm_placement == TSR_NPLACE_SANDWICH ? "sandwich" : "post");
        break;
    case TSR_VAR_QKN_PROJECTION: put(buf, cap, "qk_norm over the projection"); break;
    case TSR_VAR_EMBED_SCALE: put(buf, cap, "embedding x sqrt(d_model)"); break;
    case TSR_VAR_GEGLU: break; /* the line's mlp= names it */
    case TSR_VAR_ATTN_SOFTCAP: put(buf, cap, "attention soft cap %g", m->attn_logit_softcapping); break;
    case TSR_VAR_FINAL_SOFTCAP: put(buf, cap, "final soft cap %g", m->final_logit_softcapping); break;
    case TSR_VAR_ROPE_SCALING: scaling_text(m, buf, cap); break;
    case TSR_VAR_ROPE_LOCAL: put(buf, cap, "sliding layers' RoPE theta %g", m->rope_local_theta); break;
    case TSR_VAR_PARTIAL_ROTARY: {
        const int hs = m->head_dim > 0 ? m->head_dim : m->d_model / (m->n_head > 0 ? m->n_head : 1);
        put(buf, cap, "RoPE on %g of %d head dims (partial rotary)", m->partial_rotary_factor * hs, hs);
        break;
    }
    case TSR_VAR_NOPE: nope_text(m, buf, cap); break;
    case TSR_VAR_ROUTER_BIAS: put(buf, cap, "router bias"); break;
    case TSR_VAR_EXPERT_BIAS: put(buf, cap, "expert biases"); break;
    case TSR_VAR_MOE_ACT: put(buf, cap, "gptoss unit (limit %g)", m->swiglu_limit); break;
    case TSR_VAR_SHARED_GATE: put(buf, cap, "gated shared expert"); break;
    case TSR_VAR_MLA: mla_text(m, buf, cap); break;
    case TSR_VAR_DS_ROUTER: ds_router_text(m, buf, cap); break;
    default: break;
    }
}

void config_variants_text(const tsr_model_config *m, char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = '\0';
    for (int v = 0; v < TSR_VAR_COUNT; v++)
        if (config_variant_key(m, (tsr_model_variant)v)) variant_text(m, (tsr_model_variant)v, buf, cap);
    if (m->pos == TSR_POS_ROPE && m->rope_scaling == TSR_ROPE_SCALING_LLAMA3) /* not a variant of
                                                                                 * issue 67 */
        scaling_text(m, buf, cap);
}

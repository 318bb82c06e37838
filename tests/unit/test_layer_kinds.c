/* test_layer_kinds.c — the layer kinds' table (src/model/layer_kind.h): printed (every kind, its
 * layers, its config keys, and each tensor's initialisation and split rule), and checked:
 *   - every tensor id belongs to the frame or to a row of each half (dense and gated share the
 *     dense MLP's), with a split rule and a dimension that exists in its layer slice;
 *   - for four models (GPT-2, a grouped-query Llama, a Qwen3-Next-like hybrid with MoE, a
 *     gpt-oss-like MoE with sinks and windows) every tensor's shape is the one written out here
 *     from the config (not from the rows), the layers of each kind are chosen as the config says,
 *     model_layer_slot counts a kind's layers, and with two ranks every split dimension divides;
 *   - each kind's config keys are keys that shape the model, and every model key that shapes
 *     the model is some kind's (a new key is claimed by the kind that reads it);
 *   - a kind with a pass fills every slot of it; the FLOPs per token and the slots' decode
 *     caches are the sums of the rows' (attention's 12 (NH hs) keys, the DeltaNet's state
 *     products; attention's keys and values, the linear layers' states).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "model/decoder.h"
#include "model/layer_kind.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "tiny_models.h"

static const char *const split_name[TSR_SPLIT_COUNT] = {"replicated", "after_sum", "out", "in",
                                                         "heads", "vocab", "experts"};
static const char *const init_name[TSR_INIT_COUNT] = {"normal", "residual", "zero", "one",
                                                       "own"};
static const char *const half_name[] = {"root", "block", "mixer", "mlp"};

static tsr_model_config gpt2(void) { return tiny_model(4, 32, 4, 100, 16); }

static tsr_model_config llama(void) { return tiny_llama(gpt2()); }

static tsr_model_config hybrid(void) {
    tsr_model_config c = tiny_linear_layers(llama(), "linear_attention,full_attention");
    c.attn_output_gate = 1, c.moe_experts = 4, c.moe_top_k = 2, c.moe_every = 2;
    c.moe_intermediate_size = 24, c.moe_shared_size = 16, c.moe_shared_gate = 1;
    c.qk_norm_scope = TSR_QKN_PROJECTION;
    return c;
}

static tsr_model_config gptoss(void) {
    tsr_model_config c = llama();
    c.qk_norm = 0, c.bias = 1, c.attn_sinks = 1, c.sliding_window = 8;
    snprintf(c.layer_types, sizeof c.layer_types, "sliding_attention,full_attention");
    c.moe_experts = 4, c.moe_top_k = 2, c.moe_router_bias = 1, c.moe_expert_bias = 1;
    c.moe_act = TSR_MOE_ACT_GPTOSS;
    return c;
}

static void print_table(void) {
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++) {
        char keys[1024] = "";
        size_t o = 0;
        for (const char *const *key = (*k)->keys; key && *key && o < sizeof keys; key++)
            o += (size_t)snprintf(keys + o, sizeof keys - o, "%s%s", o ? " " : "", *key + 6);
        tap_diag("%s (%s): keys %s", (*k)->name, half_name[(*k)->half], keys);
        for (int i = 0; i < (*k)->n_params; i++) {
            const tsr_param_row *p = &(*k)->params[i];
            tap_diag("  %-10s id %2d  init %-8s stream %2llu  split %-10s dim %2d parts %d%s",
                     p->name, (int)p->id, init_name[p->init], (unsigned long long)p->stream,
                     split_name[p->split], p->dim, p->parts, p->fp8 ? "  fp8" : "");
        }
    }
}

/* every id in the frame or a row of each half; each row's split and init rules in range, a
 * dimension exactly where the rule splits (a kind with a heads rule says its head blocks, one
 * with an experts rule its cut inside each expert); names and streams unique */
static void test_rows(void) {
    int ok = 1, listed[TSR_P_COUNT] = {0};
    const char *names[TSR_P_COUNT] = {0};
    uint64_t streams[TSR_P_COUNT];
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++)
        for (int i = 0; i < (*k)->n_params; i++) {
            const tsr_param_row *p = &(*k)->params[i];
            const int repl = p->split == TSR_SPLIT_REPLICATED || p->split == TSR_SPLIT_AFTER_SUM;
            if (p->split >= TSR_SPLIT_COUNT || p->init >= TSR_INIT_COUNT || repl != (p->dim < 0) ||
                p->parts < 1 || (p->parts > 1 && p->split != TSR_SPLIT_OUT) ||
                (p->split == TSR_SPLIT_HEADS && !(*k)->heads) ||
                (p->split == TSR_SPLIT_EXPERTS && !(*k)->within))
                ok = 0, tap_diag("%s %s: split %d dim %d parts %d init %d", (*k)->name, p->name,
                                 p->split, p->dim, p->parts, p->init);
            if (names[p->id] && (strcmp(names[p->id], p->name) || streams[p->id] != p->stream))
                ok = 0, tap_diag("%s: two rows disagree on its name or stream", p->name);
            names[p->id] = p->name, streams[p->id] = p->stream, listed[p->id]++;
        }
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const int shared = i >= TSR_P_FCW && i <= TSR_P_FCPROJB; /* dense and gated */
        if (listed[i] != 1 + shared) ok = 0, tap_diag("id %d listed %d times", i, listed[i]);
        for (int j = 0; j < i; j++)
            if (names[i] && names[j] && (!strcmp(names[i], names[j]) || streams[i] == streams[j]))
                ok = 0, tap_diag("ids %d and %d share a name or stream", i, j);
    }
    tap_ok(ok, "every one of the %d tensor ids is the frame's or one row's of its half (dense "
           "and gated share fcw .. fcprojb), with a split rule, its dimension, an init rule, a "
           "unique name and random stream", TSR_P_COUNT);
}

/* what a shape should be, written from the config: (id, dims...) */
typedef struct want { tsr_param_id id; int ndim; int64_t d[4]; } want;

static int shapes_are(const tsr_model *m, const want *w, int n, const char *what) {
    int ok = 1, seen[TSR_P_COUNT] = {0};
    for (int i = 0; i < n; i++) {
        const tsr_param_info *p = &m->params_info[w[i].id];
        seen[w[i].id] = 1;
        if (p->numel == 0 || p->ndim != w[i].ndim ||
            memcmp(p->shape, w[i].d, (size_t)w[i].ndim * sizeof(int64_t)))
            ok = 0, tap_diag("%s %s: (%lld, %lld, %lld, %lld) ndim %d numel %zu", what, p->name,
                             (long long)p->shape[0], (long long)p->shape[1],
                             (long long)p->shape[2], (long long)p->shape[3], p->ndim, p->numel);
    }
    for (int i = 0; i < TSR_P_COUNT; i++)
        if (!seen[i] && m->params_info[i].numel)
            ok = 0, tap_diag("%s %s: present, not expected", what, m->params_info[i].name);
    return ok;
}

/* with 2 ranks: every split dimension of a present tensor's layer slice divides by 2 (each
 * block of a [gate | up] one) */
static int splits_divide(const tsr_model *m, const char *what) {
    int ok = 1;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        const tsr_param_info *p = &m->params_info[i];
        const tsr_param_row *row = model_param_row(m, (tsr_param_id)i);
        const int lead = model_param_per_layer((tsr_param_id)i);
        if (!p->numel || row->dim < 0) continue;
        if (lead + row->dim >= p->ndim ||
            p->shape[lead + row->dim] % (2 * row->parts) != 0)
            ok = 0, tap_diag("%s %s: split dim %d of %d dims does not divide by 2 x %d", what,
                             p->name, row->dim, p->ndim - lead, row->parts);
    }
    return ok;
}

/* layer l's kinds, as "mixer/mlp" */
static const char *kinds_of(const tsr_model *m, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = '\0';
    for (int l = 0; l < m->L && o < n; l++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s/%s", l ? " " : "",
                              model_mixer(&m->cfg, l)->name, model_mlp(&m->cfg, l)->name);
    return buf;
}

static void check_model(const char *what, tsr_model_config c, const want *w, int n,
                        const char *layers) {
    tsr_model m;
    char buf[256];
    model_init(&m, &c, 16, &tsr_cpu_ops);
    const int shapes = shapes_are(&m, w, n, what), div = splits_divide(&m, what);
    tap_ok(shapes && div && !strcmp(kinds_of(&m, buf, sizeof buf), layers),
           "%s: every tensor's shape as the config says, its split dimension divides by 2 ranks, "
           "layers %s", what, buf);
    model_free(&m);
}

static void test_models(void) {
    const int64_t C = 32, Vp = 112, L = 4, hs = 8;
    const want g[] = {
        {TSR_P_WTE, 2, {Vp, C}},          {TSR_P_WPE, 2, {16, C}},
        {TSR_P_LN1W, 2, {L, C}},          {TSR_P_LN1B, 2, {L, C}},
        {TSR_P_QKVW, 3, {L, 3 * C, C}},   {TSR_P_QKVB, 2, {L, 3 * C}},
        {TSR_P_ATTPROJW, 3, {L, C, C}},   {TSR_P_ATTPROJB, 2, {L, C}},
        {TSR_P_LN2W, 2, {L, C}},          {TSR_P_LN2B, 2, {L, C}},
        {TSR_P_FCW, 3, {L, 4 * C, C}},    {TSR_P_FCB, 2, {L, 4 * C}},
        {TSR_P_FCPROJW, 3, {L, C, 4 * C}}, {TSR_P_FCPROJB, 2, {L, C}},
        {TSR_P_LNFW, 1, {C}},             {TSR_P_LNFB, 1, {C}},
    };
    check_model("GPT-2", gpt2(), g, 16, "attention/dense attention/dense attention/dense "
                "attention/dense");
    const want l[] = {
        {TSR_P_WTE, 2, {Vp, C}},                 {TSR_P_LN1W, 2, {L, C}},
        {TSR_P_QKVW, 3, {L, (4 + 4) * hs, C}},   {TSR_P_QNORMW, 2, {L, hs}},
        {TSR_P_KNORMW, 2, {L, hs}},              {TSR_P_ATTPROJW, 3, {L, C, C}},
        {TSR_P_LN2W, 2, {L, C}},                 {TSR_P_FCW, 3, {L, 96, C}},
        {TSR_P_FCPROJW, 3, {L, C, 48}},          {TSR_P_LNFW, 1, {C}},
        {TSR_P_LMHEAD, 2, {Vp, C}},
    };
    check_model("Llama (GQA 4/2, QK-norm)", llama(), l, 11, "attention/gated attention/gated "
                "attention/gated attention/gated");
    const int64_t CD = 2 * 2 * 8 + 4 * 6, VD = 4 * 6;
    const want h[] = {
        {TSR_P_WTE, 2, {Vp, C}},               {TSR_P_LN1W, 2, {L, C}},
        {TSR_P_QKVW, 3, {2, 64, C}},           {TSR_P_QNORMW, 2, {2, 4 * hs}},
        {TSR_P_KNORMW, 2, {2, 2 * hs}},        {TSR_P_ATTPROJW, 3, {2, C, C}},
        {TSR_P_ATTNGATEW, 3, {2, C, C}},       {TSR_P_LN2W, 2, {L, C}},
        {TSR_P_FCW, 3, {2, 96, C}},            {TSR_P_FCPROJW, 3, {2, C, 48}},
        {TSR_P_ROUTERW, 3, {2, 4, C}},         {TSR_P_EXPW1, 4, {2, 4, 48, C}},
        {TSR_P_EXPW2, 4, {2, 4, C, 24}},       {TSR_P_SHW1, 3, {2, 32, C}},
        {TSR_P_SHW2, 3, {2, C, 16}},           {TSR_P_SHGATEW, 3, {2, 1, C}},
        {TSR_P_DNQKVW, 3, {2, CD, C}},         {TSR_P_DNZW, 3, {2, VD, C}},
        {TSR_P_DNBW, 3, {2, 4, C}},            {TSR_P_DNAW, 3, {2, 4, C}},
        {TSR_P_DNCONV, 3, {2, CD, 4}},         {TSR_P_DNDTB, 2, {2, 4}},
        {TSR_P_DNALOG, 2, {2, 4}},             {TSR_P_DNNORMW, 2, {2, 6}},
        {TSR_P_DNOW, 3, {2, C, VD}},           {TSR_P_LNFW, 1, {C}},
        {TSR_P_LMHEAD, 2, {Vp, C}},
    };
    check_model("hybrid (linear/full, MoE every 2nd with a gated shared expert, output gate, "
                "QK-norm over the projection)", hybrid(), h, 27,
                "gated_deltanet/gated attention/moe gated_deltanet/gated attention/moe");
    const want o[] = {
        {TSR_P_WTE, 2, {Vp, C}},               {TSR_P_LN1W, 2, {L, C}},
        {TSR_P_QKVW, 3, {L, 64, C}},           {TSR_P_QKVB, 2, {L, 64}},
        {TSR_P_SINKS, 2, {L, 4}},              {TSR_P_ATTPROJW, 3, {L, C, C}},
        {TSR_P_ATTPROJB, 2, {L, C}},           {TSR_P_LN2W, 2, {L, C}},
        {TSR_P_ROUTERW, 3, {L, 4, C}},         {TSR_P_ROUTERB, 2, {L, 4}},
        {TSR_P_EXPW1, 4, {L, 4, 96, C}},       {TSR_P_EXPB1, 3, {L, 4, 96}},
        {TSR_P_EXPW2, 4, {L, 4, C, 48}},       {TSR_P_EXPB2, 3, {L, 4, C}},
        {TSR_P_LNFW, 1, {C}},                  {TSR_P_LMHEAD, 2, {Vp, C}},
    };
    check_model("gpt-oss-like (sinks, windows, router and expert biases)", gptoss(), o, 16,
                "attention/moe attention/moe attention/moe attention/moe");
}

/* the kinds' keys against the key table's roles */
static void test_keys(void) {
    int ok = 1, n = 0;
    tsr_key_role role;
    const char *key;
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++)
        for (const char *const *kk = (*k)->keys; kk && *kk; kk++)
            if (config_key_role(*kk) != TSR_KEY_SHAPES)
                ok = 0, tap_diag("%s lists %s, not a key that shapes the model", (*k)->name, *kk);
    for (int i = 0; (key = config_key_at(i, &role)) != NULL; i++) {
        if (role != TSR_KEY_SHAPES || strncmp(key, "model.", 6) != 0) continue;
        int claimed = 0;
        for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++)
            for (const char *const *kk = (*k)->keys; kk && *kk; kk++) claimed |= !strcmp(*kk, key);
        n++;
        if (!claimed) ok = 0, tap_diag("%s shapes the model, but no kind lists it", key);
    }
    tap_ok(ok && n > 50, "every key a kind lists shapes the model, and each of the %d model keys "
           "that shape it is listed by a kind", n);
}

/* the pass's slots of the rows that have one; the FLOPs and the decode caches as sums of rows' */
static void test_slots(void) {
    int ok = 1;
    for (const tsr_layer_kind *const *k = tsr_layer_kinds; *k; k++) {
        const int pass = (*k)->half >= TSR_HALF_MIXER;
        if (!(*k)->layout || (pass && (!(*k)->forward || !(*k)->out || !(*k)->backward ||
                                       !(*k)->acts || !(*k)->view || !(*k)->kv_view)))
            ok = 0, tap_diag("%s: a slot of its pass is empty", (*k)->name);
    }
    tap_ok(ok, "every mixer and MLP row fills forward, out, backward, acts, view and kv_view");
    ok = 1;
    tsr_model_config c = hybrid();
    tsr_model m;
    model_init(&m, &c, 16, &tsr_cpu_ops);
    const int T = 16, cap = 20, slots = 3, rows = 2;
    const double keys = 2.0 * T, dn = 2 * 3.0 * 4 * (6.0 * 8 * 6 + 2.0 * T * (3.0 * 8 + 2.0 * 6));
    const double idle = 2 * (4 - 2) * 3.0 * 24 * 32, flops = 6.0 * (m.n_params_counted - idle -
                                                                  100.0 * 32) +
                                                           12.0 * 32 * keys + dn;
    tap_ok(model_flops_per_token(&m, T) == flops && model_attn_keys(&m, T) == keys &&
               model_dn_flops(&m, T) == dn && model_active_params(&m) == m.n_params_counted - idle,
           "FLOPs per token of the hybrid: 6 N_active + 12 (NH hs) keys + the DeltaNet's, from "
           "the rows: %.17g (want %.17g)", model_flops_per_token(&m, T), flops);
    const size_t ss = dec_dn_cache_floats(&m, 1), cs = dec_dn_cache_floats(&m, 0), f = 4;
    const size_t attn = 2 * (size_t)cap * 2 * 8 * f, lin = (ss + cs) * f; /* KVH 2, hs 8 */
    size_t per = 0;
    for (int l = 0; l < m.L; l++) {
        const tsr_layer_kind *k = model_mixer(&m.cfg, l);
        per += k->cache_bytes(&m, &m.be, l, cap);
        ok &= k->cache_bytes(&m, &m.be, l, cap) == (l % 2 ? attn : lin);
    }
    const size_t b3 = model_kv_slots_bytes(&m, &m.be, slots, cap, rows);
    const size_t b1 = model_kv_slots_bytes(&m, &m.be, 1, cap, rows);
    tap_ok(ok && b3 - b1 == (size_t)(slots - 1) * per,
           "a sequence's decode cache: %zu bytes an attention layer (keys and values), %zu a "
           "linear one (state and tail); the slots' plan grows by their sum a slot (%zu)", attn,
           lin, per);
    model_free(&m);
}

int main(void) {
    tap_plan(9);
    print_table();
    test_rows();
    test_models();
    test_keys();
    test_slots();
    return tap_done();
}

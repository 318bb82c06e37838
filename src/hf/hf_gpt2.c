/* hf_gpt2.c — GPT2LMHeadModel and MptForCausalLM (the LayerNorm classes, docs/hf.md): their
 * rows, config.json (GPT2Config's, MptConfig's keys: the sizes, the GELU form, LayerNorm eps =
 * 1e-5, TSR_LN_EPS of kernels/ops.h) written, checked and read, their tensor names, and the
 * export's choice between them (model.pos other than "rope").
 *
 * transformers' GPT-2 uses Conv1D, (in, out): y = x W, so its weights are the transposes of
 * tessera's (out, in); MPT uses nn.Linear, tessera's layout. Both tie the LM head to wte, so no
 * lm_head.weight is written; wte is written with its V real rows (not the Vp padded ones).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "hf/hf_family.h"
#include "ops.h"

/* Non-parameter buffers: GPT-2's h.N.attn.bias (the causal mask) and h.N.attn.masked_bias. */
static int gpt2_buffer(const hf_family *f, const char *name) {
    int l, pos = 0;
    if (!strncmp(name, f->prefix, strlen(f->prefix))) name += strlen(f->prefix);
    if (sscanf(name, "h.%d.attn.%n", &l, &pos) != 1 || pos == 0) return 0;
    return !strcmp(name + pos, "bias") || !strcmp(name + pos, "masked_bias");
}

static int no_buffer(const hf_family *f, const char *name) {
    (void)f, (void)name;
    return 0;
}

static const hf_names gpt2_names = {
    .layer = "h.%ld.%n", .embed = "wte.weight", .up = "h.0.mlp.c_fc.weight", .up_dim = 1,
    .keys = {"n_layer", "n_embd", "vocab_size", "n_inner"}, .context = "n_positions",
    .buffer = gpt2_buffer};
static const hf_names mpt_names = {
    .layer = "blocks.%ld.%n", .embed = "wte.weight", .keys = {"n_layers", "d_model", "vocab_size", NULL},
    .context = "max_seq_len", .buffer = no_buffer};

/* ---- the tensor table ---- */

/* Per tessera parameter: HF names (after "transformer.", %d = layer; NULL = the architecture has
 * no such tensor), whether it is stacked per layer, whether GPT-2 holds its transpose. */
static const struct map_row {
    const char *gpt2, *mpt;
    int per_layer, transpose_gpt2;
} rows[] = {
    [TSR_P_WTE] = {"wte.weight", "wte.weight", 0, 0},
    [TSR_P_WPE] = {"wpe.weight", NULL, 0, 0},
    [TSR_P_LN1W] = {"h.%d.ln_1.weight", "blocks.%d.norm_1.weight", 1, 0},
    [TSR_P_LN1B] = {"h.%d.ln_1.bias", NULL, 1, 0},
    [TSR_P_QKVW] = {"h.%d.attn.c_attn.weight", "blocks.%d.attn.Wqkv.weight", 1, 1},
    [TSR_P_QKVB] = {"h.%d.attn.c_attn.bias", NULL, 1, 0},
    [TSR_P_ATTPROJW] = {"h.%d.attn.c_proj.weight", "blocks.%d.attn.out_proj.weight", 1, 1},
    [TSR_P_ATTPROJB] = {"h.%d.attn.c_proj.bias", NULL, 1, 0},
    [TSR_P_LN2W] = {"h.%d.ln_2.weight", "blocks.%d.norm_2.weight", 1, 0},
    [TSR_P_LN2B] = {"h.%d.ln_2.bias", NULL, 1, 0},
    [TSR_P_FCW] = {"h.%d.mlp.c_fc.weight", "blocks.%d.ffn.up_proj.weight", 1, 1},
    [TSR_P_FCB] = {"h.%d.mlp.c_fc.bias", NULL, 1, 0},
    [TSR_P_FCPROJW] = {"h.%d.mlp.c_proj.weight", "blocks.%d.ffn.down_proj.weight", 1, 1},
    [TSR_P_FCPROJB] = {"h.%d.mlp.c_proj.bias", NULL, 1, 0},
    [TSR_P_LNFW] = {"ln_f.weight", "norm_f.weight", 0, 0},
    [TSR_P_LNFB] = {"ln_f.bias", NULL, 0, 0},
    [TSR_P_QNORMW] = {NULL, NULL, 1, 0},
    [TSR_P_KNORMW] = {NULL, NULL, 1, 0},
    [TSR_P_LMHEAD] = {NULL, NULL, 0, 0},
    [TSR_P_MTPN] = {NULL, NULL, 0, 0}, /* (multi-token prediction: not in these families) */
};
_Static_assert(sizeof rows / sizeof rows[0] == TSR_P_COUNT, "one row per tessera parameter");

/* Parameter p's tensors (one per layer when stacked) appended to t[*k]. */
static void add_param(const tsr_model *m, const hf_family *f, int p, hf_tensor *t, int *k) {
    const struct map_row *r = &rows[p];
    const char *fmt = f == &hf_gpt2 ? r->gpt2 : r->mpt;
    const tsr_param_info *pi = &m->params_info[p];
    if (!fmt || (p == TSR_P_WPE && !pi->numel)) return;
    int layers = r->per_layer ? m->L : 1, tr = f == &hf_gpt2 && r->transpose_gpt2;
    /* the block: one layer's slice of a stacked tensor, or the whole tensor */
    int ndim = r->per_layer ? pi->ndim - 1 : pi->ndim;
    int64_t d0 = r->per_layer ? pi->shape[1] : pi->shape[0];
    int64_t d1 = ndim == 2 ? (r->per_layer ? pi->shape[2] : pi->shape[1]) : 1;
    if (p == TSR_P_WTE) d0 = m->V; /* the real vocabulary only */
    size_t numel = (size_t)d0 * (size_t)d1;
    for (int l = 0; l < layers; l++, (*k)++) {
        hf_tensor *h = &t[*k];
        char suffix[64];
        snprintf(suffix, sizeof suffix, fmt, l);
        snprintf(h->name, sizeof h->name, "%s%s", f->prefix, suffix);
        h->ndim = ndim;
        h->shape[0] = tr ? d1 : d0;
        h->shape[1] = tr ? d0 : d1;
        h->present = pi->numel > 0;
        h->numel = numel;
        h->offset = pi->offset + (size_t)l * numel;
        h->transpose = tr;
        h->rows = d0;
        h->cols = d1;
    }
}

/* GPT-2 and MPT in tessera's parameter order. */
static hf_tensor *ln_table(const tsr_model *m, const hf_family *f, int *n) {
    int k = 0;
    hf_tensor *t = tsr_calloc((size_t)TSR_P_COUNT * (size_t)(m->L + 1), sizeof *t);
    for (int p = 0; p < TSR_P_COUNT; p++) add_param(m, f, p, t, &k);
    *n = k;
    return t;
}

/* ---- writing ---- */

static void gpt2_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    const char *gelu = m->cfg.gelu == TSR_GELU_EXACT ? "gelu" : "gelu_new";
    (void)f;
    hfr_add(b, "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n  \"n_embd\": %d,\n"
            "  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": %d,\n"
            "  \"activation_function\": \"%s\",\n  \"layer_norm_epsilon\": %g,\n"
            "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n"
            "  \"scale_attn_weights\": true,\n  \"scale_attn_by_inverse_layer_idx\": false,\n"
            "  \"reorder_and_upcast_attn\": false,\n",
            m->V, m->maxT, m->maxT, m->C, m->L, m->NH, m->F, gelu, (double)TSR_LN_EPS);
}

static void mpt_write(hf_text *b, const tsr_model *m, const hf_family *f) {
    (void)f;
    hfr_add(b, "  \"vocab_size\": %d,\n  \"max_seq_len\": %d,\n  \"d_model\": %d,\n  \"n_layers\": %d,\n"
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
}

/* ---- checking ---- */

static void check_eps(hf_reader *c, const json_value *root) {
    double eps = hfr_num(c, root, "layer_norm_epsilon", 1e-5);
    if (fabs(eps - TSR_LN_EPS) > 1e-6 * TSR_LN_EPS)
        hfr_fault(c, TSR_EXIT_DATA, "layer_norm_epsilon = %g, tessera's LayerNorm uses %g", eps,
                  (double)TSR_LN_EPS);
}

/* The GELU: activation_function's form against the run's model.gelu. */
static void check_gelu(hf_reader *c, const json_value *r, const tsr_model_config *mc) {
    const char *act = hfr_str(c, r, "activation_function", "gelu_new");
    int tanh_form = !strcmp(act, "gelu_new") || !strcmp(act, "gelu_pytorch_tanh") ||
                    !strcmp(act, "gelu_fast");
    if (!tanh_form && strcmp(act, "gelu") != 0)
        hfr_fault(c, TSR_EXIT_DATA, "activation_function = \"%s\": tessera has the tanh GELU "
                  "(gelu_new, gelu_pytorch_tanh, gelu_fast) and the exact one (gelu) only", act);
    else if (tanh_form != (mc->gelu == TSR_GELU_TANH))
        hfr_fault(c, TSR_EXIT_USAGE, "activation_function = \"%s\", but this run has model.gelu = "
                  "\"%s\": set --set model.gelu=%s", act, tanh_form ? "exact" : "tanh",
                  tanh_form ? "tanh" : "exact");
}

static void gpt2_check(hf_reader *c, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *mc = &m->cfg;
    const json_value *r = c->root;
    if (mc->pos != TSR_POS_LEARNED)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"gpt2\" (learned positions), but this run has "
                  "model.pos = \"alibi\": set --set model.pos=learned");
    long L = hfr_int(c, r, "n_layer", 12), C = hfr_int(c, r, "n_embd", 768);
    hfr_same(c, "n_layer", L, "model.n_layer", mc->n_layer, "");
    hfr_same(c, "n_embd", C, "model.d_model", mc->d_model, "");
    hfr_same(c, "n_head", hfr_int(c, r, "n_head", 12), "model.n_head", mc->n_head, "");
    hfr_same(c, "vocab_size", hfr_int(c, r, "vocab_size", 50257), "model.vocab_size",
             mc->vocab_size, "");
    hfr_same(c, "n_positions", hfr_int(c, r, "n_positions", 1024), "model.max_seq_len", m->maxT,
             mc->max_seq_len ? "" : " (0 = seq_len)");
    long F = hfr_int(c, r, "n_inner", 4 * C);
    if (!c->rc && F != m->F)
        hfr_fault(c, TSR_EXIT_USAGE, "n_inner = %ld (MLP width), but this run's is %d "
                  "(model.expansion_ratio = %g): set --set model.expansion_ratio=%.17g", F, m->F,
                  mc->expansion_ratio, (double)F / (double)C);
    check_gelu(c, r, mc);
    if (!hfr_bool(c, r, "scale_attn_weights", 1) ||
        hfr_bool(c, r, "scale_attn_by_inverse_layer_idx", 0))
        hfr_fault(c, TSR_EXIT_DATA, "scale_attn_weights must be true and "
                  "scale_attn_by_inverse_layer_idx false: tessera scales attention scores by "
                  "1/sqrt(head size) only");
    hf_moe_check(c, r, m, f);
    check_eps(c, r);
}

/* MptConfig's attn_config: tessera's attention (ALiBi of alibi_bias_max 8, nothing else). */
static void check_attn_config(hf_reader *c, const json_value *r) {
    const json_value *ac = hfr_member(r, "attn_config");
    if (ac && ac->type != JSON_OBJECT) hfr_fault(c, TSR_EXIT_DATA, "attn_config is not an object");
    if (!hfr_bool(c, ac, "alibi", 1) || hfr_num(c, ac, "alibi_bias_max", 8) != 8)
        hfr_fault(c, TSR_EXIT_DATA, "attn_config: alibi must be true with alibi_bias_max 8 "
                  "(tessera's ALiBi slopes)");
    const json_value *ss = hfr_member(ac, "softmax_scale"), *cq = hfr_member(ac, "clip_qkv");
    if ((ss && ss->type != JSON_NULL) || (cq && cq->type != JSON_NULL) ||
        hfr_bool(c, ac, "qk_ln", 0) || hfr_bool(c, ac, "prefix_lm", 0))
        hfr_fault(c, TSR_EXIT_DATA, "attn_config: softmax_scale and clip_qkv must be null, qk_ln "
                  "and prefix_lm false (tessera's attention has none of them)");
    if (strcmp(hfr_str(c, ac, "attn_type", "multihead_attention"), "multihead_attention") != 0)
        hfr_fault(c, TSR_EXIT_DATA, "attn_config.attn_type must be \"multihead_attention\"");
}

static void mpt_check(hf_reader *c, const tsr_model *m, const hf_family *f) {
    const tsr_model_config *mc = &m->cfg;
    const json_value *r = c->root;
    if (mc->pos != TSR_POS_ALIBI || mc->bias || mc->gelu != TSR_GELU_EXACT)
        hfr_fault(c, TSR_EXIT_USAGE, "model_type = \"mpt\" (ALiBi, no biases, exact GELU), but "
                  "this run has model.pos = \"%s\", model.bias = %s, model.gelu = \"%s\": set --set "
                  "model.pos=alibi --set model.bias=false --set model.gelu=exact",
                  mc->pos == TSR_POS_ALIBI ? "alibi" : "learned", mc->bias ? "true" : "false",
                  mc->gelu == TSR_GELU_EXACT ? "exact" : "tanh");
    hfr_same(c, "n_layers", hfr_int(c, r, "n_layers", 24), "model.n_layer", mc->n_layer, "");
    hfr_same(c, "d_model", hfr_int(c, r, "d_model", 2048), "model.d_model", mc->d_model, "");
    hfr_same(c, "n_heads", hfr_int(c, r, "n_heads", 16), "model.n_head", mc->n_head, "");
    hfr_same(c, "vocab_size", hfr_int(c, r, "vocab_size", 50368), "model.vocab_size",
             mc->vocab_size, "");
    double er = hfr_num(c, r, "expansion_ratio", 4);
    if (!c->rc && (er != 4 || m->F != 4 * m->C))
        hfr_fault(c, er != 4 ? TSR_EXIT_DATA : TSR_EXIT_USAGE, "expansion_ratio = %g, this run has "
                  "model.expansion_ratio = %g (transformers' MPT MLP is always 4 x d_model wide)",
                  er, mc->expansion_ratio);
    if (!hfr_bool(c, r, "no_bias", 1))
        hfr_fault(c, TSR_EXIT_DATA, "no_bias = false: transformers' MptForCausalLM has no biases, "
                  "and tessera imports MPT without biases only");
    const json_value *ls = hfr_member(r, "logit_scale");
    if (ls && ls->type != JSON_NULL)
        hfr_fault(c, TSR_EXIT_DATA, "logit_scale is set: tessera has no logit scaling");
    check_attn_config(c, r);
    hf_moe_check(c, r, m, f);
    check_eps(c, r);
}

/* ---- filling ---- */

/* What GPT-2 and MPT share: LayerNorm, a GELU MLP, no experts, the sizes under their names. */
static void fill_common(hf_reader *c, const hf_family *f) {
    const int gpt2 = f == &hf_gpt2;
    const char *mt = f->model_type;
    hfr_put_word(c, "model.pos", gpt2 ? "learned" : "alibi", mt, gpt2 ? "learned positions" : "ALiBi");
    hfr_put_word(c, "model.norm", "layernorm", mt, "LayerNorm");
    hfr_put_word(c, "model.mlp", "gelu", mt, "a GELU MLP");
    hfr_put_word(c, "model.moe_experts", "0", mt, "no experts");
    hfr_put_layers(c, "model.n_layer", f->names->keys[0], gpt2 ? 12 : 24);
    hfr_put_int(c, 0, "model.d_model", f->names->keys[1], gpt2 ? 768 : 2048);
    hfr_put_int(c, 0, "model.n_head", gpt2 ? "n_head" : "n_heads", gpt2 ? 12 : 16);
    hfr_put_int(c, 0, "model.vocab_size", "vocab_size", gpt2 ? 50257 : 50368);
    hfr_put_int(c, !gpt2, "model.max_seq_len", f->names->context, gpt2 ? 1024 : 2048);
}

static void mpt_fill(hf_reader *c, const hf_family *f) {
    fill_common(c, f);
    hfr_put_word(c, "model.bias", "false", f->model_type, "no biases");
    hfr_put_word(c, "model.gelu", "exact", f->model_type, "the exact GELU");
    hfr_put_num(c, "model.expansion_ratio", c->root, "expansion_ratio", 4);
}

static void gpt2_fill(hf_reader *c, const hf_family *f) {
    const json_value *r = c->root;
    fill_common(c, f);
    long C = hfr_int(c, r, "n_embd", 768), Fw = hfr_int(c, r, "n_inner", 4 * C);
    char v[32], from[96];
    hfr_double(v, sizeof v, C > 0 ? (double)Fw / (double)C : 4);
    snprintf(from, sizeof from, "n_inner = %ld at n_embd = %ld", Fw, C);
    hfr_put(c, 0, "model.expansion_ratio", v, from);
    const char *act = hfr_str(c, r, "activation_function", "gelu_new");
    snprintf(from, sizeof from, "activation_function = \"%s\"", act);
    hfr_put(c, 0, "model.gelu", strcmp(act, "gelu") ? "tanh" : "exact", from);
    hfr_put_word(c, "model.bias", "true", f->model_type,
                 "biases; a run without them takes all-zero ones");
    c->fill->kv[c->fill->n - 1].soft = 1;
}

static const hf_family_ops gpt2_ops = {gpt2_write, gpt2_check, gpt2_fill, ln_table, NULL};
static const hf_family_ops mpt_ops = {mpt_write, mpt_check, mpt_fill, ln_table, NULL};

const hf_family hf_gpt2 = {"gpt2", "GPT2LMHeadModel", &gpt2_ops, &gpt2_names, "transformer.",
                           .place = TSR_NPLACE_PRE, .tied = 1};
const hf_family hf_mpt = {"mpt", "MptForCausalLM", &mpt_ops, &mpt_names, "transformer.",
                          .place = TSR_NPLACE_PRE, .tied = 1};

/* ---- the export's choice ---- */

/* MPT: ALiBi without biases, the exact GELU, an MLP of 4 d_model; else why not. */
static int choose_mpt(const tsr_model *m, const hf_family **f, char *why, size_t cap) {
    const tsr_model_config *c = &m->cfg;
    if (c->bias)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, which has no biases, "
                 "but this model has model.bias = true (transformers has no ALiBi model with "
                 "biases)");
    else if (c->gelu != TSR_GELU_EXACT)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, whose MLP uses the "
                 "exact GELU, but this model has model.gelu = \"tanh\"");
    else if (m->F != 4 * m->C)
        snprintf(why, cap, "model.pos = \"alibi\" exports as MptForCausalLM, whose MLP is 4 x "
                 "d_model = %d wide, but this model's is %d (model.expansion_ratio = %g)",
                 4 * m->C, m->F, c->expansion_ratio);
    else {
        *f = &hf_mpt;
        return 0;
    }
    return TSR_EXIT_USAGE;
}

int hf_gpt2_choose(const tsr_model *m, const hf_family *want, const hf_family **f, char *why,
                   size_t cap) {
    const tsr_model_config *c = &m->cfg;
    const char *variant = config_attn_variant_key(c);
    if (variant) { /* GPT-2 and MPT have none of the variants */
        snprintf(why, cap, "this model sets %s, which GPT2LMHeadModel and MptForCausalLM do not "
                 "have (the classes that do need model.pos = \"rope\"; docs/models.md)", variant);
        return TSR_EXIT_USAGE;
    }
    if (want && want->rope) {
        snprintf(why, cap, "%s needs model.pos = \"rope\", this model has \"%s\"", want->class_name,
                 c->pos == TSR_POS_ALIBI ? "alibi" : "learned");
        return TSR_EXIT_USAGE;
    }
    if (c->norm != TSR_NORM_LAYERNORM || c->mlp != TSR_MLP_GELU || m->KVH != m->NH ||
        c->qk_norm || c->qkv_bias || !c->tie_embeddings || m->hs * m->NH != m->C || m->E) {
        snprintf(why, cap, "GPT2LMHeadModel and MptForCausalLM have LayerNorm, a GELU MLP, as many "
                 "key/value heads as heads of size d_model / n_head, no QK-norm, no qkv_bias, "
                 "no experts and a tied head; this model differs (the Llama family needs "
                 "model.pos = \"rope\")");
        return TSR_EXIT_USAGE;
    }
    if (c->pos != TSR_POS_LEARNED) return choose_mpt(m, f, why, cap);
    *f = &hf_gpt2; /* any GELU, any MLP width (n_inner); no biases are written as zeros, which
                    * computes the same */
    return 0;
}

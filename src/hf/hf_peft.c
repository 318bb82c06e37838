/* hf_peft.c — a LoRA checkpoint's adapters as a PEFT directory (hf.h hf_export_adapter;
 * docs/lora.md): adapter_config.json and adapter_model.safetensors with PEFT's tensor names. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "hf/hf.h"
#include "hf/hf_importer.h"
#include "hf/hf_internal.h"
#include "hf/hf_qwen3next.h"
#include "json.h"
#include "model/ckpt_model.h"
#include "model/model_lora.h"

/* the transformers module a target is, and its parent in a decoder layer: the Llama family's
 * seven, Qwen3-Next's linear_attn modules, attn_gate, the gate half of a gated attention's
 * q_proj (one PEFT module with q's adapter: peft_mod below, docs/lora.md "PEFT and the hybrid"),
 * and DeepSeek's multi-head latent attention's (q and o its q_proj and o_proj) */
static const char *const module_of[TSR_LORA_COUNT] = {
    "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
    "in_proj_qkvz", "in_proj_ba", "out_proj", "q_proj",
    "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"};
static const char *const parent_of[TSR_LORA_COUNT] = {
    "self_attn", "self_attn", "self_attn", "self_attn", "mlp", "mlp", "mlp",
    "linear_attn", "linear_attn", "linear_attn", "self_attn",
    "self_attn", "self_attn", "self_attn", "self_attn"};

/* The class whose module names the PEFT files use: the model's (model.hf_model_type, else the
 * one its features choose; hf_family_for), so Qwen 3.5's imports and recipes get its names. */
static const hf_family *peft_arch(const tsr_lora *lo) {
    const hf_family *a;
    char why[512];
    return hf_family_for(lo->model, NULL, &a, why, sizeof why) ? &hf_llama : a;
}

/* Qwen 3.5's unfused DeltaNet projections: tessera's in_proj_qkvz (in_proj_ba) adapter is two
 * PEFT modules, in_proj_qkv and in_proj_z (in_proj_b and in_proj_a), with the same A and B's
 * rows split (docs/lora.md "PEFT and the hybrid"): the halves of target t, or 0 */
static int halves(const tsr_lora *lo, int t) {
    const hf_hybrid *hy = hf_hybrid_of(peft_arch(lo));
    return hy && hy->unfused && (t == TSR_LORA_QKVZ || t == TSR_LORA_BA) ? 2 : 0;
}
static const char *const half_module[2][2] = {{"in_proj_qkv", "in_proj_z"},
                                              {"in_proj_b", "in_proj_a"}};

/* PEFT's name of layer l's target t adapter matrix (A, or B when is_b); half >= 0: that half */
static void peft_name(char *buf, size_t cap, const tsr_lora *lo, int l, int t, int half, int is_b) {
    snprintf(buf, cap, "base_model.model.%slayers.%d.%s.%s.lora_%c.weight",
             peft_arch(lo)->prefix, l, parent_of[t],
             half >= 0 ? half_module[t == TSR_LORA_BA][half] : module_of[t], is_b ? 'B' : 'A');
}

/* ---- a PEFT module of one layer and tessera's adapters on it ---- */

/* The module named by target t (q_proj for attn_gate), and whether it is the q_proj of a gated
 * attention (model.attn_output_gate: HF's q_proj holds the query and the gate, per head). */
static int module_target(int t) { return t == TSR_LORA_AGATE ? TSR_LORA_Q : t; }
static int gated_q(const tsr_lora *lo, int t) {
    return t == TSR_LORA_Q && lo->model->cfg.attn_output_gate;
}

/* The module of layer l named by target t (not attn_gate): the targets on it (parts: t, and
 * attn_gate on a gated q_proj), and for each row of its lora_B the part it belongs to and its row
 * in that part's B (tessera's order; Qwen3-Next's fused modules interleave them per head as the
 * base's rows: hf_qwen3next_fused). A part is on when lo has its adapter. */
typedef struct peft_mod {
    int l, t, half, np, part[2], on[2], slot[2]; /* half: -1, or which of halves() */
    int rows, in, n_on, R; /* lora_B rows, lora_A columns, parts on, lora.rank */
    int32_t *pj, *row;     /* (rows) */
} peft_mod;

/* the fused rows of the module: group g of the pieces in turn (hf_qwen3next.h) */
static void fused_rows(const tsr_lora *lo, peft_mod *md, hf_fused which) {
    hf_piece ps[4];
    int groups, h = 0;
    const int np = hf_qwen3next_fused(lo->model, which, ps, &groups);
    for (int g = 0; g < groups; g++)
        for (int i = 0; i < np; i++) {
            const int second = ps[i].p == TSR_P_DNZW || ps[i].p == TSR_P_DNAW;
            const int64_t off = second ? lo->rows0[md->t] : 0;
            for (int64_t k = 0; k < ps[i].rows; k++, h++) {
                md->pj[h] = ps[i].p == TSR_P_ATTNGATEW;
                md->row[h] = (int32_t)(off + ps[i].r0 + g * ps[i].rows + k);
            }
        }
}

/* md for layer l and module target t (its half when half >= 0): 1, or 0 when the layer has no
 * adapter on that module */
static int mod_open(const tsr_lora *lo, int l, int t, int half, peft_mod *md) {
    memset(md, 0, sizeof *md);
    md->l = l, md->t = t, md->half = half, md->np = gated_q(lo, t) ? 2 : 1, md->R = lo->R;
    md->part[0] = t, md->part[1] = TSR_LORA_AGATE;
    for (int j = 0; j < md->np; j++) {
        md->slot[j] = lora_slot(lo, l, md->part[j]);
        md->on[j] = lora_target_on(lo, md->part[j]) && md->slot[j] >= 0;
        md->n_on += md->on[j];
    }
    if (!md->n_on) return 0;
    md->rows = lo->out[t] * md->np, md->in = lo->in[t];
    md->pj = tsr_calloc((size_t)md->rows, sizeof *md->pj);
    md->row = tsr_malloc((size_t)md->rows * sizeof *md->row);
    if (half >= 0) { /* the first rows0 rows of tessera's B, or the rest */
        const int r0 = (int)lo->rows0[t];
        md->rows = half ? lo->out[t] - r0 : r0;
        for (int h = 0; h < md->rows; h++) md->row[h] = (half ? r0 : 0) + h;
    } else if (t == TSR_LORA_QKVZ || t == TSR_LORA_BA || md->np == 2)
        fused_rows(lo, md, t == TSR_LORA_QKVZ ? HF_FUSED_QKVZ : t == TSR_LORA_BA ? HF_FUSED_BA
                                                                               : HF_FUSED_Q);
    else
        for (int h = 0; h < md->rows; h++) md->row[h] = h;
    return 1;
}

static void mod_close(peft_mod *md) { free(md->pj), free(md->row); }

/* part j's A and B in a store w of lo's layout */
static float *part_a(const tsr_lora *lo, float *w, const peft_mod *md, int j) {
    const int t = md->part[j];
    return w + lo->a_at[t] + (size_t)md->slot[j] * (size_t)lo->R * (size_t)lo->in[t];
}
static float *part_b(const tsr_lora *lo, float *w, const peft_mod *md, int j, int row) {
    const int t = md->part[j];
    return w + lo->b_at[t] + ((size_t)md->slot[j] * (size_t)lo->out[t] + (size_t)row) * (size_t)lo->R;
}

/* the first column of part j's block in the module's rank (Rm): the parts on stacked, or 0 when
 * both share one A (a PEFT rank-R q_proj read in) */
static int part_col(const peft_mod *md, int j, int Rm) {
    return Rm == md->R ? 0 : j && md->on[0] ? md->R : 0;
}

/* The module's lora_A (Rm, in) and lora_B (rows, Rm), Rm = n_on R: the parts on stacked (A) and
 * in their column blocks (B), zeros elsewhere. Exact: sum_j B_j A_j. Malloc'd. */
static void mod_export(const tsr_lora *lo, const peft_mod *md, float **A, float **B) {
    const int R = lo->R, Rm = md->n_on * R;
    *A = tsr_malloc((size_t)Rm * (size_t)md->in * sizeof **A);
    *B = tsr_calloc((size_t)md->rows * (size_t)Rm, sizeof **B);
    for (int j = 0; j < md->np; j++)
        if (md->on[j])
            memcpy(*A + (size_t)part_col(md, j, Rm) * (size_t)md->in, part_a(lo, lo->w, md, j),
                   (size_t)R * (size_t)md->in * sizeof **A);
    for (int h = 0; h < md->rows; h++)
        if (md->on[md->pj[h]])
            memcpy(*B + (size_t)h * (size_t)Rm + part_col(md, md->pj[h], Rm),
                   part_b(lo, lo->w, md, md->pj[h], md->row[h]), (size_t)R * sizeof **B);
}

/* The reverse of mod_export, from the file's A (Rm, in) and B (rows, Rm) into lo->w: Rm = n_on R
 * (column blocks), or R with both parts on (one A shared: PEFT's own q_proj adapter). Every entry
 * of B outside a row's block, and every row of a part the run has no adapter for, must be 0 (the
 * run could not hold it): else TSR_EXIT_USAGE naming the tensor and the row. */
static int mod_import(tsr_lora *lo, const peft_mod *md, int Rm, const float *A, const float *B,
                      const char *path, const char *name) {
    const int R = lo->R;
    for (int j = 0; j < md->np; j++)
        if (md->on[j])
            memcpy(part_a(lo, lo->w, md, j), A + (size_t)part_col(md, j, Rm) * (size_t)md->in,
                   (size_t)R * (size_t)md->in * sizeof *A);
    for (int h = 0; h < md->rows; h++) {
        const int j = md->pj[h], c0 = md->on[j] ? part_col(md, j, Rm) : Rm;
        const float *b = B + (size_t)h * (size_t)Rm;
        for (int c = 0; c < Rm; c++)
            if ((c < c0 || c >= c0 + R) && b[c] != 0.0f) {
                tsr_error("%s: %s row %d column %d is %g, but this run's adapters cannot hold it "
                          "(%s): set lora.targets to cover it (docs/lora.md \"PEFT and the hybrid\")",
                          path, name, h, c, (double)b[c], md->on[j] ? "another target's block" :
                          j ? "the gate's rows, and lora.targets has no attn_gate" :
                              "the query's rows, and lora.targets has no q");
                return TSR_EXIT_USAGE;
            }
        if (md->on[j]) memcpy(part_b(lo, lo->w, md, j, md->row[h]), b + c0, (size_t)R * sizeof *b);
    }
    return 0;
}

/* bit t: the module named by target t holds adapters of lo (attn_gate's in q_proj's bit) */
static unsigned modules_on(const tsr_lora *lo) {
    unsigned mask = 0;
    for (int t = 0; t < TSR_LORA_COUNT; t++)
        if (lo->a_at[t] != SIZE_MAX) mask |= 1u << module_target(t);
    return mask;
}

/* q_proj of a gated attention holds both q's and attn_gate's adapters (rank 2 r) */
static int q_joined(const tsr_lora *lo) {
    return gated_q(lo, TSR_LORA_Q) && lora_target_on(lo, TSR_LORA_Q) &&
           lora_target_on(lo, TSR_LORA_AGATE);
}

/* The PEFT tensors of lo, layer by layer, module by module, lora_A then lora_B (names[] and
 * vals[] malloc'd by the caller, 2 L TSR_LORA_COUNT of each; the values malloc'd here). */
static int peft_tensors(const tsr_lora *lo, st_dtype dt, st_tensor *st, char (*names)[128],
                        float **vals) {
    int n = 0;
    peft_mod md;
    for (int l = 0; l < lo->L; l++)
        for (int t = 0; t < TSR_LORA_COUNT; t++)
            for (int h = halves(lo, t) ? 0 : -1; h < halves(lo, t); h++) {
                if (t == TSR_LORA_AGATE || !mod_open(lo, l, t, h, &md)) continue;
                mod_export(lo, &md, &vals[n], &vals[n + 1]);
                const int64_t shape[2][2] = {{md.n_on * lo->R, md.in}, {md.rows, md.n_on * lo->R}};
                for (int k = 0; k < 2; k++, n++) {
                    peft_name(names[n], sizeof names[n], lo, l, t, h, k);
                    st[n] = (st_tensor){.name = names[n], .dtype = dt, .ndim = 2,
                                        .shape = {shape[k][0], shape[k][1]}, .src = vals[n]};
                }
                mod_close(&md);
            }
    return n;
}

/* adapter_config.json: LoraConfig's fields as PEFT's save_pretrained writes them (sorted keys) */
static int write_config(const char *path, const tsr_config *cfg, const tsr_lora *lo) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) tsr_die(TSR_EXIT_INTERNAL, "open_memstream failed");
    char ap[64] = "{}", rp[64] = "{}";
    if (q_joined(lo)) { /* q_proj holds q's and attn_gate's adapters: rank 2 r, the same scale */
        snprintf(ap, sizeof ap, "{\n    \"q_proj\": %.17g\n  }", 2 * cfg->lora.alpha);
        snprintf(rp, sizeof rp, "{\n    \"q_proj\": %d\n  }", 2 * lo->R);
    }
    fprintf(f, "{\n  \"alpha_pattern\": %s,\n  \"auto_mapping\": null,\n"
               "  \"base_model_name_or_path\": ", ap);
    json_fput_string(f, cfg->lora.base);
    fprintf(f, ",\n  \"bias\": \"none\",\n"
               "  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n"
               "  \"init_lora_weights\": true,\n  \"layers_pattern\": null,\n"
               "  \"layers_to_transform\": null,\n  \"lora_alpha\": %.17g,\n"
               "  \"lora_dropout\": %.17g,\n  \"modules_to_save\": null,\n"
               "  \"peft_type\": \"LORA\",\n  \"r\": %d,\n  \"rank_pattern\": %s,\n"
               "  \"revision\": null,\n  \"target_modules\": [",
            cfg->lora.alpha, cfg->lora.dropout, lo->R, rp);
    int n = 0;
    for (int t = 0; t < TSR_LORA_COUNT; t++)
        for (int h = halves(lo, t) ? 0 : -1; h < halves(lo, t) && (modules_on(lo) & (1u << t)); h++)
            fprintf(f, "%s\n    \"%s\"", n++ ? "," : "",
                    h >= 0 ? half_module[t == TSR_LORA_BA][h] : module_of[t]);
    fprintf(f, "\n  ],\n  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n"
               "  \"use_rslora\": false\n}\n");
    fclose(f);
    int rc = hf_write_file(path, text, len);
    free(text);
    return rc;
}

int hf_export_adapter(const tsr_model *m, const tsr_config *cfg, const struct tsr_lora *lo,
                      const char *out_dir, const hf_export_opts *o) {
    const hf_family *a = NULL, *want = o->arch ? hf_family_named(o->arch) : NULL;
    char why[512] = "", path[4300];
    TSR_CHECK(hf_export_check_opts(o));
    if (hf_family_for(m, want, &a, why, sizeof why) || !a->rope) {
        tsr_error("export --adapter: %s", a && !a->rope && !why[0] ? "PEFT adapters are written "
                  "for the Llama family (RoPE models) only so far" : why);
        return TSR_EXIT_USAGE;
    }
    const hf_family *pa = peft_arch(lo); /* the names follow the model's class */
    if (strcmp(a->prefix, pa->prefix) || (hf_hybrid_of(a) && hf_hybrid_of(a)->unfused) !=
                                                   (hf_hybrid_of(pa) && hf_hybrid_of(pa)->unfused)) {
        tsr_error("export --adapter: --arch %s names modules other than this model's class %s "
                  "(model.hf_model_type): set --set model.hf_model_type=%s on the run instead",
                  a->model_type, pa->model_type, a->model_type);
        return TSR_EXIT_USAGE;
    }
    if (tsr_snprintf(path, sizeof path, "%s/adapter_model.safetensors", out_dir) ||
        fs_make_parents(path) != 0) {
        tsr_error("%s: cannot create the output directory", out_dir);
        return TSR_EXIT_DATA;
    }
    const size_t cap = (size_t)(2 * (TSR_LORA_COUNT + 2) * lo->L); /* (+ the halves) */
    st_tensor *st = tsr_calloc(cap, sizeof *st);
    char(*names)[128] = tsr_calloc(cap, sizeof *names);
    float **vals = tsr_calloc(cap, sizeof *vals);
    const int n = peft_tensors(lo, o->dtype, st, names, vals);
    st_kv meta[] = {{"format", "pt"}};
    int rc = st_save(path, st, n, meta, 1);
    if (!rc) printf("wrote %s: %d tensors over %d layers, %s\n", path, n, lo->L,
                    st_dtype_name(o->dtype));
    for (int i = 0; i < n; i++) free(vals[i]);
    free(vals), free(st), free(names);
    if (rc) return rc;
    snprintf(path, sizeof path, "%s/adapter_config.json", out_dir);
    TSR_CHECK(write_config(path, cfg, lo));
    printf("wrote %s: r %d, lora_alpha %g, base %s (model_type %s)\n", path, lo->R, cfg->lora.alpha,
           cfg->lora.base[0] ? cfg->lora.base : "(none: the seed's weights)", a->model_type);
    printf("load it with: peft.PeftModel.from_pretrained(base_model, \"%s\")\n", out_dir);
    return 0;
}

int hf_is_peft_dir(const char *path) {
    char p[4300];
    struct stat st;
    return snprintf(p, sizeof p, "%s/adapter_config.json", path) < (int)sizeof p &&
           stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* r: a positive integer equal to the run's lora.rank. Values are quoted as the file gives them. */
static int check_rank(const char *path, const json_value *root, const tsr_lora *lo) {
    const json_value *v = json_get(root, "r");
    char got[96];
    if (!v) {
        tsr_error("%s: no \"r\" (the adapters' rank)", path);
        return TSR_EXIT_DATA;
    }
    json_describe(v, got, sizeof got);
    if (v->type != JSON_NUMBER || v->num < 1 || v->num > 65536 || v->num != floor(v->num)) {
        tsr_error("%s: r = %s: expected the adapters' rank, a whole number from 1 to 65536", path,
                  got);
        return TSR_EXIT_DATA;
    }
    if (v->num != lo->R) {
        tsr_error("%s: r = %s, this run has lora.rank = %d: set lora.rank to the adapter's", path,
                  got, lo->R);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

static int check_alpha(const char *path, const json_value *root, const tsr_config *cfg) {
    const json_value *v = json_get(root, "lora_alpha");
    char got[96], want[40];
    if (!v || v->type != JSON_NUMBER || !(v->num > 0)) {
        tsr_error("%s: lora_alpha = %s: expected a positive number", path,
                  v ? json_describe(v, got, sizeof got) : "(missing)");
        return TSR_EXIT_DATA;
    }
    if (v->num != cfg->lora.alpha) {
        tsr_fmt_shortest(want, sizeof want, cfg->lora.alpha);
        tsr_error("%s: lora_alpha = %s, this run has lora.alpha = %s: set lora.alpha to the "
                  "adapter's", path, json_describe(v, got, sizeof got), want);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* rank_pattern / alpha_pattern: a module's own rank or alpha. tessera's adapters share one r and
 * one alpha, so an entry that differs from r / lora_alpha is refused by name (one that equals
 * them changes nothing); absent, null or {} is the common case. */
static int check_pattern(const char *path, const json_value *root, const char *key,
                         const char *what, double global, double q_too, double *q) {
    const json_value *p = json_get(root, key);
    char got[96], want[40];
    *q = global;
    if (!p || p->type == JSON_NULL) return 0;
    if (p->type != JSON_OBJECT) {
        tsr_error("%s: %s = %s: expected an object of module names and %ss", path, key,
                  json_describe(p, got, sizeof got), what);
        return TSR_EXIT_DATA;
    }
    for (const json_value *e = p->child; e; e = e->next) {
        if (e->type == JSON_NUMBER && e->num == global) continue;
        if (q_too > 0 && e->type == JSON_NUMBER && e->num == q_too && !strcmp(e->key, "q_proj")) {
            *q = q_too; /* a gated q_proj holding q's and attn_gate's adapters */
            continue;
        }
        json_value name = {.type = JSON_STRING, .str = e->key, .len = e->key_len};
        char mod[96];
        tsr_fmt_shortest(want, sizeof want, global);
        tsr_error("%s: %s gives module %s the %s %s, but tessera's adapters share one %s (this "
                  "adapter's is %s): per-module %ss are not supported; drop the entry or give it %s",
                  path, key, json_describe(&name, mod, sizeof mod), what,
                  json_describe(e, got, sizeof got), what, want, what, want);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* the target a PEFT module name stands for (q_proj: q; Qwen 3.5's halves: theirs), or -1 */
static int target_named(const json_value *e) {
    for (int t = 0; t < TSR_LORA_COUNT && e->type == JSON_STRING && json_str_plain(e); t++)
        if (t != TSR_LORA_AGATE && !strcmp(e->str, module_of[t])) return t;
    for (int k = 0; k < 4 && e->type == JSON_STRING && json_str_plain(e); k++)
        if (!strcmp(e->str, half_module[k / 2][k % 2])) return k / 2 ? TSR_LORA_BA : TSR_LORA_QKVZ;
    return -1;
}

/* target_modules: PEFT's module names of this run's lora.targets, no other */
static int check_targets(const char *path, const json_value *root, const tsr_config *cfg,
                         const tsr_lora *lo) {
    const json_value *v = json_get(root, "target_modules");
    char got[96];
    if (!v || v->type != JSON_ARRAY) {
        tsr_error("%s: target_modules is not a list of module names", path);
        return TSR_EXIT_DATA;
    }
    unsigned mask = 0;
    for (const json_value *e = v->child; e; e = e->next) {
        const int t = target_named(e);
        if (t < 0) {
            tsr_error("%s: target module %s is not one of q_proj, k_proj, v_proj, o_proj, "
                      "gate_proj, up_proj, down_proj, in_proj_qkvz, in_proj_ba, out_proj (Qwen 3.5: "
                      "in_proj_qkv, in_proj_z, in_proj_b, in_proj_a), q_a_proj, q_b_proj, "
                      "kv_a_proj_with_mqa, kv_b_proj (DeepSeek)", path,
                      json_describe(e, got, sizeof got));
            return TSR_EXIT_USAGE;
        }
        mask |= 1u << t;
    }
    if (mask != modules_on(lo)) {
        tsr_error("%s: its target_modules are not this run's lora.targets = \"%s\": set "
                  "lora.targets to the adapter's%s", path, cfg->lora.targets,
                  gated_q(lo, TSR_LORA_Q) ? " (on this gated attention, q_proj is q and/or "
                  "attn_gate)" : "");
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* rank_pattern and alpha_pattern: none but a gated q_proj's {"q_proj": 2 r} with {"q_proj":
 * 2 lora_alpha} (q's and attn_gate's adapters stacked, as the export writes them), which sets
 * *q_rank; else r */
static int check_patterns(const char *path, const json_value *root, const tsr_config *cfg,
                          const tsr_lora *lo, int *q_rank) {
    const int two = q_joined(lo) ? 2 : 0;
    double qr, qa;
    TSR_CHECK(check_pattern(path, root, "rank_pattern", "rank", (double)lo->R, two * lo->R, &qr));
    TSR_CHECK(check_pattern(path, root, "alpha_pattern", "alpha", cfg->lora.alpha,
                            two * cfg->lora.alpha, &qa));
    if (qa * lo->R != cfg->lora.alpha * qr) {
        tsr_error("%s: q_proj's rank %g and alpha %g (rank_pattern, alpha_pattern) do not keep "
                  "the adapters' scale lora_alpha / r = %g: give both patterns or neither", path,
                  qr, qa, cfg->lora.alpha / lo->R);
        return TSR_EXIT_USAGE;
    }
    *q_rank = (int)qr;
    return 0;
}

/* adapter_config.json against the run's LoRA: the PEFT type, r, lora_alpha, their per-module
 * patterns, rsLoRA and DoRA, target_modules */
static int check_peft_fields(const char *path, const json_value *root, const tsr_config *cfg,
                             const tsr_lora *lo, int *q_rank) {
    const json_value *v;
    if (!(v = json_get(root, "peft_type")) || v->type != JSON_STRING || strcmp(v->str, "LORA") != 0) {
        tsr_error("%s: peft_type is not \"LORA\" (expected a PEFT LoRA adapter)", path);
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(check_rank(path, root, lo));
    TSR_CHECK(check_alpha(path, root, cfg));
    TSR_CHECK(check_patterns(path, root, cfg, lo, q_rank));
    if ((v = json_get(root, "use_rslora")) && v->type == JSON_TRUE) {
        tsr_error("%s: use_rslora = true (scale alpha / sqrt(r)) is not supported", path);
        return TSR_EXIT_USAGE;
    }
    if ((v = json_get(root, "use_dora")) && v->type == JSON_TRUE) {
        tsr_error("%s: use_dora = true (DoRA) is not supported", path);
        return TSR_EXIT_USAGE;
    }
    return check_targets(path, root, cfg, lo);
}

/* path (adapter_config.json) read and parsed: 0 with *root an object, or TSR_EXIT_DATA after
 * tsr_error. Free *text and doc after, whatever the status. */
static int read_json(const char *path, json_doc *doc, char **text, json_value **root) {
    size_t len;
    json_error err;
    *text = NULL;
    json_doc_init(doc);
    TSR_CHECK(fs_read_all(path, 1u << 20, text, &len));
    if (json_parse(doc, *text, len, root, &err) != 0) {
        tsr_error("%s: not JSON (%s at byte %zu)", path, err.msg, err.pos);
        return TSR_EXIT_DATA;
    }
    if ((*root)->type != JSON_OBJECT) {
        tsr_error("%s: a JSON %s, expected an object", path, json_type_name((*root)->type));
        return TSR_EXIT_DATA;
    }
    return 0;
}

static int check_peft_config(const char *path, const tsr_config *cfg, const tsr_lora *lo,
                             char *base, size_t cap, int *q_rank) {
    char *text;
    json_doc doc;
    json_value *root = NULL;
    int rc = read_json(path, &doc, &text, &root);
    if (!rc) rc = check_peft_fields(path, root, cfg, lo, q_rank);
    const json_value *v = rc ? NULL : json_get(root, "base_model_name_or_path");
    snprintf(base, cap, "%s", v && json_str_plain(v) ? v->str : "");
    json_doc_free(&doc);
    free(text);
    return rc;
}

/* layer md->l's module md->t from f into lo->w: its lora_A (Rm, in) and lora_B (rows, Rm) */
static int read_mod(const st_file *f, const char *path, tsr_lora *lo, const peft_mod *md, int Rm) {
    char nm[2][128];
    const int64_t want[2][2] = {{Rm, md->in}, {md->rows, Rm}};
    float *v[2] = {NULL, NULL};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        peft_name(nm[k], sizeof nm[k], lo, md->l, md->t, md->half, k);
        const st_entry *e = st_find(f, nm[k]);
        if (!e) {
            tsr_error("%s: no tensor %s (this run's model and targets need it)", path, nm[k]);
            rc = TSR_EXIT_DATA;
        } else if (e->ndim != 2 || e->shape[0] != want[k][0] || e->shape[1] != want[k][1]) {
            tsr_error("%s: %s has shape (%lld, %lld), this model needs (%lld, %lld)", path, nm[k],
                      (long long)e->shape[0], (long long)(e->ndim > 1 ? e->shape[1] : 0),
                      (long long)want[k][0], (long long)want[k][1]);
            rc = TSR_EXIT_DATA;
        } else {
            v[k] = tsr_malloc((size_t)(want[k][0] * want[k][1]) * sizeof(float));
            rc = st_read_f32_finite(f, e, v[k]);
        }
    }
    if (!rc && md->half == 1 && memcmp(v[0], part_a(lo, lo->w, md, 0),
                                       (size_t)(Rm * md->in) * sizeof(float)) != 0) {
        tsr_error("%s: %s differs from the lora_A of its other half (%s): tessera's %s adapter "
                  "has one A for both (docs/lora.md \"PEFT and the hybrid\"), so it cannot hold "
                  "these", path, nm[0], half_module[md->t == TSR_LORA_BA][0],
                  module_of[md->t]);
        rc = TSR_EXIT_USAGE;
    }
    if (!rc) rc = mod_import(lo, md, Rm, v[0], v[1], path, nm[1]);
    free(v[0]), free(v[1]);
    return rc;
}

int hf_read_adapter(const char *dir, const tsr_config *cfg, struct tsr_lora *lo, char *base,
                    size_t cap) {
    char path[4300];
    int q_rank = lo->R;
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    TSR_CHECK(check_peft_config(path, cfg, lo, base, cap, &q_rank));
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    st_file f;
    TSR_CHECK(st_open(&f, path));
    int rc = 0, n = 0;
    peft_mod md;
    for (int l = 0; l < lo->L && !rc; l++)
        for (int t = 0; t < TSR_LORA_COUNT && !rc; t++)
            for (int h = halves(lo, t) ? 0 : -1; h < halves(lo, t) && !rc; h++) {
                if (t == TSR_LORA_AGATE || !mod_open(lo, l, t, h, &md)) continue;
                rc = read_mod(&f, path, lo, &md, md.np == 2 ? q_rank : lo->R);
                n += 2;
                mod_close(&md);
            }
    if (!rc && n != f.n) {
        tsr_error("%s: %d tensors, this run's %d layers and targets take %d (other layers or "
                  "modules: a different model?)", path, f.n, lo->L, n);
        rc = TSR_EXIT_DATA;
    }
    st_close(&f);
    return rc;
}

/* ============================ a PEFT directory as a model ============================ */

/* adapter_config.json's r, lora_alpha and target_modules into cfg's lora keys, and its
 * base_model_name_or_path into base. 0 or TSR_EXIT_DATA after tsr_error. */
static int adapter_keys(const char *path, tsr_config *cfg, char *base, size_t cap) {
    char *text;
    json_doc doc;
    json_value *root = NULL;
    int rc = read_json(path, &doc, &text, &root);
    const json_value *r = rc ? NULL : json_get(root, "r"), *a = rc ? NULL : json_get(root, "lora_alpha");
    const json_value *t = rc ? NULL : json_get(root, "target_modules");
    const json_value *b = rc ? NULL : json_get(root, "base_model_name_or_path");
    if (!rc && (!r || r->type != JSON_NUMBER || !a || a->type != JSON_NUMBER || !t ||
                t->type != JSON_ARRAY)) {
        tsr_error("%s: not a PEFT LoRA adapter_config.json (r, lora_alpha and target_modules)", path);
        rc = TSR_EXIT_DATA;
    } else if (!rc) {
        cfg->lora.rank = (int64_t)r->num;
        cfg->lora.alpha = a->num;
        size_t o = 0;
        cfg->lora.targets[0] = '\0';
        for (const json_value *e = t->child; e; e = e->next) {
            const int k = target_named(e);
            if (k >= 0 && o + 16 < sizeof cfg->lora.targets)
                o += (size_t)snprintf(cfg->lora.targets + o, sizeof cfg->lora.targets - o, "%s%s",
                                      o ? "," : "", config_lora_target_name(k));
        }
        snprintf(base, cap, "%s", b && json_str_plain(b) ? b->str : "");
    }
    json_doc_free(&doc);
    free(text);
    return rc;
}

/* A gated attention's q_proj adapter covers the gate's rows too: attn_gate beside q */
static unsigned gate_too(tsr_config *cfg, unsigned mask) {
    const unsigned q = 1u << TSR_LORA_Q, g = 1u << TSR_LORA_AGATE;
    if (!cfg->model.attn_output_gate || !(mask & q) || (mask & g)) return mask;
    const size_t o = strlen(cfg->lora.targets);
    snprintf(cfg->lora.targets + o, sizeof cfg->lora.targets - o, ",attn_gate");
    return mask | g;
}

int hf_peft_model_load(const char *dir, const char *const *sets, int n_sets, int T,
                       tsr_config *cfg, tsr_model *m) {
    char path[4300], named[1024], base[1024] = "";
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    tsr_config *lk = tsr_calloc(1, sizeof *lk);
    int rc = adapter_keys(path, lk, named, sizeof named);
    for (int i = 0; i < n_sets; i++) /* --set lora.base=PATH names the base */
        if (!strncmp(sets[i], "lora.base=", 10)) snprintf(base, sizeof base, "%s", sets[i] + 10);
    if (!base[0]) snprintf(base, sizeof base, "%s", named);
    struct stat st;
    if (!rc && (!base[0] || stat(base, &st) != 0)) {
        tsr_error("%s: the PEFT adapter's base model \"%s\" (base_model_name_or_path) is not a path "
                  "here: give it with --set lora.base=PATH (a checkpoint, run directory or Hugging "
                  "Face directory)", dir, base);
        rc = TSR_EXIT_DATA;
    }
    const char *keep[64]; /* the base loads without the LoRA keys */
    int nk = 0;
    for (int i = 0; i < n_sets && nk < 64; i++)
        if (strncmp(sets[i], "lora.", 5) != 0) keep[nk++] = sets[i];
    if (!rc) rc = ckpt_model_load(&hf_model_importer, base, keep, nk, T, cfg, m, NULL, 0);
    tsr_lora lo;
    unsigned mask = 0;
    char why[400];
    if (!rc) {
        cfg->lora = lk->lora;
        snprintf(cfg->lora.base, sizeof cfg->lora.base, "%s", base);
        if (config_lora_targets(&cfg->model, cfg->lora.targets, &mask, why, sizeof why)) {
            tsr_error("%s: target_modules: %s", path, why);
            rc = TSR_EXIT_DATA;
        }
        mask = gate_too(cfg, mask);
    }
    if (!rc) {
        lora_init(&lo, m, (int)cfg->lora.rank, cfg->lora.alpha, 0, mask);
        m->lora = NULL; /* merged below, not run beside the base */
        rc = hf_read_adapter(dir, cfg, &lo, named, sizeof named);
        if (!rc) lora_merge(&lo, lo.w, m);
        lora_free(&lo);
    }
    if (rc && m->params) model_free(m), memset(m, 0, sizeof *m);
    free(lk);
    return rc;
}

/* test_hf_llama.c — Hugging Face export and import of the Llama family, without a forward pass.
 *
 * Four tiny RoPE + RMSNorm + SwiGLU models, every parameter random (norms and biases too; the
 * padded vocabulary rows zero, as tessera keeps them):
 *   llama    GQA 4:2, tied head, Llama 3 rope_scaling, model.bias = true (attention_bias and
 *            mlp_bias), one model.safetensors;
 *   mistral  MQA 4:1, untied head, head_dim 16 at d_model 48 (q width 64), --arch mistral, shards;
 *   qwen2    GQA, qkv_bias, tied;
 *   qwen3    GQA, qk_norm, head_dim 24 at d_model 64, untied, shards.
 * For each: hf_export in fp32 (TSR_HF_MAX_SHARD-style limit through hf_export_opts.max_shard);
 * the files expected (single file or shards + index, config.json's model_type, no stale layout);
 * hf_import into a model of the same config filled with NaN gives the parameters bit for bit;
 * exporting the imported model again writes byte-identical files; a bf16 export imports as the
 * round-to-nearest-even bf16 of every weight. Refusals, exit status and the words of the message:
 * rope_scaling of type yarn (2), Mistral's sliding_window shorter than the context (2), another
 * num_key_value_heads (1), another rms_norm_eps (1), a missing rope_scaling in a llama3 run (1),
 * Qwen 3's attention_bias true into a run without model.attn_bias (1, the --set that fits),
 * Mistral's attention_bias true (2: its attention has no biases), an index naming a shard that
 * lacks the tensor (2); an unknown --arch and a
 * TSR_HF_MAX_SHARD that is not a byte count (1), a QK-norm model exported as Llama (1, nothing written).
 * Mixtures of experts: mixtral (4 experts, top 2, expert width 40, one file) and qwen3_moe (QK-norm,
 * decoder_sparse_step 2: layer 0 dense, layer 1 MoE; norm_topk_prob false; shards) go through the
 * same five checks, and each expert's HF tensors are read back from the export and compared with
 * the slices of routerw / expw1 ([gate | up] rows) / expw2 computed here from the layout (the
 * dense layer has no expert tensors, the MoE layer no gate_proj); router_aux_loss_coef =
 * model.moe_aux_loss_coef x MoE layers / top_k. Refused: another num_local_experts (1), mlp_only_layers not empty (2),
 * another decoder_sparse_step (1), Mixtral's sliding_window 16 (2); a MoE model with --arch llama
 * and a dense one with --arch mixtral (1). Tensor-level refusals of the MoE names (a missing
 * expert, a router of another expert count) are tests/reference/test_hf_moe.py's.
 * The model side (params layout) is src/model/model.c; the logits of imported models are checked by
 * tests/reference/test_hf_llama.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include "config/config_table.h"
#include "hf/hf.h"
#include "model/model.h"
#include "ops.h"
#include "tap.h"
#include "testfs.h"
#include "xorshift.h"

enum { N_VARIANTS = 6, CHECKS_PER_VARIANT = 5, N_MOE = 2, N_REFUSALS = 12, N_OPTS = 5, SEQ = 32 };

static uint64_t rng = 0x243f6a8885a308d3ull; /* xorshift64* */
static float urand(void) {
    return (float)((double)(xorshift64s(&rng) >> 11) / 9007199254740992.0 - 0.5);
}

typedef struct variant {
    const char *name, *arch;   /* arch: hf_export_opts.arch (NULL: from the model) */
    const char *model_type;    /* what config.json must say */
    int C, NH, KVH, hs, F, tied, bias, qkv_bias, qk_norm, llama3;
    uint64_t shard;            /* bytes; 0: default (one file) */
    int E, K, FE, every, norm_topk; /* MoE: experts (0: dense), top k, expert width, moe_every */
} variant;

static const variant variants[N_VARIANTS] = {
    {"llama", NULL, "llama", 64, 4, 2, 0, 96, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0},
    {"mistral", "mistral", "mistral", 48, 4, 1, 16, 80, 0, 0, 0, 0, 0, 30000, 0, 0, 0, 1, 0},
    {"qwen2", NULL, "qwen2", 64, 4, 2, 0, 96, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0},
    {"qwen3", NULL, "qwen3", 64, 4, 2, 24, 96, 0, 0, 0, 1, 0, 50000, 0, 0, 0, 1, 0},
    {"mixtral", NULL, "mixtral", 32, 4, 2, 0, 48, 0, 0, 0, 0, 0, 0, 4, 2, 40, 1, 1},
    {"qwen3_moe", NULL, "qwen3_moe", 32, 4, 2, 16, 48, 0, 0, 0, 1, 0, 30000, 4, 2, 24, 2, 0},
};

static tsr_model_config config_of(const variant *v) {
    tsr_config d;
    cfgtab_defaults(&d);
    tsr_model_config c = d.model;
    c.n_layer = 2, c.d_model = v->C, c.n_head = v->NH, c.n_kv_head = v->KVH, c.head_dim = v->hs;
    c.intermediate_size = v->F, c.vocab_size = 100, c.vocab_multiple = 64;
    c.pos = TSR_POS_ROPE, c.norm = TSR_NORM_RMSNORM, c.mlp = TSR_MLP_SWIGLU;
    c.norm_eps = 1e-6, c.rope_theta = 500000, c.tie_embeddings = v->tied, c.bias = v->bias;
    c.qkv_bias = v->qkv_bias, c.qk_norm = v->qk_norm;
    if (v->E)
        c.moe_experts = v->E, c.moe_top_k = v->K, c.moe_intermediate_size = v->FE,
        c.moe_every = v->every, c.moe_norm_topk = v->norm_topk;
    if (v->llama3)
        c.rope_scaling = TSR_ROPE_SCALING_LLAMA3, c.rope_factor = 32, c.rope_low_freq_factor = 1,
        c.rope_high_freq_factor = 4, c.rope_original_max_pos = 8192;
    return c;
}

static void build(tsr_model *m, const variant *v, int fill_nan) {
    tsr_model_config c = config_of(v);
    model_init(m, &c, SEQ, &tsr_cpu_ops);
    model_alloc_params(m);
    for (size_t i = 0; i < m->n_params; i++) m->params[i] = fill_nan ? NAN : urand();
    if (fill_nan) return;
    static const tsr_param_id vocab_rows[] = {TSR_P_WTE, TSR_P_LMHEAD};
    for (size_t k = 0; k < sizeof vocab_rows / sizeof vocab_rows[0]; k++) {
        const tsr_param_info *w = &m->params_info[vocab_rows[k]];
        if (w->numel) memset(m->params + w->offset + (size_t)m->V * m->C, 0,
                             (w->numel - (size_t)m->V * m->C) * sizeof(float));
    }
}

static int do_export(const tsr_model *m, const variant *v, const char *dir, st_dtype dt) {
    tsr_config cfg;
    cfgtab_defaults(&cfg);
    cfg.data.tokenizer[0] = 0;
    hf_export_opts o = {.dtype = dt, .tokenizer = "none", .arch = v->arch, .max_shard = v->shard};
    fflush(stdout);
    return hf_export(m, &cfg, dir, &o);
}

static int do_import(tsr_model *m, const char *dir) { return hf_model_read(dir, m); }

/* The files of dir a equal those of dir b, byte for byte (the names in list). */
static int same_files(const char *a, const char *b, const char *const *list, int n) {
    for (int k = 0; k < n; k++) {
        char pa[512], pb[512];
        size_t na, nb;
        pjoin(pa, a, list[k]);
        pjoin(pb, b, list[k]);
        char *x = slurp(pa, &na), *y = slurp(pb, &nb);
        int same = x && y && na == nb && memcmp(x, y, na) == 0;
        free(x), free(y);
        if (!same) {
            tap_diag("%s differs from %s", pa, pb);
            return 0;
        }
    }
    return 1;
}

static void run_variant(const variant *v, const char *tmp) {
    char d1[512], d2[512], d3[512], p[512];
    snprintf(d1, sizeof d1, "%s/%s_fp32", tmp, v->name);
    snprintf(d2, sizeof d2, "%s/%s_again", tmp, v->name);
    snprintf(d3, sizeof d3, "%s/%s_bf16", tmp, v->name);
    tsr_model a, b, c;
    build(&a, v, 0);
    int rc = do_export(&a, v, d1, ST_F32);
    pjoin(p, d1, "config.json");
    char *cj = slurp(p, NULL), want[64];
    snprintf(want, sizeof want, "\"model_type\": \"%s\"", v->model_type);
    int nshards = 0;
    for (int k = 1; k < 100; k++) {
        char f[64];
        snprintf(f, sizeof f, "model-%05d-of-%05d.safetensors", k, k);
        pjoin(p, d1, f);
        if (exists(p)) nshards = k;
    }
    char idx[512], single[512];
    pjoin(idx, d1, "model.safetensors.index.json");
    pjoin(single, d1, "model.safetensors");
    int layout = v->shard ? nshards > 1 && exists(idx) && !exists(single)
                          : exists(single) && !exists(idx) && nshards == 0;
    tap_ok(rc == 0 && cj && strstr(cj, want) && layout, "%s: export fp32: rc %d, %s, %s", v->name,
           rc, want, v->shard ? "shards + index" : "one model.safetensors");
    if (v->shard) tap_diag("%s: %d shards", v->name, nshards);
    free(cj);

    build(&b, v, 1);
    rc = do_import(&b, d1);
    tap_ok(rc == 0 && memcmp(a.params, b.params, a.n_params * sizeof(float)) == 0,
           "%s: import of the fp32 export: rc %d, all %zu parameters bit for bit", v->name, rc,
           a.n_params);

    rc = do_export(&b, v, d2, ST_F32);
    const char *files[8] = {"config.json", "generation_config.json"};
    int nf = 2;
    char names[4][64];
    if (!v->shard) files[nf++] = "model.safetensors";
    else files[nf++] = "model.safetensors.index.json";
    for (int k = 1; k <= nshards && k <= 4; k++) {
        snprintf(names[k - 1], sizeof names[k - 1], "model-%05d-of-%05d.safetensors", k, nshards);
        files[nf++] = names[k - 1];
    }
    tap_ok(rc == 0 && same_files(d1, d2, files, nf), "%s: exporting the imported model again "
           "writes the same bytes (%d files compared)", v->name, nf);

    rc = do_export(&a, v, d3, ST_BF16);
    build(&c, v, 1);
    int rc2 = rc ? rc : do_import(&c, d3);
    size_t bad = 0;
    for (size_t i = 0; i < a.n_params; i++)
        if (memcmp(&c.params[i], &(float){st_bf16_to_f32(st_f32_to_bf16(a.params[i]))}, 4) != 0) bad++;
    tap_ok(rc == 0 && rc2 == 0 && bad == 0, "%s: bf16 export then import: rc %d/%d, %zu of %zu "
           "parameters differ from their bf16 rounding", v->name, rc, rc2, bad, a.n_params);

    /* one more layout: the other one, into the same directory (the stale files go) */
    variant w = *v;
    w.shard = v->shard ? 0 : 20000;
    rc = do_export(&a, &w, d1, ST_F32);
    build(&c, v, 1);
    rc2 = rc ? rc : do_import(&c, d1);
    int stale = w.shard ? exists(single) : exists(idx);
    tap_ok(rc == 0 && rc2 == 0 && !stale && memcmp(a.params, c.params, a.n_params * 4) == 0,
           "%s: re-export as %s into the same directory: the stale %s is removed, import exact",
           v->name, w.shard ? "shards" : "one file", w.shard ? "model.safetensors" : "index");
    model_free(&a), model_free(&b), model_free(&c);
}

/* The n of dir's model-0000k-of-0000n.safetensors (0: none). */
static int count_shards(const char *dir) {
    for (int n = 1; n < 100; n++) {
        char f[64], p[512];
        snprintf(f, sizeof f, "model-00001-of-%05d.safetensors", n);
        pjoin(p, dir, f);
        if (exists(p)) return n;
    }
    return 0;
}

/* The HF tensor `name` of the export in dir (one file or shards): 1 when it equals the rows
 * [r0, r0 + nr) (cols wide) at flat offset off of m's parameters, 0 when it is there but is not
 * that, -1 when it is absent. */
static int tensor_is(const char *dir, const char *name, const tsr_model *m, size_t off, int64_t nr,
                     int64_t cols) {
    char p[512];
    int found = 0, same = 0;
    for (int k = 0; k <= 99 && !found; k++) {
        char f[64];
        if (k) snprintf(f, sizeof f, "model-%05d-of-%05d.safetensors", k, count_shards(dir));
        else snprintf(f, sizeof f, "model.safetensors");
        pjoin(p, dir, f);
        if (!exists(p) || (k && k > count_shards(dir))) continue;
        st_file sf;
        if (st_open(&sf, p)) continue;
        const st_entry *e = st_find(&sf, name);
        if (e && e->ndim == 2 && e->shape[0] == nr && e->shape[1] == cols) {
            float *x = malloc((size_t)(nr * cols) * sizeof *x);
            found = 1;
            same = !st_read_f32(&sf, e, x) && !memcmp(x, m->params + off, (size_t)(nr * cols) * 4);
            free(x);
        } else if (e) {
            found = 1;
        }
        st_close(&sf);
    }
    return found ? same : -1;
}

/* MoE variants: every expert's tensors hold the slices of the layout (computed here, not by
 * hf_map.c), in the layers that are MoE; the dense layers hold gate_proj instead. */
static void moe_names(const variant *v, const char *tmp) {
    char d[512], name[128], p[512];
    snprintf(d, sizeof d, "%s/%s_fp32", tmp, v->name);
    tsr_model m;
    build(&m, v, 0);
    int mix = !strcmp(v->model_type, "mixtral"), bad = 0, checked = 0, slot = 0;
    int rc = do_export(&m, v, d, ST_F32);
    const int64_t C = m.C, FE = v->FE, E = v->E;
    for (int l = 0; l < m.L && !rc; l++) {
        int moe = (l + 1) % v->every == 0;
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate_proj.weight", l);
        bad += moe && tensor_is(d, name, &m, m.params_info[TSR_P_FCW].offset, m.F, C) != -1;
        snprintf(name, sizeof name, "model.layers.%d.%s.gate.weight", l, mix ? "block_sparse_moe" : "mlp");
        size_t ro = m.params_info[TSR_P_ROUTERW].offset + (size_t)(slot * E * C);
        if (!moe) {
            bad += tensor_is(d, name, &m, ro, E, C) != -1; /* a dense layer has no router */
            continue;
        }
        bad += tensor_is(d, name, &m, ro, E, C) != 1, checked++;
        for (int e = 0; e < E; e++) {
            size_t w1 = m.params_info[TSR_P_EXPW1].offset + (size_t)((slot * E + e) * 2 * FE * C);
            size_t w2 = m.params_info[TSR_P_EXPW2].offset + (size_t)((slot * E + e) * C * FE);
            const char *pre = mix ? "block_sparse_moe.experts" : "mlp.experts";
            const char *sfx[3] = {mix ? "w1" : "gate_proj", mix ? "w3" : "up_proj", mix ? "w2" : "down_proj"};
            size_t off[3] = {w1, w1 + (size_t)(FE * C), w2};
            for (int j = 0; j < 3; j++) {
                snprintf(name, sizeof name, "model.layers.%d.%s.%d.%s.weight", l, pre, e, sfx[j]);
                bad += tensor_is(d, name, &m, off[j], j < 2 ? FE : C, j < 2 ? C : FE) != 1;
                checked++;
            }
        }
        slot++;
    }
    tap_ok(rc == 0 && bad == 0 && checked == (1 + 3 * E) * (m.L / v->every),
           "%s: %d router and expert tensors = the slices of routerw / expw1 [gate | up] / expw2; "
           "%d misplaced", v->name, checked, bad);
    pjoin(p, d, "config.json");
    char *cj = slurp(p, NULL), want[4][96];
    snprintf(want[0], sizeof want[0], "\"%s\": %d", mix ? "num_local_experts" : "num_experts", v->E);
    snprintf(want[1], sizeof want[1], "\"num_experts_per_tok\": %d", v->K);
    snprintf(want[2], sizeof want[2], "\"%s\": %d", mix ? "intermediate_size" : "moe_intermediate_size", v->FE);
    snprintf(want[3], sizeof want[3], "\"router_aux_loss_coef\": "); /* 0.01 (default) x LM / K */
    int all = cj != NULL;
    for (int k = 0; k < 4 && all; k++) all = strstr(cj, want[k]) != NULL;
    if (all) all = fabs(strtod(strstr(cj, want[3]) + strlen(want[3]), NULL) - 0.01 * m.LM / v->K) < 1e-12;
    if (!mix && all) all = strstr(cj, "\"decoder_sparse_step\": 2") && strstr(cj, "\"norm_topk_prob\": false");
    tap_ok(all, "%s: config.json has %s, %s, %s, %s%s", v->name, want[0], want[1], want[2], want[3],
           mix ? "" : ", decoder_sparse_step 2, norm_topk_prob false");
    free(cj);
    model_free(&m);
}

/* Copies the files of dir src to dst, replacing `from` by `to` in file `name` (config.json or the
 * index). */
static void edit_copy(const char *src, const char *dst, const char *name, const char *from,
                      const char *to) {
    rm_rf(dst);
    mkdir(dst, 0755);
    DIR *dir = opendir(src);
    struct dirent *de;
    int edited = 0;
    while (dir && (de = readdir(dir))) {
        char a[512], b[512];
        size_t n;
        if (de->d_name[0] == '.') continue;
        pjoin(a, src, de->d_name);
        pjoin(b, dst, de->d_name);
        char *t = slurp(a, &n);
        FILE *f = fopen(b, "wb");
        char *at = !strcmp(de->d_name, name) ? strstr(t, from) : NULL;
        if (at) {
            fwrite(t, 1, (size_t)(at - t), f);
            fputs(to, f);
            fputs(at + strlen(from), f);
            edited = 1;
        } else {
            fwrite(t, 1, n, f);
        }
        fclose(f);
        free(t);
    }
    if (dir) closedir(dir);
    if (!edited) tap_diag("edit_copy: \"%s\" is not in %s/%s", from, src, name);
}

static void refusal(const char *tmp, const variant *v, const char *what, const char *name,
                    const char *from, const char *to, int want_rc, const char *needle) {
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s_fp32", tmp, v->name);
    snprintf(dst, sizeof dst, "%s/bad", tmp);
    edit_copy(src, dst, name, from, to);
    tsr_model m;
    build(&m, v, 1);
    cap_set_dir(tmp);
    cap_begin();
    int rc = do_import(&m, dst);
    const char *err = cap_end();
    tap_ok(rc == want_rc && strstr(err, needle), "%s: refused with exit %d (want %d), naming "
           "\"%s\": %.300s", what, rc, want_rc, needle, err);
    model_free(&m);
}

/* hf_export_check_opts: an unknown --arch and a bad TSR_HF_MAX_SHARD are usage errors; a class
 * that cannot hold the model is refused by hf_export with what it needs. */
static void opt_checks(const char *tmp) {
    hf_export_opts o = {.dtype = ST_F32, .arch = "gemma"};
    cap_set_dir(tmp);
    cap_begin();
    int rc = hf_export_check_opts(&o);
    const char *err = cap_end();
    tap_ok(rc == 1 && strstr(err, "--arch gemma"), "--arch gemma: exit %d, %.200s", rc, err);
    o.arch = NULL;
    setenv("TSR_HF_MAX_SHARD", "5GB", 1);
    cap_begin();
    rc = hf_export_check_opts(&o);
    err = cap_end();
    unsetenv("TSR_HF_MAX_SHARD");
    tap_ok(rc == 1 && strstr(err, "TSR_HF_MAX_SHARD = \"5GB\""), "TSR_HF_MAX_SHARD=5GB: exit %d, "
           "%.200s", rc, err);
    tsr_model m;
    build(&m, &variants[3], 0); /* Qwen 3 (QK-norm) as Llama */
    variant v = variants[3];
    v.arch = "llama";
    char d[512];
    snprintf(d, sizeof d, "%s/qk_as_llama", tmp);
    cap_begin();
    rc = do_export(&m, &v, d, ST_F32);
    err = cap_end();
    tap_ok(rc == 1 && strstr(err, "LlamaForCausalLM") && strstr(err, "qk_norm = false") && !exists(d),
           "a QK-norm model with --arch llama: exit %d, nothing written, %.200s", rc, err);
    model_free(&m);
    /* a MoE model as Llama, a dense one as Mixtral */
    const struct { int src; const char *arch, *needle; } cls[2] = {
        {4, "llama", "model.moe_experts = 0"}, {1, "mixtral", "model.moe_experts > 0"}};
    for (int k = 0; k < 2; k++) {
        build(&m, &variants[cls[k].src], 0);
        v = variants[cls[k].src];
        v.arch = cls[k].arch;
        snprintf(d, sizeof d, "%s/wrong_class%d", tmp, k);
        cap_begin();
        rc = do_export(&m, &v, d, ST_F32);
        err = cap_end();
        tap_ok(rc == 1 && strstr(err, cls[k].needle) && !exists(d), "a %s model with --arch %s: "
               "exit %d, nothing written, %.200s", k ? "dense" : "MoE", cls[k].arch, rc, err);
        model_free(&m);
    }
}

int main(void) {
    tap_plan(N_VARIANTS * CHECKS_PER_VARIANT + N_MOE * 2 + N_REFUSALS + N_OPTS);
    char tmp[] = "/tmp/tsr-hf-llama-XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    for (int k = 0; k < N_VARIANTS; k++) run_variant(&variants[k], tmp);
    /* the llama and mistral directories were last written as shards, qwen3's as one file */
    const variant *ll = &variants[0], *mi = &variants[1], *q3 = &variants[3];
    refusal(tmp, ll, "rope_scaling yarn", "config.json", "\"rope_type\": \"llama3\"",
            "\"rope_type\": \"yarn\"", 2, "rope_scaling.rope_type = \"yarn\"");
    refusal(tmp, ll, "no rope_scaling for a llama3 run", "config.json", "\"rope_scaling\": {",
            "\"rope_scaling\": null, \"x\": {", 1, "model.rope_scaling=none");
    refusal(tmp, ll, "another num_key_value_heads", "config.json", "\"num_key_value_heads\": 2",
            "\"num_key_value_heads\": 4", 1, "num_key_value_heads = 4, but this run has model.n_kv_head = 2");
    refusal(tmp, mi, "a Mistral sliding_window of 16 < 32", "config.json", "\"sliding_window\": null",
            "\"sliding_window\": 16", 2, "sliding_window = 16");
    refusal(tmp, q3, "another rms_norm_eps", "config.json", "\"rms_norm_eps\": 1e-06",
            "\"rms_norm_eps\": 1e-05", 1, "rms_norm_eps = 1e-05, but this run has model.norm_eps = 1e-06");
    refusal(tmp, q3, "Qwen 3 attention_bias into a run without model.attn_bias", "config.json",
            "\"attention_bias\": false", "\"attention_bias\": true", 1, "--set model.attn_bias=true");
    refusal(tmp, mi, "Mistral attention_bias", "config.json", "\"sliding_window\": null",
            "\"sliding_window\": null, \"attention_bias\": true", 2, "has no attention_bias");
    /* model.norm.weight is in the last shard (state-dict order), not the first */
    char lldir[512], from[128], to[128];
    snprintf(lldir, sizeof lldir, "%s/llama_fp32", tmp);
    int ns = count_shards(lldir);
    snprintf(from, sizeof from, "\"model.norm.weight\": \"model-%05d-of-%05d", ns, ns);
    snprintf(to, sizeof to, "\"model.norm.weight\": \"model-%05d-of-%05d", 1, ns);
    refusal(tmp, ll, "an index naming the wrong shard", "model.safetensors.index.json", from, to,
            2, "which has no such tensor");
    const variant *mx = &variants[4], *qm = &variants[5];
    for (int k = 4; k < 6; k++) moe_names(&variants[k], tmp); /* mixtral one file, qwen3_moe shards */
    refusal(tmp, mx, "another num_local_experts", "config.json", "\"num_local_experts\": 4",
            "\"num_local_experts\": 8", 1, "num_local_experts = 8, but this run has model.moe_experts = 4");
    refusal(tmp, qm, "mlp_only_layers [1]", "config.json", "\"mlp_only_layers\": []",
            "\"mlp_only_layers\": [1]", 2, "mlp_only_layers is not empty");
    refusal(tmp, qm, "another decoder_sparse_step", "config.json", "\"decoder_sparse_step\": 2",
            "\"decoder_sparse_step\": 1", 1, "decoder_sparse_step = 1, but this run has model.moe_every = 2");
    refusal(tmp, mx, "a Mixtral sliding_window of 16 < 32", "config.json", "\"sliding_window\": null",
            "\"sliding_window\": 16", 2, "sliding_window = 16");
    opt_checks(tmp);
    rm_rf(tmp);
    return tap_done();
}

/* hf_import.c — a transformers directory -> the parameters of the run's model (hf.h, docs/hf.md).
 *
 * Accepted: model.safetensors, or the shards that model.safetensors.index.json names (F32, BF16 or
 * F16 tensors; names with or without the "transformer." / "model." prefix, as the *LMHeadModel /
 * *ForCausalLM classes and their base models save them) + config.json, for the model the run's
 * config describes; gpt-oss's experts also as MXFP4 _blocks + _scales (U8: hf_gptoss.h).
 * Ignored: GPT-2's attention-mask buffers (h.N.attn.bias of 4 dimensions, h.N.attn.masked_bias)
 * and the Llama family's rotary_emb.inv_freq, buffers older checkpoints carry. With a tied head,
 * lm_head.weight, when present, must equal wte. Any other tensor is refused by name, as is a
 * missing one or one of the wrong shape. Into a GPT-2-style run without biases, a GPT-2
 * checkpoint imports only if all its biases are 0 (e.g. one exported from such a run).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "json.h"
#include "hf/hf.h"
#include "hf/hf_family.h"
#include "hf/hf_gptoss.h"
#include "hf/fp8block.h"

struct hf_import {
    char dir[1024];          /* the Hugging Face directory */
    char st_path[1100];      /* model.safetensors, or the index naming the shards */
    st_file *f;              /* nf files: model.safetensors, or the shards in index order */
    int nf;
    hf_config hc;
    hf_tensor *tab;          /* n rows: the run's model in HF names */
    int n;
    const st_entry **src;    /* the file's entry of each row (an MXFP4 row's NAME_blocks) */
    int *src_file;           /* and the file that holds it */
    const st_entry **scl;    /* an MXFP4 row's NAME_scales, an FP8 one's NAME_scale_inv; its file */
    int *scl_file;
    int bare;                /* names lack the "transformer." / "model." prefix */
    long not_read[2];        /* tensors of mtp.* and model.visual.* skipped (hf_skipped) */
    float *buf;              /* one HF tensor, as float32 */
    size_t buf_cap;
};

int hf_is_dir(const char *path) {
    struct stat st;
    char p[4200];
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(p, sizeof p, "%s/model.safetensors", path);
    if (stat(p, &st) == 0) return 1;
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", path);
    if (stat(p, &st) == 0) return 1;
    snprintf(p, sizeof p, "%s/config.json", path);
    return stat(p, &st) == 0;
}

static float *buffer(hf_import *h, size_t numel) {
    if (numel > h->buf_cap) {
        free(h->buf);
        h->buf = tsr_malloc(numel * sizeof(float));
        h->buf_cap = numel;
    }
    return h->buf;
}

/* The entry called name in any of the files (its file in *fi), or NULL. */
static const st_entry *find_any(const hf_import *h, const char *name, int *fi) {
    for (int i = 0; i < h->nf; i++) {
        const st_entry *e = st_find(&h->f[i], name);
        if (e) {
            *fi = i;
            return e;
        }
    }
    return NULL;
}

/* The files' entry for a full HF name ("transformer.x"), honouring a prefix-less file. */
static const st_entry *lookup(const hf_import *h, const char *full, int *fi) {
    const char *pre = h->hc.fam->prefix;
    if (h->bare && !strncmp(full, pre, strlen(pre))) full += strlen(pre);
    return find_any(h, full, fi);
}

static void shape_str(char *s, size_t cap, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(s, cap, "[");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(s + o, cap - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < cap) snprintf(s + o, cap - o, "]");
}

/* What the hybrid classes hold beside the text model tessera is: 1 for mtp.* (the
 * multi-token-prediction head, which transformers also skips on load), 2 for model.visual.* (Qwen
 * 3.5's vision tower: tessera is text only); 0 for the rest. */
static int hf_skipped(const hf_family *f, const char *name) {
    if (!f->hybrid) return 0;
    return !strncmp(name, "mtp.", 4) ? 1 : !strncmp(name, "model.visual.", 13) ? 2 : 0;
}

/* An MXFP4 row (hf_gptoss.h): NAME_blocks and NAME_scales, each found, U8, of the row's shape. */
static int match_mxfp4(hf_import *h, int k, unsigned char **used) {
    const hf_tensor *t = &h->tab[k];
    char bn[128], sn[128];
    int fb = 0, fs = 0;
    snprintf(bn, sizeof bn, "%s_blocks", t->name);
    snprintf(sn, sizeof sn, "%s_scales", t->name);
    const st_entry *b = lookup(h, bn, &fb), *s = b ? lookup(h, sn, &fs) : NULL;
    if (!s) {
        tsr_error("%s: no tensor \"%s\" (config.json's quantization_config is MXFP4: the %s model "
                  "holds %s as _blocks and _scales)", h->st_path, b ? sn : bn,
                  h->hc.fam->model_type, t->name);
        return TSR_EXIT_DATA;
    }
    used[fb][b - h->f[fb].t] = used[fs][s - h->f[fs].t] = 1;
    h->src[k] = b, h->src_file[k] = fb, h->scl[k] = s, h->scl_file[k] = fs;
    return hf_gptoss_mxfp4_check(&h->f[fb], b, s, t);
}

/* An FP8 weight e of row k (fp8block.h): NAME_scale_inv found, F32, one scale per block. */
static int match_fp8(hf_import *h, int k, int fi, const st_entry *e, unsigned char **used) {
    const hf_tensor *t = &h->tab[k];
    char sn[128], why[256];
    int fs = 0;
    snprintf(sn, sizeof sn, "%s_scale_inv", e->name);
    const st_entry *s = find_any(h, sn, &fs);
    if (!s) {
        tsr_error("%s: tensor \"%s\" is F8_E4M3 but there is no \"%s\" (its block scales)",
                  h->f[fi].path, e->name, sn);
        return TSR_EXIT_DATA;
    }
    used[fs][s - h->f[fs].t] = 1;
    h->scl[k] = s, h->scl_file[k] = fs;
    if (s->dtype == ST_F32 && !fp8_block_shape(t->shape[0], t->shape[1], h->hc.fp8_block[0],
                                               h->hc.fp8_block[1], s->shape, s->ndim, why,
                                               sizeof why))
        return 0;
    if (s->dtype != ST_F32) snprintf(why, sizeof why, "FP8 block scales are F32");
    tsr_error("%s: tensor \"%s\" is %s with %d dimensions [%lld, ...]: %s", h->f[fs].path, s->name,
              st_dtype_name(s->dtype), s->ndim, s->ndim ? (long long)s->shape[0] : 0LL, why);
    return TSR_EXIT_DATA;
}

/* A row's dtype: a float, or with FP8 weights (hc.fp8) a 2-D weight in E4M3 with its scales. */
static int match_dtype(hf_import *h, int k, int fi, const st_entry *e, unsigned char **used) {
    if (e->dtype == ST_F32 || e->dtype == ST_BF16 || e->dtype == ST_F16) return 0;
    if (e->dtype == ST_F8_E4M3 && h->hc.fp8 && h->tab[k].ndim == 2)
        return match_fp8(h, k, fi, e, used);
    return -1;
}

/* Every row's tensor is there with its shape and a float dtype; nothing unknown is there. */
static int match_tensors(hf_import *h, const tsr_model *m) {
    char want[64], got[64];
    unsigned char **used = tsr_calloc((size_t)h->nf, sizeof *used);
    for (int i = 0; i < h->nf; i++) used[i] = tsr_calloc((size_t)h->f[i].n + 1, 1);
    int rc = 0, fi = 0;
    h->src = tsr_calloc((size_t)h->n, sizeof *h->src);
    h->src_file = tsr_calloc((size_t)h->n, sizeof *h->src_file);
    h->scl = tsr_calloc((size_t)h->n, sizeof *h->scl);
    h->scl_file = tsr_calloc((size_t)h->n, sizeof *h->scl_file);
    for (int k = 0; k < h->n && !rc; k++) {
        const hf_tensor *t = &h->tab[k];
        if (t->mxfp4) {
            rc = match_mxfp4(h, k, used);
            continue;
        }
        const st_entry *e = lookup(h, t->name, &fi);
        shape_str(want, sizeof want, t->ndim, t->shape);
        if (!e) {
            tsr_error("%s: no tensor \"%s\" %s (the %s model of config.json and of this run has one)",
                      h->st_path, t->name, want, h->hc.fam->model_type);
            rc = TSR_EXIT_DATA;
            break;
        }
        shape_str(got, sizeof got, e->ndim, e->shape);
        int same = e->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = e->shape[d] == t->shape[d];
        used[fi][e - h->f[fi].t] = 1;
        h->src[k] = e;
        h->src_file[k] = fi;
        int typed = same ? match_dtype(h, k, fi, e, used) : -1;
        if (typed < 0) {
            tsr_error("%s: tensor \"%s\" is %s %s, the model of config.json needs %s in F32, BF16 "
                      "or F16%s", h->f[fi].path, e->name, st_dtype_name(e->dtype), got, want,
                      h->hc.fp8 ? " (or a 2-D weight in F8_E4M3 with its _scale_inv)" : "");
            rc = TSR_EXIT_DATA;
        } else {
            rc = typed;
        }
    }
    for (int j = 0; j < h->nf && !rc; j++)
        for (int i = 0; i < h->f[j].n && !rc; i++) {
            const st_entry *e = &h->f[j].t[i];
            const int skip = hf_skipped(h->hc.fam, e->name);
            if (skip) h->not_read[skip - 1]++;
            if (used[j][i] || skip || h->hc.fam->names->buffer(h->hc.fam, e->name)) continue;
            if (!strcmp(e->name, "lm_head.weight") && e->ndim == 2 && e->shape[0] == m->V &&
                e->shape[1] == m->C)
                continue; /* the run ties its head: checked against wte below */
            shape_str(got, sizeof got, e->ndim, e->shape);
            tsr_error("%s: unexpected tensor \"%s\" %s: it is no part of the %s model of "
                      "config.json as tessera builds it (docs/hf.md lists the names)", h->f[j].path,
                      e->name, got, h->hc.fam->model_type);
            rc = TSR_EXIT_DATA;
        }
    for (int i = 0; i < h->nf; i++) free(used[i]);
    free(used);
    return rc;
}

/* Tensors the run's model lacks must be zero (biases of a bias-free run); a tied lm_head must be
 * wte. */
static int check_untaken(hf_import *h, const tsr_model *m) {
    for (int k = 0; k < h->n; k++) {
        const st_entry *e = h->src[k];
        if (h->tab[k].present) continue;
        float *x = buffer(h, e->numel);
        TSR_CHECK(st_read_f32(&h->f[h->src_file[k]], e, x));
        for (uint64_t i = 0; i < e->numel; i++)
            if (x[i] != 0.0f) {
                tsr_error("%s: tensor \"%s\" holds nonzero values (element %llu is %g), but this run "
                          "has model.bias = false: set --set model.bias=true to keep the biases",
                          h->st_path, e->name, (unsigned long long)i, (double)x[i]);
                return TSR_EXIT_USAGE;
            }
    }
    int fh = 0;
    const st_entry *head = find_any(h, "lm_head.weight", &fh);
    if (!head && !h->hc.tied && !h->hc.fam->names->head_row) {
        tsr_error("%s: config.json says tie_word_embeddings = false but there is no lm_head.weight",
                  h->st_path);
        return TSR_EXIT_DATA;
    }
    if (!head || m->params_info[TSR_P_LMHEAD].numel) return 0; /* untied: a row of the table */
    const st_entry *wte = h->src[0]; /* row 0 is wte */
    float *a = tsr_malloc((size_t)wte->numel * sizeof *a), *b = buffer(h, head->numel);
    int rc = st_read_f32(&h->f[h->src_file[0]], wte, a);
    if (!rc) rc = st_read_f32(&h->f[fh], head, b);
    if (!rc && memcmp(a, b, (size_t)wte->numel * sizeof *a) != 0) {
        tsr_error("%s: lm_head.weight differs from %s: this run ties the output head to the token "
                  "embedding (model.tie_embeddings = true), so an untied head cannot be imported%s",
                  h->st_path, wte->name, h->hc.fam->names->head_row ? "" : " (GPT-2 and MPT are tied)");
        rc = TSR_EXIT_DATA;
    }
    free(a);
    return rc;
}

/* A shard's name from the index: a plain file name in the directory. */
static int shard_name_ok(const char *s) {
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* The shards an index names, each opened once: a hash table of their names to their file, so
 * that a weight_map of a million entries is checked in linear time (it was a scan per entry). */
typedef struct shard_set {
    const char **name; /* (cap) slot -> shard name, NULL: empty */
    int *file;         /* (cap) its index in h->f */
    size_t cap;
} shard_set;

static size_t name_hash(const char *s) {
    size_t x = 1469598103934665603ull;
    for (; *s; s++) x = (x ^ (unsigned char)*s) * 1099511628211ull;
    return x ^ (x >> 29);
}

/* The file of shard `name`, opened on its first mention (-1 after st_open's error). */
static int shard_file(hf_import *h, shard_set *set, const char *dir, const char *name) {
    size_t k = name_hash(name) & (set->cap - 1);
    while (set->name[k] && strcmp(set->name[k], name) != 0) k = (k + 1) & (set->cap - 1);
    if (set->name[k]) return set->file[k];
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (st_open(&h->f[h->nf], path)) return -1;
    set->name[k] = name;
    set->file[k] = h->nf;
    return h->nf++;
}

/* One weight_map entry: a plain tensor name, a file name of the directory that holds it. */
static int map_entry(hf_import *h, shard_set *set, const char *dir, const json_value *v) {
    if (!json_key_plain(v)) {
        tsr_error("%s: weight_map: the tensor name \"%.200s\\u0000...\" holds a NUL character "
                  "(\\u0000)", h->st_path, v->key);
        return TSR_EXIT_DATA;
    }
    if (!json_str_plain(v) || !shard_name_ok(v->str)) {
        tsr_error("%s: weight_map[\"%s\"] is not a file name of this directory", h->st_path, v->key);
        return TSR_EXIT_DATA;
    }
    int i = shard_file(h, set, dir, v->str);
    if (i < 0) return TSR_EXIT_DATA;
    if (!st_find(&h->f[i], v->key)) {
        tsr_error("%s: weight_map puts \"%s\" in %s, which has no such tensor", h->st_path,
                  v->key, v->str);
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* model.safetensors.index.json: opens each shard its weight_map names (once, in order of first
 * mention) and checks that the shard holds each tensor the map assigns to it. */
static int open_shards(hf_import *h, const char *dir) {
    char *text;
    size_t len;
    TSR_CHECK(fs_read_all(h->st_path, ST_MAX_HEADER, &text, &len));
    json_doc doc;
    json_doc_init(&doc);
    json_value *root = NULL;
    json_error err;
    const json_value *wm = NULL;
    int rc = 0;
    if (json_parse(&doc, text, len, &root, &err) != 0) {
        tsr_error("%s: not valid JSON: %s at byte %zu", h->st_path, err.msg, err.pos);
        rc = TSR_EXIT_DATA;
    } else if (!(wm = json_get(root, "weight_map")) || wm->type != JSON_OBJECT || !wm->len) {
        tsr_error("%s: no \"weight_map\" object naming the shard of each tensor", h->st_path);
        rc = TSR_EXIT_DATA;
    } else if (wm->len > ST_MAX_TENSORS) {
        tsr_error("%s: the weight_map names %zu tensors, more than the %d a model may have",
                  h->st_path, wm->len, ST_MAX_TENSORS);
        rc = TSR_EXIT_DATA;
    }
    shard_set set = {0};
    if (!rc) { /* at most one file per tensor of the map; the table at most half full */
        h->f = tsr_calloc(wm->len, sizeof *h->f);
        for (set.cap = 16; set.cap < 2 * wm->len; set.cap *= 2) continue;
        set.name = tsr_calloc(set.cap, sizeof *set.name);
        set.file = tsr_calloc(set.cap, sizeof *set.file);
    }
    for (const json_value *v = rc ? NULL : wm->child; v && !rc; v = v->next)
        rc = map_entry(h, &set, dir, v);
    free(set.name);
    free(set.file);
    json_doc_free(&doc);
    free(text);
    return rc;
}

/* The largest layer index + 1 among the files' tensor names ("[prefix]layers.N." for the Llama
 * family, "h.N." GPT-2, "blocks.N." MPT: the class's names); 0 when none. */
static long weights_layers(const hf_import *h) {
    const char *pre = h->hc.fam->prefix, *fmt = h->hc.fam->names->layer;
    long most = 0;
    for (int j = 0; j < h->nf; j++)
        for (int i = 0; i < h->f[j].n; i++) {
            const char *s = h->f[j].t[i].name;
            long l = -1;
            int pos = 0;
            if (!strncmp(s, pre, strlen(pre))) s += strlen(pre);
            if (sscanf(s, fmt, &l, &pos) == 1 && pos > 0 && l >= 0 && l + 1 > most) most = l + 1;
        }
    return most;
}

/* One size config.json gives (key = have) against what the weights say (got, from where). */
static int size_agrees(const hf_import *h, const char *key, long have, long got, const char *what) {
    if (have == got) return 0;
    tsr_error("%s/config.json: %s = %ld, but the weights (%s) say %ld (%s): config.json does not "
              "describe these weights", h->dir, key, have, h->st_path, got, what);
    return TSR_EXIT_DATA;
}

/* config.json's layer count, width, vocabulary and MLP width against the safetensors headers,
 * named by their config.json keys, before the tensor-by-tensor match names a tensor. */
static int sizes_agree(const hf_import *h, const tsr_model *m) {
    const hf_names *nm = h->hc.fam->names;
    const char *const *k = nm->keys; /* layers, width, vocabulary, MLP width */
    int fi = 0;
    /* (DeepSeek's MTP modules are layers L .. L + D - 1 of the files) */
    TSR_CHECK(size_agrees(h, k[0], m->L, weights_layers(h) - m->D,
                          m->D ? "the layers their tensor names number, less the MTP layers"
                               : "the layers their tensor names number"));
    const st_entry *e = lookup(h, h->tab[0].name, &fi); /* row 0: the token embedding */
    if (!e || e->ndim != 2) return 0; /* the match names it */
    TSR_CHECK(size_agrees(h, k[1], m->C, (long)e->shape[1], e->name));
    TSR_CHECK(size_agrees(h, k[2], m->V, (long)e->shape[0], e->name));
    char up[96];
    if (!k[3] || !nm->up || h->hc.fam->moe) return 0;
    snprintf(up, sizeof up, "%s%s", h->hc.fam->prefix, nm->up);
    if (!(e = lookup(h, up, &fi)) || e->ndim != 2) return 0;
    return size_agrees(h, k[3], m->F, (long)e->shape[nm->up_dim], e->name);
}

/* config.json and the safetensors headers against m (hf_import_open but the data read). */
static int open_headers(hf_import *h, const char *dir, const tsr_model *m) {
    char cfg_path[1100];
    struct stat st;
    snprintf(h->dir, sizeof h->dir, "%s", dir);
    snprintf(h->st_path, sizeof h->st_path, "%s/model.safetensors", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    int single = stat(h->st_path, &st) == 0;
    if (!single) snprintf(h->st_path, sizeof h->st_path, "%s/model.safetensors.index.json", dir);
    if (!single && stat(h->st_path, &st) != 0) {
        tsr_error("%s: neither model.safetensors nor model.safetensors.index.json (shards) in this "
                  "Hugging Face directory", dir);
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(hf_config_check(cfg_path, m, 0, &h->hc)); /* (hf_config_load said the notes) */
    if (single) {
        h->f = tsr_calloc(1, sizeof *h->f);
        TSR_CHECK(st_open(&h->f[0], h->st_path));
        h->nf = 1;
    } else {
        TSR_CHECK(open_shards(h, dir));
    }
    char full[64];
    int fi;
    const hf_family *f = h->hc.fam;
    snprintf(full, sizeof full, "%s%s", f->prefix, f->names->embed);
    h->bare = !find_any(h, full, &fi) && find_any(h, full + strlen(f->prefix), &fi);
    h->tab = f->ops->table(m, f, &h->n);
    if (h->hc.mxfp4) hf_gptoss_mxfp4_form(h->tab, h->n);
    TSR_CHECK(sizes_agree(h, m));
    return match_tensors(h, m);
}

/* Row k's FP8 weight dequantised into x (t->numel floats). */
static int read_fp8(hf_import *h, int k, float *x) {
    const st_entry *e = h->src[k], *s = h->scl[k];
    const st_file *fw = &h->f[h->src_file[k]], *fs = &h->f[h->scl_file[k]];
    uint8_t *w = tsr_malloc(e->numel ? e->numel : 1);
    float *sc = tsr_malloc((s->numel ? s->numel : 1) * sizeof *sc);
    char why[256];
    int rc = st_read_raw(fw, e, w);
    if (!rc) rc = st_read_f32(fs, s, sc);
    if (!rc && fp8_block_to_f32(w, e->numel, sc, s->numel, e->shape[0], e->shape[1],
                                h->hc.fp8_block[0], h->hc.fp8_block[1], x, h->tab[k].numel, why,
                                sizeof why)) {
        tsr_error("%s: tensors \"%s\" and \"%s\": %s", fw->path, e->name, s->name, why);
        rc = TSR_EXIT_DATA;
    }
    free(w);
    free(sc);
    return rc;
}

/* Row k's HF tensor as float32 into x: plain, MXFP4 or FP8. */
static int read_tensor(hf_import *h, int k, float *x, uint64_t *bytes) {
    const hf_tensor *t = &h->tab[k];
    const st_entry *e = h->src[k];
    *bytes += e->end - e->begin + (h->scl[k] ? h->scl[k]->end - h->scl[k]->begin : 0);
    if (t->mxfp4)
        return hf_gptoss_mxfp4_read(&h->f[h->src_file[k]], e, &h->f[h->scl_file[k]], h->scl[k],
                                    t, x);
    if (h->scl[k]) return read_fp8(h, k, x);
    return st_read_f32_finite(&h->f[h->src_file[k]], e, x);
}

/* Row k's tensor as float32 (malloc'd), or NULL after tsr_error. */
static float *read_copy(hf_import *h, int k) {
    uint64_t bytes = 0;
    float *x = tsr_malloc((h->tab[k].numel ? h->tab[k].numel : 1) * sizeof *x);
    if (read_tensor(h, k, x, &bytes) == 0) return x;
    free(x);
    return NULL;
}

/* Every copy row (hf_tensor.copy) equals the row whose block it names. */
static int check_copies(hf_import *h) {
    for (int k = 0; k < h->n; k++) {
        int j = 0;
        if (!h->tab[k].copy) continue;
        while (j < h->n && (h->tab[j].copy || h->tab[j].offset != h->tab[k].offset)) j++;
        if (j == h->n) return TSR_EXIT_INTERNAL; /* (the table names the block it copies) */
        float *a = read_copy(h, j), *b = a ? read_copy(h, k) : NULL;
        int same = b && !memcmp(a, b, h->tab[k].numel * sizeof *a);
        free(a);
        free(b);
        if (same) continue;
        if (a && b)
            tsr_error("%s: tensor \"%s\" differs from \"%s\": the multi-token-prediction module "
                      "shares the model's embedding and head (docs/hf.md \"DeepSeek\")", h->st_path,
                      h->tab[k].name, h->tab[j].name);
        return TSR_EXIT_DATA;
    }
    return 0;
}

int hf_import_open(hf_import **out, const char *dir, const tsr_model *m) {
    hf_import *h = tsr_calloc(1, sizeof *h);
    *out = h;
    TSR_CHECK(open_headers(h, dir, m));
    TSR_CHECK(check_untaken(h, m));
    TSR_CHECK(check_copies(h));
    float add = h->hc.fam->norm_add;
    if (add != 0.0f && tsr_log_rank() == 0) /* said once, not a warning */
        fprintf(stderr, "%s: %s's RMSNorm weights are w of (1 + w): imported as w + %g, tessera's "
                "norm weight (an export subtracts it again)\n", dir, h->hc.fam->class_name, add);
    if ((h->not_read[0] || h->not_read[1]) && tsr_log_rank() == 0) /* one line, not a warning */
        fprintf(stderr, "%s: not read (tessera trains the text model): %ld tensors of "
                "model.visual.* (the vision tower), %ld of mtp.* (the multi-token prediction)\n",
                dir, h->not_read[1], h->not_read[0]);
    if (h->hc.mxfp4 && tsr_log_rank() == 0)
        fprintf(stderr, "%s: the experts' gate_up_proj and down_proj are MXFP4 (quantization_config "
                "quant_method \"mxfp4\"): dequantised to fp32, exactly (an export writes them "
                "unquantised)\n", dir);
    return 0;
}

int hf_weights_check(const char *dir, const tsr_model *m) {
    hf_import *h = tsr_calloc(1, sizeof *h);
    int rc = open_headers(h, dir, m);
    hf_import_close(h);
    return rc;
}

/* An interleaved tensor (hf_tensor.groups) into [lo, hi) of the flat buffer, run by run. */
static int read_runs(hf_import *h, int k, size_t lo, size_t hi, float *dst, uint64_t *bytes) {
    const hf_tensor *t = &h->tab[k];
    size_t at, hf, len;
    int any = 0;
    for (int i = 0; !hf_tensor_runs(t, i, &at, &hf, &len); i++) any |= at < hi && at + len > lo;
    if (!any) return 0;
    float *x = buffer(h, t->numel);
    TSR_CHECK(read_tensor(h, k, x, bytes));
    for (int i = 0; !hf_tensor_runs(t, i, &at, &hf, &len); i++)
        for (size_t j = at > lo ? at : lo; j < at + len && j < hi; j++) dst[j - lo] = x[hf + j - at];
    return 0;
}

/* The MTP modules' layer blocks (mtp_layer_w, mtp_layer_n) in [lo, hi) zeroed: their tensors'
 * rows fill them, the 16-float alignment gaps between stay 0, as at initialisation. */
static void zero_mtp_blocks(const tsr_model *m, size_t lo, size_t hi, float *dst) {
    static const tsr_param_id blocks[] = {TSR_P_MTPW, TSR_P_MTPN};
    for (size_t k = 0; k < sizeof blocks / sizeof blocks[0]; k++) {
        const tsr_param_info *w = &m->params_info[blocks[k]];
        for (size_t i = w->offset > lo ? w->offset : lo; i < w->offset + w->numel && i < hi; i++)
            dst[i - lo] = 0.0f;
    }
}

int hf_import_read(hf_import *h, const tsr_model *m, size_t lo, size_t hi, float *dst,
                   uint64_t *bytes) {
    zero_mtp_blocks(m, lo, hi, dst);
    for (int k = 0; k < h->n; k++) {
        const hf_tensor *t = &h->tab[k];
        if (t->groups) {
            TSR_CHECK(read_runs(h, k, lo, hi, dst, bytes));
            continue;
        }
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (!t->present || t->copy || a >= b) continue;
        float *x = buffer(h, t->numel);
        TSR_CHECK(read_tensor(h, k, x, bytes));
        size_t R = (size_t)t->rows, Cc = (size_t)t->cols;
        for (size_t i = a - t->offset; i < b - t->offset; i++) /* HF (in, out) -> (out, in) */
            dst[t->offset + i - lo] = (t->experts ? x[hf_gptoss_hf_index(t, i)]
                                       : t->transpose ? x[(i % Cc) * R + i / Cc] : x[i]) + t->add;
    }
    /* padded rows V..Vp-1 of wte and lm_head: zero, as at initialisation (never trained, never
     * sampled) */
    static const tsr_param_id vocab_rows[] = {TSR_P_WTE, TSR_P_LMHEAD};
    for (size_t k = 0; k < sizeof vocab_rows / sizeof vocab_rows[0]; k++) {
        const tsr_param_info *w = &m->params_info[vocab_rows[k]];
        size_t p0 = w->offset + (size_t)m->V * (size_t)m->C, p1 = w->offset + w->numel;
        for (size_t i = p0 > lo ? p0 : lo; i < p1 && i < hi && w->numel; i++) dst[i - lo] = 0.0f;
    }
    return 0;
}

void hf_import_close(hf_import *h) {
    if (!h) return;
    for (int i = 0; i < h->nf; i++) st_close(&h->f[i]);
    tsr_free_all(h->f, h->tab, h->src, h->src_file, h->scl, h->scl_file, h->buf, h);
}

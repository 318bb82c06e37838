/* hf_import.c — a transformers directory -> the parameters of the run's model (hf.h, docs/hf.md).
 *
 * Accepted: model.safetensors (F32, BF16 or F16 tensors; names with or without the "transformer."
 * prefix, as GPT2LMHeadModel and GPT2Model save them) + config.json, for the model the run's config
 * describes. Ignored: GPT-2's attention-mask buffers (h.N.attn.bias of 4 dimensions, h.N.attn.
 * masked_bias), which older checkpoints carry. lm_head.weight, when present, must equal wte (tessera
 * ties them). Any other tensor is refused by name, as is a missing one or one of the wrong shape.
 * Into a GPT-2-style run without biases, a GPT-2 checkpoint imports only if all its biases are 0
 * (e.g. one exported from such a run).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "hf/hf.h"
#include "hf/hf_internal.h"

struct hf_import {
    char st_path[1100];
    st_file f;
    hf_config hc;
    hf_tensor *tab;          /* n rows: the run's model in HF names */
    int n;
    const st_entry **src;    /* the file's entry of each row */
    int bare;                /* names lack the "transformer." prefix */
    float *buf;              /* one HF tensor, as float32 */
    size_t buf_cap;
};

int hf_is_dir(const char *path) {
    struct stat st;
    char p[4200];
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(p, sizeof p, "%s/model.safetensors", path);
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

/* The file's entry for a full HF name ("transformer.x"), honouring a prefix-less file. */
static const st_entry *lookup(const hf_import *h, const char *full) {
    const char *pre = "transformer.";
    if (h->bare && !strncmp(full, pre, strlen(pre))) full += strlen(pre);
    return st_find(&h->f, full);
}

static void shape_str(char *s, size_t cap, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(s, cap, "[");
    for (int d = 0; d < ndim && o < cap; d++)
        o += (size_t)snprintf(s + o, cap - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < cap) snprintf(s + o, cap - o, "]");
}

/* GPT-2's non-parameter buffers: h.N.attn.bias (the causal mask) and h.N.attn.masked_bias. */
static int is_gpt2_buffer(const char *name) {
    if (!strncmp(name, "transformer.", 12)) name += 12;
    int l, pos = 0;
    if (sscanf(name, "h.%d.attn.%n", &l, &pos) != 1 || pos == 0) return 0;
    return !strcmp(name + pos, "bias") || !strcmp(name + pos, "masked_bias");
}

/* Every row's tensor is there with its shape and a float dtype; nothing unknown is there. */
static int match_tensors(hf_import *h, const tsr_model *m) {
    const char *path = h->st_path;
    char want[64], got[64];
    unsigned char *used = tsr_calloc((size_t)h->f.n + 1, 1);
    int rc = 0;
    h->src = tsr_calloc((size_t)h->n, sizeof *h->src);
    for (int k = 0; k < h->n && !rc; k++) {
        const hf_tensor *t = &h->tab[k];
        const st_entry *e = lookup(h, t->name);
        shape_str(want, sizeof want, t->ndim, t->shape);
        if (!e) {
            tsr_error("%s: no tensor \"%s\" %s (the %s model of config.json and of this run has one)",
                      path, t->name, want, hf_model_type[h->hc.arch]);
            rc = TSR_EXIT_DATA;
            break;
        }
        shape_str(got, sizeof got, e->ndim, e->shape);
        int same = e->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = e->shape[d] == t->shape[d];
        if (!same || (e->dtype != ST_F32 && e->dtype != ST_BF16 && e->dtype != ST_F16)) {
            tsr_error("%s: tensor \"%s\" is %s %s, the model of config.json needs %s in F32, BF16 "
                      "or F16", path, e->name, st_dtype_name(e->dtype), got, want);
            rc = TSR_EXIT_DATA;
        }
        used[e - h->f.t] = 1;
        h->src[k] = e;
    }
    for (int i = 0; i < h->f.n && !rc; i++) {
        const st_entry *e = &h->f.t[i];
        if (used[i] || (h->hc.arch == HF_GPT2 && is_gpt2_buffer(e->name))) continue;
        if (!strcmp(e->name, "lm_head.weight") && e->ndim == 2 && e->shape[0] == m->V &&
            e->shape[1] == m->C) {
            /* checked against wte below */
            continue;
        }
        shape_str(got, sizeof got, e->ndim, e->shape);
        tsr_error("%s: unexpected tensor \"%s\" %s: it is no part of the %s model of config.json "
                  "as tessera builds it (docs/hf.md lists the names)", path, e->name, got,
                  hf_model_type[h->hc.arch]);
        rc = TSR_EXIT_DATA;
    }
    free(used);
    return rc;
}

/* Tensors the run's model lacks must be zero (biases of a bias-free run); lm_head must be wte. */
static int check_untaken(hf_import *h, const tsr_model *m) {
    for (int k = 0; k < h->n; k++) {
        const st_entry *e = h->src[k];
        if (h->tab[k].present) continue;
        float *x = buffer(h, e->numel);
        TSR_CHECK(st_read_f32(&h->f, e, x));
        for (uint64_t i = 0; i < e->numel; i++)
            if (x[i] != 0.0f) {
                tsr_error("%s: tensor \"%s\" holds nonzero values (element %llu is %g), but this run "
                          "has model.bias = false: set --set model.bias=true to keep the biases",
                          h->st_path, e->name, (unsigned long long)i, (double)x[i]);
                return TSR_EXIT_USAGE;
            }
    }
    const st_entry *head = st_find(&h->f, "lm_head.weight");
    if (!head && !h->hc.tied) {
        tsr_error("%s: config.json says tie_word_embeddings = false but there is no lm_head.weight",
                  h->st_path);
        return TSR_EXIT_DATA;
    }
    if (!head) return 0;
    const st_entry *wte = h->src[0]; /* row 0 is wte */
    float *a = tsr_malloc((size_t)wte->numel * sizeof *a), *b = buffer(h, head->numel);
    int rc = st_read_f32(&h->f, wte, a);
    if (!rc) rc = st_read_f32(&h->f, head, b);
    if (!rc && memcmp(a, b, (size_t)wte->numel * sizeof *a) != 0) {
        tsr_error("%s: lm_head.weight differs from %s: tessera ties the output head to the token "
                  "embedding, an untied head cannot be imported", h->st_path, wte->name);
        rc = TSR_EXIT_DATA;
    }
    free(a);
    (void)m;
    return rc;
}

int hf_import_open(hf_import **out, const char *dir, const tsr_model *m) {
    hf_import *h = tsr_calloc(1, sizeof *h);
    *out = h;
    h->f.fd = -1;
    char cfg_path[1100], index[1100];
    struct stat st;
    snprintf(h->st_path, sizeof h->st_path, "%s/model.safetensors", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    if (stat(h->st_path, &st) != 0) {
        tsr_error("%s: no model.safetensors in this Hugging Face directory%s", dir,
                  stat(index, &st) == 0 ? " (a sharded checkpoint, model.safetensors.index.json: "
                  "not supported; save it unsharded, e.g. save_pretrained(max_shard_size=\"100GB\"))" : "");
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(hf_config_check(cfg_path, m, &h->hc));
    TSR_CHECK(st_open(&h->f, h->st_path));
    h->bare = !st_find(&h->f, "transformer.wte.weight") && st_find(&h->f, "wte.weight");
    h->tab = hf_tensor_table(m, h->hc.arch, &h->n);
    TSR_CHECK(match_tensors(h, m));
    return check_untaken(h, m);
}

int hf_import_read(hf_import *h, tsr_model *m, size_t lo, size_t hi, uint64_t *bytes) {
    for (int k = 0; k < h->n; k++) {
        const hf_tensor *t = &h->tab[k];
        size_t a = t->offset > lo ? t->offset : lo, b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (!t->present || a >= b) continue;
        const st_entry *e = h->src[k];
        float *x = buffer(h, t->numel);
        TSR_CHECK(st_read_f32(&h->f, e, x));
        *bytes += e->end - e->begin;
        float *dst = m->params + t->offset;
        size_t R = (size_t)t->rows, Cc = (size_t)t->cols;
        for (size_t i = a - t->offset; i < b - t->offset; i++) {
            float v = t->transpose ? x[(i % Cc) * R + i / Cc] : x[i]; /* HF (in, out) -> (out, in) */
            if (!isfinite(v)) {
                tsr_error("%s: tensor \"%s\" holds a non-finite value (%g): refusing to start from it",
                          h->st_path, e->name, (double)v);
                return TSR_EXIT_DATA;
            }
            dst[i] = v;
        }
    }
    /* wte's padded rows V..Vp-1: zero, as at initialisation (never trained, never sampled) */
    const tsr_param_info *w = &m->params_info[TSR_P_WTE];
    size_t p0 = w->offset + (size_t)m->V * (size_t)m->C, p1 = w->offset + w->numel;
    for (size_t i = p0 > lo ? p0 : lo; i < p1 && i < hi; i++) m->params[i] = 0.0f;
    return 0;
}

void hf_import_close(hf_import *h) {
    if (!h) return;
    if (h->f.fd >= 0 || h->f.t) st_close(&h->f);
    free(h->tab);
    free(h->src);
    free(h->buf);
    free(h);
}

/* hf_rows.c — a tensor table built row by row (hf_rows.h). */
#include "hf/hf_rows.h"

#include <stdio.h>

hf_tensor *hf_rows_next(hf_rows *tb, const char *fmt, int e) {
    hf_tensor *h = &tb->t[tb->n++];
    char sub[64];
    snprintf(sub, sizeof sub, fmt, e);
    if (tb->l >= 0) snprintf(h->name, sizeof h->name, "%slayers.%d.%.60s", tb->pre, tb->l, sub);
    else snprintf(h->name, sizeof h->name, "%s%.60s", tb->pre, sub);
    h->present = 1;
    return h;
}

/* an MTP module's layer tensor: its place in the depth's row of mtp_layer_w or mtp_layer_n */
static size_t mtp_slice(const hf_rows *tb, tsr_param_id p, size_t *len) {
    int64_t v[3];
    if (!model_mtp_layer_tensor(tb->m, tb->mtp, p, v)) return SIZE_MAX;
    const tsr_param_info *blk = &tb->m->params_info[v[0] ? TSR_P_MTPN : TSR_P_MTPW];
    *len = (size_t)v[2];
    return blk->offset + (size_t)tb->mtp * (size_t)blk->shape[1] + (size_t)v[1];
}

size_t hf_rows_slice(const hf_rows *tb, tsr_param_id p, int e, size_t *len) {
    const tsr_model *m = tb->m;
    const tsr_param_info *pi = &m->params_info[p];
    size_t at, n;
    if (tb->l >= 0 && tb->mtp >= 0) {
        if ((at = mtp_slice(tb, p, &n)) == SIZE_MAX) return SIZE_MAX;
    } else {
        const int slot = tb->l >= 0 ? model_layer_slot(m, p, tb->l) : 0;
        if (!pi->numel || slot < 0) return SIZE_MAX;
        n = pi->numel / (size_t)(tb->l >= 0 ? model_param_layers(m, p) : 1);
        at = pi->offset + (size_t)slot * n;
    }
    *len = e >= 0 ? n / (size_t)m->E : n;
    return at + (e >= 0 ? (size_t)e * *len : 0);
}

void hf_rows_plain(hf_rows *tb, const char *fmt, int e, tsr_param_id p, int64_t r0, int64_t rows,
                   int64_t cols, float add) {
    size_t len, at = hf_rows_slice(tb, p, e, &len);
    if (at == SIZE_MAX) return;
    hf_tensor *h = hf_rows_next(tb, fmt, e);
    const int64_t c = cols ? cols : 1;
    h->ndim = cols ? 2 : 1;
    h->shape[0] = rows, h->shape[1] = cols;
    h->offset = at + (size_t)(r0 * c);
    h->numel = (size_t)(rows * c);
    h->rows = rows, h->cols = c;
    h->add = add;
}

void hf_rows_swiglu(hf_rows *tb, const char *prefix, int e, tsr_param_id w1, tsr_param_id w2,
                    int64_t F, int64_t C) {
    char gate[128], up[128], down[128];
    snprintf(gate, sizeof gate, "%s.gate_proj.weight", prefix);
    snprintf(up, sizeof up, "%s.up_proj.weight", prefix);
    snprintf(down, sizeof down, "%s.down_proj.weight", prefix);
    hf_rows_plain(tb, gate, e, w1, 0, F, C, 0);
    hf_rows_plain(tb, up, e, w1, F, F, C, 0);
    hf_rows_plain(tb, down, e, w2, 0, C, F, 0);
}

void hf_rows_view3(hf_rows *tb, int64_t a, int64_t b, int64_t c) {
    hf_tensor *h = &tb->t[tb->n - 1];
    h->ndim = 3;
    h->shape[0] = a, h->shape[1] = b, h->shape[2] = c;
}

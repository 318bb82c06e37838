/* decoder_kv.c — decoding with a KV cache (decoder.h, decoder_int.h; docs/decoder.md): a chunk
 * of one sequence (dec_kv_chunk) or of a slot of many, or one new token of each of many slots
 * (dec_kv_slots), through the forward's layer loop (decoder.c) over the chunk's buffers, with the
 * cache's attention in place of the training one.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/decoder.h"
#include "model/decoder_int.h"

void dec_kv_chunk(const tsr_decoder *d, tsr_kv_cache *kv, const int32_t *tokens, int c,
                  float *probs) {
    const tsr_model *m = d->m;
    const tsr_backend *be = d->be;
    const int C = m->C, p0 = kv->len;
    const size_t w = tsr_dtype_size(be->weight);
    if (!be->attention_decode || !be->host || d->m->tp)
        tsr_die(TSR_EXIT_INTERNAL, "decoder: the %s backend has no KV-cache decoding%s", be->name,
                d->m->tp ? " of a model split by tensor parallelism" : "");
    const dec_run r = {.d = d, .B = 1, .T = c, .N = c, .Nf = c, .scratch = kv->proj,
                   .lnf = kv->ln, .lnfm = kv->mean, .lnfr = kv->rstd, .kv = kv, .p0 = p0};
    dec_unit root;
    dec_unit_get(d, 0, 0, &root);
    const char *wpe = root.w[TSR_P_WPE]; /* learned positions count from the segment's start */
    be->encoder_forward(be, kv->x, tokens, root.w[TSR_P_WTE],
                        wpe ? wpe + (size_t)(p0 - kv->seg) * C * w : NULL, NULL, 1, c, C);
    dec_layers_forward(&r, &root);
    kv->len += c;
    if (probs) { /* the last row through the LM head and the softmax */
        float loss;
        const int32_t none = -1;
        dec_linear(&r, -1, kv->logits, NULL, kv->ln + (size_t)(c - 1) * C, root.w[dec_head_id(m)],
                   NULL, 1, C, m->Vp);
        be->softmax_xent(be, &loss, kv->logits, &none, NULL, 1, m->V, m->Vp);
        be->to_host(be, probs, kv->logits, (size_t)m->Vp * sizeof(float));
    }
    dec_unit_put(d, 0, 0);
}

/* probs (n, Vp) host: the softmax of the n rows of logits over the V real columns (columns >= V
 * are 0). A host backend runs its softmax_xent (model_forward's probabilities, the same bits); a
 * device's bf16 logits are brought to the host, capped there by the CPU's softcap op (with the
 * backend's logit_softcap, as its softmax_xent caps) and normalised, in double. */
static void head_probs(const tsr_decoder *d, tsr_kv_slots *ks, int n, float *probs) {
    const tsr_backend *be = d->be;
    const int V = d->m->V, Vp = d->m->Vp;
    if (be->host) {
        be->softmax_xent(be, ks->loss, ks->logits, ks->none, NULL, n, V, Vp);
        be->to_host(be, probs, ks->logits, (size_t)n * Vp * sizeof(float));
        return;
    }
    uint16_t *h = tsr_malloc((size_t)n * Vp * sizeof *h); /* bf16 bits */
    be->to_host(be, h, ks->logits, (size_t)n * Vp * sizeof *h);
    for (size_t k = 0; k < (size_t)n * Vp; k++) {
        const uint32_t bits = (uint32_t)h[k] << 16;
        memcpy(&probs[k], &bits, sizeof bits);
    }
    free(h);
    if (be->logit_softcap > 0.0f) /* the fp32 op the CPU backend caps with */
        tsr_cpu_ops.softcap_forward(probs, probs, n, V, Vp, be->logit_softcap);
    for (int i = 0; i < n; i++) {
        float *p = probs + (size_t)i * Vp;
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < V; j++)
            if (p[j] > mx) mx = p[j];
        for (int j = 0; j < V; j++) sum += exp((double)p[j] - mx);
        for (int j = 0; j < Vp; j++) p[j] = j < V ? (float)(exp((double)p[j] - mx) / sum) : 0.0f;
    }
}

void dec_kv_slots(const tsr_decoder *d, tsr_kv_slots *ks, int slot, const int32_t *tokens, int c,
                  float *probs) {
    const tsr_model *m = d->m;
    const tsr_backend *be = d->be;
    const int C = m->C, R = ks->rows;
    const size_t w = tsr_dtype_size(be->weight), e = tsr_dtype_size(be->act);
    if (!be->attention_decode || !be->attention_decode_rows || m->tp)
        tsr_die(TSR_EXIT_INTERNAL, "decoder: the %s backend has no batched decoding%s", be->name,
                m->tp ? " of a model split by tensor parallelism" : "");
    if (c < 1 || c > R)
        tsr_die(TSR_EXIT_INTERNAL, "dec_kv_slots: %d rows, buffers for %d", c, R);
    if (slot >= 0) memcpy(ks->host_ids, tokens, (size_t)c * sizeof *tokens);
    if (!be->host) be->to_device(be, ks->dev_ids, ks->host_ids, (size_t)5 * R * sizeof(int32_t));
    tsr_kv_cache *kv = &ks->buf;
    const int p0 = slot >= 0 ? ks->len[slot] : 0;
    const dec_run r = {.d = d, .B = slot >= 0 ? 1 : c, .T = slot >= 0 ? c : 1, .N = c, .Nf = c,
                   .scratch = kv->proj, .lnf = kv->ln, .lnfm = kv->mean, .lnfr = kv->rstd,
                   .kv = kv, .ks = ks, .slot = slot, .p0 = p0};
    dec_unit root;
    dec_unit_get(d, 0, 0, &root);
    const char *wpe = root.w[TSR_P_WPE]; /* learned positions count from the segment's start */
    if (slot >= 0)
        be->encoder_forward(be, kv->x, ks->dev_ids, root.w[TSR_P_WTE],
                            wpe ? wpe + (size_t)(p0 - ks->seg[slot]) * C * w : NULL, NULL, 1, c,
                            C);
    else
        be->encoder_forward(be, kv->x, ks->dev_ids, root.w[TSR_P_WTE], wpe, ks->dev_ids + 4 * R,
                            c, 1, C);
    dec_layers_forward(&r, &root);
    if (slot >= 0) ks->len[slot] += c;
    else
        for (int i = 0; i < c; i++) ks->len[ks->host_ids[R + i]]++;
    if (probs) { /* a chunk's last row, or every row, through the LM head */
        const int n = slot >= 0 ? 1 : c, first = slot >= 0 ? c - 1 : 0;
        dec_linear(&r, -1, ks->logits, NULL, (char *)kv->ln + (size_t)first * C * e,
                   root.w[dec_head_id(m)], NULL, n, C, m->Vp);
        head_probs(d, ks, n, probs);
    }
    dec_unit_put(d, 0, 0);
}

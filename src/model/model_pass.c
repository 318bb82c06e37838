/* model_pass.c — a tsr_model's activations and passes on its fp32 backend: the decoder of
 * decoder.c over the model's flat parameters (or its sharded source). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "dist/dist.h"
#include "model.h"
#include "model/decoder.h"
#include "model/model_ep.h"
#include "model/model_ring.h"
#include "model/model_tp.h"
#include "model/mtp.h"

int model_try_alloc_acts(tsr_model *m, int B, int T) {
    return dec_try_alloc_acts(m, &m->be, &m->acts, B, T);
}

void model_alloc_acts(tsr_model *m, int B, int T) {
    if (model_try_alloc_acts(m, B, T) != 0)
        tsr_die(TSR_EXIT_INTERNAL, "out of memory allocating the activations for a microbatch of "
                "%d x %d (%.1f MiB): use a smaller micro_batch (or micro_batch = \"auto\"), "
                "activation checkpointing or a smaller model", B, T,
                (double)model_acts_bytes(m, B, T) / (1024.0 * 1024.0));
}

void model_free_acts(tsr_model *m) { dec_free_acts(&m->be, &m->acts); }

size_t model_acts_bytes(const tsr_model *m, int B, int T) {
    return dec_acts_bytes(m, &m->be, B, T);
}

size_t model_dn_scratch_bytes(const tsr_model *m, int B, int T) {
    return dec_dn_backward_bytes(m, &m->be, B, T / (m->cpN > 1 ? m->cpN : 1));
}

void model_free(tsr_model *m) {
    model_free_acts(m);
    model_mtp_free(m);
    if (m->be.capped) free(m->be.capped->z), free(m->be.capped), m->be.capped = NULL;
    float **bufs[] = {&m->params, &m->grads, &m->alibi_slopes, &m->rope_freqs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        if (*bufs[i]) m->ops->free(*bufs[i]);
        *bufs[i] = NULL;
    }
}

/* The decoder's parameter source: unit u's tensors from the sharded source, else from
 * params/grads. */
static void unit_get(void *ctx, int u, int backward, const void **w, float **g) {
    const tsr_model *m = ctx;
    if (m->src) {
        float *wf[TSR_P_COUNT] = {0};
        m->src->get(m->src->ctx, u, backward, wf, g);
        for (int i = 0; i < TSR_P_COUNT; i++) w[i] = wf[i];
    } else {
        size_t off[TSR_P_COUNT];
        dec_unit_offsets(m, u, off);
        for (int i = 0; i < TSR_P_COUNT; i++) {
            if (off[i] == SIZE_MAX) continue;
            w[i] = m->params + off[i];
            if (m->grads) g[i] = m->grads + off[i];
        }
    }
    if (m->ep) ep_unit(m->ep, m, u, backward, w, g); /* the experts, from their own store */
}

static void unit_put(void *ctx, int u, int backward) {
    const tsr_model *m = ctx;
    if (m->src) m->src->put(m->src->ctx, u, backward);
}

/* The decoder over this model on the fp32 backend. */
static tsr_decoder decoder_of(tsr_model *m) {
    return (tsr_decoder){.m = m, .be = &m->be, .a = &m->acts,
                         .params = {m, unit_get, unit_put}, .slopes = m->alibi_slopes,
                         .rope = m->rope_freqs, .lora = m->lora, .ring = m->ring,
                         .starts = m->starts, .tp = m->tp};
}

void model_decoder_of(tsr_model *m, tsr_acts *a, const tsr_backend *be, tsr_decoder *d) {
    *d = decoder_of(m);
    d->a = a, d->be = be;
}

void model_moe_stats_add_w(tsr_model *m, double w, double *acc) {
    if (m->tp && m->tp->t != 0) return; /* (a tensor group's ranks route alike: counted once) */
    if (m->moe_stats) {
        m->moe_stats(m->fwd_ctx, w, acc);
        return;
    }
    tsr_decoder d = decoder_of(m);
    dec_moe_stats_add(&d, w, acc);
}

void model_moe_stats_add(tsr_model *m, const int32_t *targets, int B, int T, float loss_scale,
                         double *acc) {
    /* (context parallelism: the weight of this rank's share of the positions) */
    const tsr_ring *g = m->ring;
    const double w = g ? dec_moe_weight(g->targets, (size_t)B * (size_t)(T / g->N), loss_scale)
                       : dec_moe_weight(targets, (size_t)B * (size_t)T, loss_scale);
    model_moe_stats_add_w(m, w, acc);
}

void model_token_scores(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float *losses, int32_t *greedy) {
    if (m->scores) {
        m->scores(m->fwd_ctx, tokens, targets, B, T, losses, greedy);
        return;
    }
    model_forward(m, tokens, targets, B, T);
    tsr_decoder d = decoder_of(m);
    dec_token_scores(&d, targets, B, T, losses, greedy);
}

/* Whether a forward is a collective: its units gathered over a sharding group (zero3 / hsdp),
 * or its routed rows exchanged over the EP group (parallel.expert without every expert here) */
static int forward_collective(const tsr_model *m) {
    return m->src != NULL || (m->ep && ep_exchanging(m->ep));
}

/* model_forward's B = 0: one row of padding with no targets, through the same forward as an
 * evaluation's (the device's hook included), for its collectives */
static double idle_forward(tsr_model *m, int T) {
    if (!forward_collective(m)) return 0.0;
    int32_t *row = tsr_malloc(2 * (size_t)T * sizeof *row);
    for (int i = 0; i < T; i++) row[i] = 0, row[T + i] = -1;
    model_forward(m, row, row + T, 1, T);
    free(row);
    return 0.0;
}

int64_t model_forwards_most(const tsr_model *m, int64_t mine) {
    if (!forward_collective(m)) return mine;
    double most = (double)mine;
    dist_allreduce_max_f64(&most, 1);
    return (int64_t)most;
}

double model_forward(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T) {
    if (B == 0) return idle_forward(m, T);
    if (m->fwd) return m->fwd(m->fwd_ctx, tokens, targets, B, T);
    tsr_decoder d = decoder_of(m);
    dec_forward(&d, tokens, targets, B, T, -1.0f);
    return dec_loss_sum(&d, targets, B, T);
}

double model_forward_starts(tsr_model *m, const int32_t *tokens, const int32_t *targets,
                            const uint8_t *starts, int B, int T) {
    m->starts = starts;
    const double loss = model_forward(m, tokens, targets, B, T);
    m->starts = NULL;
    return loss;
}

void model_row_logprobs(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                        double *out) {
    const size_t N = (size_t)B * (size_t)T;
    float *losses = tsr_malloc(N * sizeof(float));
    model_token_scores(m, tokens, targets, B, T, losses, NULL); /* (no argmax) */
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int i = 0; i < T; i++)
            if (targets[(size_t)b * T + i] >= 0) s += losses[(size_t)b * T + i];
        out[b] = -s;
    }
    free(losses);
}

void model_backward_weighted(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B,
                             int T, const float *dlosses, float moe_w) {
    if (m->bwd_weighted) {
        m->bwd_weighted(m->fwd_ctx, tokens, targets, B, T, dlosses, moe_w);
        return;
    }
    tsr_decoder d = decoder_of(m);
    dec_backward_weighted(&d, tokens, targets, B, T, dlosses, moe_w);
}

void model_backward(tsr_model *m, const int32_t *tokens, const int32_t *targets, int B, int T,
                    float loss_scale) {
    tsr_decoder d = decoder_of(m);
    if (m->grads || m->src) /* (MTP's gradient, where there are gradients: flat or the shards') */
        d.pp_dy = mtp_train(m, &d, tokens, targets, B, T, loss_scale);
    dec_backward(&d, tokens, targets, B, T, loss_scale, NULL, NULL);
}

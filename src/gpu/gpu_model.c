/* gpu_model.c — the decoder (src/model/decoder.c) on the CUDA backend (gpu_backend.c): the device
 * state (fp32 master weights, their bf16 copy, fp32 gradients) and the parameter source the
 * decoder reads (gpu_model.h). */
#include "gpu/gpu_model.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/gpu_backend.h"
#include "model/decoder.h"
#include "generate/gen_batch.h"
#include "model/model_lora.h"
#include "model/model_ring.h"
#include "tcu_memtab.h"

size_t gpu_model_state_bytes(const tsr_model *m, gpu_state state) {
    size_t per = state == GPU_STATE_FULL ? 2 * sizeof(float) + sizeof(tsr_bf16)
               : state == GPU_STATE_NO_MASTER ? sizeof(float) + sizeof(tsr_bf16)
               : state == GPU_STATE_FROZEN ? sizeof(tsr_bf16) : 0;
    return m->n_params * per;
}

/* Device bytes of the activations: the decoder's plan on the CUDA backend (no stream needed). */
size_t gpu_model_acts_bytes(const tsr_model *m, int B, int T) {
    const tsr_backend be = gpu_backend_table(NULL);
    return dec_acts_bytes(m, &be, B, T);
}

size_t gpu_model_layer_acts_bytes(const tsr_model *m, int B, int T, int fp8) {
    const tsr_backend be = gpu_backend_table(NULL);
    return dec_layer_acts_bytes(m, &be, B, T, fp8);
}

size_t gpu_model_lora_scratch_bytes(const tsr_lora *lo, int N) {
    const tsr_backend be = gpu_backend_table(NULL);
    return lora_scratch_bytes(lo, &be, N);
}

/* the scratch of one FP8 linear forward, 0 for a shape the FP8 forward keeps in bf16 */
static size_t fp8_layer_scratch(size_t N, int IC, int OC) {
    return gpu_backend_fp8_shape_ok(IC, OC) ? tcu_fp8_scratch_bytes(N, (size_t)IC, (size_t)OC) : 0;
}

size_t gpu_model_fp8_scratch_bytes(const tsr_model *m, int N, tsr_fp8_skip skip) {
    const int first = skip == TSR_FP8_SKIP_FIRST || skip == TSR_FP8_SKIP_FIRST_LAST;
    const int last = m->L - 1 - (skip == TSR_FP8_SKIP_LAST || skip == TSR_FP8_SKIP_FIRST_LAST);
    const size_t n = (size_t)N;
    size_t most = 0;
    for (int l = first; l <= last; l++) { /* decoder.c's linear() calls of layer l */
        size_t b[4] = {fp8_layer_scratch(n, m->C, m->QKV), fp8_layer_scratch(n, m->QD, m->C), 0, 0};
        if (!model_moe_layer(m, l)) b[2] = fp8_layer_scratch(n, m->C, m->FW), b[3] = fp8_layer_scratch(n, m->F, m->C);
        else if (m->S) b[2] = fp8_layer_scratch(n, m->C, 2 * m->S), b[3] = fp8_layer_scratch(n, m->S, m->C);
        for (int i = 0; i < 4; i++) most = b[i] > most ? b[i] : most;
    }
    return most;
}

void gpu_model_use_fp8(tsr_gpu_model *g, tsr_fp8_mode mode, tsr_fp8_skip skip) {
    const int L = g->m->L;
    gpu_backend_use_fp8(&g->be, mode == TSR_FP8_TENSORWISE);
    model_fp8_layers(L, skip, &g->be.fp8_first, &g->be.fp8_last);
}

int gpu_model_fp8_weight(const tsr_gpu_model *g, int l, int id) {
    const tsr_param_info *p = &g->m->params_info[id];
    return model_fp8_linear((tsr_param_id)id) && g->be.matmul_forward_fp8 && l >= g->be.fp8_first && l <= g->be.fp8_last &&
           p->numel && gpu_backend_fp8_shape_ok(p->shape[2], p->shape[1]); /* (L, OC, IC) */
}

void gpu_model_init(tsr_gpu_model *g, const tsr_model *m, tcu_stream s, gpu_state state) {
    memset(g, 0, sizeof *g);
    g->m = m;
    g->s = s;
    g->be = gpu_backend_table(s);
    g->be.logit_softcap = (float)m->cfg.final_logit_softcapping; /* (the kernels keep no copy) */
    if (state == GPU_STATE_FULL)
        g->params = tcu_malloc(m->n_params * sizeof(float), "master weights (fp32)");
    if (state == GPU_STATE_FROZEN)
        g->wbf = tcu_malloc(m->n_params * sizeof(tsr_bf16), "frozen base weights (bf16)");
    if (state == GPU_STATE_FULL || state == GPU_STATE_NO_MASTER) {
        g->wbf = tcu_malloc(m->n_params * sizeof(tsr_bf16), "weights (bf16 copy)");
        g->grads = tcu_malloc(m->n_params * sizeof(float), "gradients (fp32)");
        tcu_zero(g->grads, m->n_params * sizeof(float), s);
    }
    if (m->cfg.pos == TSR_POS_ALIBI) {
        float *h = tsr_malloc((size_t)m->NH * sizeof(float));
        model_alibi_slopes(h, m->NH);
        g->slopes = tcu_malloc((size_t)m->NH * sizeof(float), "ALiBi slopes");
        tcu_memcpy_h2d(g->slopes, h, (size_t)m->NH * sizeof(float), s);
        tcu_sync(s);
        free(h);
    }
    if (m->cfg.pos == TSR_POS_ROPE) { /* the host model's tables, or the same computed */
        const size_t n = (size_t)m->hs; /* (2, hs/2): the full layers', the sliding layers' */
        float *h = m->rope_freqs ? NULL : tsr_malloc(n * sizeof(float));
        if (h) model_rope_tables(h, &m->cfg, m->hs);
        g->rope = tcu_malloc(n * sizeof(float), "RoPE frequencies");
        tcu_memcpy_h2d(g->rope, h ? h : m->rope_freqs, n * sizeof(float), s);
        tcu_sync(s);
        free(h);
    }
}

int gpu_model_try_alloc_acts(tsr_gpu_model *g, int B, int T) {
    if (dec_try_alloc_acts(g->m, &g->be, &g->a, B, T) != 0) {
        g->B = g->T = 0;
        return -1;
    }
    g->B = B;
    g->T = T;
    return 0;
}

void gpu_model_free_acts(tsr_gpu_model *g) {
    if (g->be.free) dec_free_acts(&g->be, &g->a);
    g->B = g->T = 0;
}

void gpu_model_free(tsr_gpu_model *g) {
    if (!g->m) return;
    gpu_model_free_acts(g);
    tcu_free(g->params);
    tcu_free(g->wbf);
    tcu_free(g->grads);
    tcu_free(g->slopes);
    tcu_free(g->rope);
    memset(g, 0, sizeof *g);
}

/* fp32 -> bf16 on the host, round to nearest even, as tcu_f32_to_bf16 rounds finite values
 * (a NaN stays a quiet NaN of its sign) */
static tsr_bf16 host_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (tsr_bf16)((x >> 16) | 0x0040u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (tsr_bf16)(x >> 16);
}

void gpu_model_round_bf16(tsr_bf16 *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = host_bf16(src[i]);
}

/* elements per piece of a frozen base's upload (a 32 MiB host buffer) */
#define UPLOAD_PIECE ((size_t)1 << 24)

void gpu_model_upload(tsr_gpu_model *g, const float *params_host) {
    size_t n = g->m->n_params;
    if (!g->params) { /* frozen: rounded on the host, piece by piece (a pageable copy has read
                       * the piece when it returns: cuda_common.cu) */
        size_t piece = n < UPLOAD_PIECE ? n : UPLOAD_PIECE;
        tsr_bf16 *h = tsr_malloc((piece ? piece : 1) * sizeof *h);
        for (size_t at = 0; at < n; at += piece) {
            size_t k = n - at < piece ? n - at : piece;
            gpu_model_round_bf16(h, params_host + at, k);
            tcu_memcpy_h2d(g->wbf + at, h, k * sizeof *h, g->s);
        }
        tcu_sync(g->s);
        free(h);
        return;
    }
    tcu_memcpy_h2d(g->params, params_host, n * sizeof(float), g->s);
    tcu_f32_to_bf16(g->wbf, g->params, n, g->s);
    tcu_sync(g->s);
}

void gpu_model_download(const tsr_gpu_model *g, float *params_host) {
    tcu_memcpy_d2h(params_host, g->params, g->m->n_params * sizeof(float), g->s);
}

int gpu_model_unit_slices(const tsr_model *m, int u, size_t *off, size_t *len) {
    int k = 0;
    for (int i = 0; i < TSR_P_COUNT; i++) {
        off[k] = model_unit_slice(m, (tsr_param_id)i, u, &len[k]);
        if (off[k] != SIZE_MAX) k++;
    }
    return k;
}

/* The decoder's parameter source: unit u's bf16 weights and, in backward, fp32 gradients, from
 * the flat buffers, or from the source (zero3 / hsdp) when the model holds no flat weights. */
static void unit_get(void *ctx, int u, int backward, const void **w, float **gr) {
    const tsr_gpu_model *g = ctx;
    if (!g->wbf) {
        const tsr_bf16 *wb[TSR_P_COUNT] = {0};
        g->src->get(g->src->ctx, u, backward, wb, gr);
        for (int i = 0; i < TSR_P_COUNT; i++) w[i] = wb[i];
    } else {
        size_t off[TSR_P_COUNT];
        dec_unit_offsets(g->m, u, off);
        for (int i = 0; i < TSR_P_COUNT; i++) {
            if (off[i] == SIZE_MAX) continue;
            w[i] = g->wbf + off[i];
            if (backward && g->grads) gr[i] = g->grads + off[i]; /* (none: frozen, NULL) */
        }
    }
    if (g->experts) g->experts(g->experts_ctx, u, backward, w, gr);
}

/* the source hears of a layer unit after its backward (its gradients complete) */
static void unit_put(void *ctx, int u, int backward) {
    const tsr_gpu_model *g = ctx;
    if (!g->wbf && backward && u > 0) g->src->put(g->src->ctx, u);
}

static tsr_decoder decoder_of(tsr_gpu_model *g) {
    return (tsr_decoder){.m = g->m, .be = &g->be, .a = &g->a, .params = {g, unit_get, unit_put},
                         .slopes = g->slopes, .rope = g->rope, .lora = g->lora,
                         .ring = g->ring, .starts = g->starts, .tp = g->tp ? g->m->tp : NULL,
                         .tpdev = g->tp, .pp_x = g->pp_x, .pp_dy = g->pp_dy};
}

tsr_decoder gpu_model_decoder(tsr_gpu_model *g) { return decoder_of(g); }

const void *gpu_model_output(tsr_gpu_model *g) {
    tsr_decoder d = decoder_of(g);
    return dec_output(&d);
}

void gpu_model_forward(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets, int B,
                       int T, float loss_scale) {
    tsr_decoder d = decoder_of(g);
    dec_forward(&d, tokens, targets, B, T, loss_scale);
}

double gpu_model_loss_sum(tsr_gpu_model *g, const int32_t *targets, int B, int T) {
    tsr_decoder d = decoder_of(g);
    return dec_loss_sum(&d, targets, B, T);
}

/* a stage: the statistics' stack, then the counts' (dec_moe_stats_view) */
size_t gpu_model_moe_stage_bytes(const tsr_model *m) {
    const tsr_backend be = gpu_backend_table(NULL);
    return dec_moe_stats_bytes(m, &be);
}

void gpu_model_moe_stage(tsr_gpu_model *g, void *dst) {
    tsr_decoder d = decoder_of(g);
    const dec_moe_view v = dec_moe_stats_view(&d);
    tcu_memcpy_d2d(dst, v.stats, v.stats_bytes, g->s);
    tcu_memcpy_d2d((char *)dst + v.stats_bytes, v.offs, v.offs_bytes, g->s);
}

void gpu_model_moe_stats_add_staged(tsr_gpu_model *g, const void *staged, const int32_t *targets,
                                    int B, int T, float loss_scale, double *acc) {
    tsr_decoder d = decoder_of(g);
    const dec_moe_view v = dec_moe_stats_view(&d);
    dec_moe_stats_add_host(&d, staged, (const int32_t *)((const char *)staged + v.stats_bytes),
                           dec_moe_weight(targets, (size_t)B * (size_t)T, loss_scale), acc);
}

void gpu_model_moe_stats_add(tsr_gpu_model *g, double w, double *acc) {
    tsr_decoder d = decoder_of(g);
    dec_moe_stats_add(&d, w, acc);
}

void gpu_model_stage_losses(tsr_gpu_model *g, float *dst, int B, int T) {
    /* (context parallelism: this rank's T / N positions of each sequence) */
    tcu_memcpy_d2d(dst, g->a.losses, (size_t)B * (size_t)(g->ring ? T / g->ring->N : T) *
                                         sizeof(float), g->s);
}

void gpu_model_token_scores(tsr_gpu_model *g, const int32_t *targets, int B, int T, float *losses,
                            int32_t *greedy) {
    tsr_decoder d = decoder_of(g);
    dec_token_scores(&d, targets, B, T, losses, greedy);
}

void gpu_model_backward(tsr_gpu_model *g, const int32_t *tokens, int B, int T,
                        void (*ready)(void *ctx, int unit), void *ctx) {
    tsr_decoder d = decoder_of(g);
    dec_backward(&d, tokens, NULL, B, T, -1.0f, ready, ctx);
}

void gpu_model_backward_stage(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets,
                              int B, int T, float loss_scale) {
    tsr_decoder d = decoder_of(g);
    dec_backward(&d, tokens, targets, B, T, loss_scale, NULL, NULL);
}

void gpu_model_backward_weighted(tsr_gpu_model *g, const int32_t *tokens, const int32_t *targets,
                                 int B, int T, const float *dlosses, float moe_w) {
    tsr_decoder d = decoder_of(g);
    dec_backward_weighted(&d, tokens, targets, B, T, dlosses, moe_w);
}

int64_t gpu_model_generate(tsr_gpu_model *g, const gen_batch_opts *o, gen_seq *seqs, int n) {
    tsr_bf16 *full = NULL;
    if (!g->wbf) { /* zero3 / hsdp: every unit once, as a forward asks for them, into one copy */
        const tsr_model *m = g->m;
        full = tcu_malloc(m->n_params * sizeof *full, "the gathered weights of the rollouts");
        for (int u = 0; u <= m->L; u++) {
            const tsr_bf16 *wb[TSR_P_COUNT] = {0};
            g->src->get(g->src->ctx, u, 0, wb, NULL);
            for (int i = 0; i < TSR_P_COUNT; i++) {
                size_t len, off = model_unit_slice(m, (tsr_param_id)i, u, &len);
                if (off != SIZE_MAX && wb[i])
                    tcu_memcpy_d2d(full + off, wb[i], len * sizeof *full, g->s);
            }
        }
        g->wbf = full;
    }
    const tsr_decoder d = decoder_of(g);
    const int64_t tokens = gen_batch_run(&d, o, seqs, n);
    if (full) {
        tcu_sync(g->s);
        tcu_free(full);
        g->wbf = NULL;
    }
    return tokens;
}

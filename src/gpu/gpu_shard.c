/* gpu_shard.c — zero1 / zero3 / hsdp on the CUDA backend (gpu_shard.h). */
#include "gpu/gpu_shard.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Units' sizes without a plan (the plan bytes, --plan): unit u = its tensors' slices. */
static size_t unit_size(const tsr_model *m, int u) {
    size_t off[TSR_P_COUNT], len[TSR_P_COUNT], size = 0;
    int k = gpu_model_unit_slices(m, u, off, len);
    for (int i = 0; i < k; i++) size += len[i];
    return size;
}

size_t gpu_shard_bytes(const tsr_model *m, int zero1, int G, int frozen) {
    size_t n = 0, max_unit = 0, unit0 = (size_t)G * fsdp_piece_len(unit_size(m, 0), G);
    size_t max_piece = 0, f = sizeof(float), b = sizeof(tsr_bf16);
    for (int u = 0; u <= m->L + m->D; u++) { /* (MTP's layers: units L + 1 + d) */
        size_t P = fsdp_piece_len(unit_size(m, u), G);
        n += P;
        if (P > max_piece) max_piece = P;
        if ((u > 0 || zero1) && (size_t)G * P > max_unit) max_unit = (size_t)G * P;
    }
    if (frozen) /* the bf16 shard, the gathered root and two gathered layers */
        return n * b + unit0 * b + 2 * max_unit * b;
    size_t shard = n * (4 * f + b); /* master, grads, m, v; bf16 copy */
    if (zero1) return shard + gpu_model_state_bytes(m, GPU_STATE_NO_MASTER) + max_unit * (f + b);
    return shard + unit0 * (b + f) + 2 * max_unit * (b + f) + max_piece * f;
}

static void *dev_zeroed(size_t bytes, const char *what, tcu_stream s) {
    void *p = tcu_malloc(bytes ? bytes : 1, what);
    tcu_zero(p, bytes ? bytes : 1, s);
    return p;
}

/* ---- zero3 / hsdp: the model's source of units ---- */

static void gather_unit(gpu_shard *sh, int u, tsr_bf16 *dst, tcu_event done) {
    gpu_comm_all_gather(sh->group, sh->wbf + sh->at[u], dst, sh->f->units[u].piece,
                        sizeof(tsr_bf16));
    gpu_comm_mark(sh->group, done);
}

/* ---- zero3 / hsdp: the FP8 all-gather (gpu_shard_fp8_gather) ---- */

/* the part of [at, at + len) in [lo, hi): its length, its start in *a */
static size_t clip(size_t at, size_t len, size_t lo, size_t hi, size_t *a) {
    size_t b = at + len < hi ? at + len : hi;
    *a = at > lo ? at : lo;
    return b > *a ? b - *a : 0;
}

/* unit u's elements outside its E4M3 segments in rank r's piece, in order: counted and, with
 * copy, copied on cs (out = 0: from the rank's piece w into pack; 1: from pack into the
 * gathered unit w) */
static size_t rest_copy(const gpu_shard *sh, int u, int r, tsr_bf16 *w, tsr_bf16 *pack, int out,
                        int copy, tcu_stream cs) {
    const fsdp_unit *un = &sh->f->units[u];
    const size_t lo = (size_t)r * un->piece, e = sizeof(tsr_bf16);
    size_t n = 0, a;
    for (int k = 0; k < un->n_seg; k++) {
        size_t len = clip(un->seg[k].at, un->seg[k].len, lo, lo + un->piece, &a);
        if (!len || sh->fp8_seg[(size_t)u * TSR_P_COUNT + k]) continue;
        if (copy && out) tcu_memcpy_d2d(w + a, pack + n, len * e, cs);
        else if (copy) tcu_memcpy_d2d(pack + n, w + (a - lo), len * e, cs);
        n += len;
    }
    return n;
}

/* unit u gathered into slot k with its FP8 weights in E4M3 (gpu_shard.h): the shards' amax,
 * their maximum over the group, each shard cast with it, the codes and the rest gathered */
static void gather_unit_fp8(gpu_shard *sh, int u, int k) {
    const fsdp_unit *un = &sh->f->units[u];
    const size_t lo = (size_t)sh->f->grank * un->piece, P = un->piece;
    const unsigned char *on = sh->fp8_seg + (size_t)u * TSR_P_COUNT;
    tsr_bf16 *piece = sh->wbf + sh->at[u];
    float *amax = sh->slot_sc[k], *sinv = amax + 4 * TSR_P_COUNT;
    tcu_stream cs = gpu_comm_follow(sh->group);
    size_t a, len;
    tcu_zero(amax, 4 * (size_t)un->n_seg * sizeof(float), cs);
    for (int t = 0; t < un->n_seg; t++)
        if (on[t] && (len = clip(un->seg[t].at, un->seg[t].len, lo, lo + P, &a)))
            tcu_amax_bf16(amax + 4 * t, piece + (a - lo), len, cs);
    gpu_comm_allreduce_max(sh->group, amax, 4 * (size_t)un->n_seg);
    cs = gpu_comm_follow(sh->group);
    for (int t = 0; t < un->n_seg; t++) { /* (no part here: only the scale_inv, n = 0) */
        if (!on[t]) continue;
        size_t at = (len = clip(un->seg[t].at, un->seg[t].len, lo, lo + P, &a)) ? a - lo : 0;
        tcu_fp8_quantize(sh->q8 + at, sinv + 4 * t, piece + at, amax + 4 * t, len, TCU_FP8_E4M3,
                         cs);
    }
    rest_copy(sh, u, sh->f->grank, piece, sh->rest, 0, 1, cs);
    gpu_comm_all_gather(sh->group, sh->q8, sh->slot8[k], P, 1);
    if (sh->rest_n) {
        gpu_comm_all_gather(sh->group, sh->rest, sh->rest_all, sh->rest_n, sizeof(tsr_bf16));
        cs = gpu_comm_follow(sh->group);
        for (int r = 0; r < sh->f->G; r++)
            rest_copy(sh, u, r, sh->slot[k], sh->rest_all + (size_t)r * sh->rest_n, 1, 1, cs);
    }
    gpu_comm_mark(sh->group, sh->slot_ev[k]);
}

/* unit u's forward gather moves E4M3: the setting on, a layer unit the backward does not reuse
 * (1 .. L-2), with an FP8 weight */
static int unit_fp8(const gpu_shard *sh, int u) {
    if (!sh->fp8_on || u < 1 || u > sh->g->m->L - 2) return 0;
    for (int k = 0; k < sh->f->units[u].n_seg; k++)
        if (sh->fp8_seg[(size_t)u * TSR_P_COUNT + k]) return 1;
    return 0;
}

/* slot k holds unit u in the form asked for (E4M3 weights or all bf16) */
static int slot_is(const gpu_shard *sh, int k, int u, int fp8) {
    return sh->slot_unit[k] == u && sh->slot_fp8[k] == fp8;
}

static void gather_slot(gpu_shard *sh, int k, int u, int fp8) {
    sh->slot_unit[k] = u;
    sh->slot_fp8[k] = fp8;
    if (fp8) gather_unit_fp8(sh, u, k);
    else gather_unit(sh, u, sh->slot[k], sh->slot_ev[k]);
}

/* the model's FP8 GEMM asks for w's codes (gpu_param_source.fp8): a weight of a slot holding
 * an FP8 gather */
static int src_fp8(void *ctx, const void *w, const tsr_fp8 **qw, const float **sw_inv) {
    const gpu_shard *sh = ctx;
    const tsr_bf16 *p = w;
    for (int k = 0; k < 2; k++) {
        if (!sh->slot_fp8[k] || p < sh->slot[k] || p >= sh->slot[k] + sh->max_unit) continue;
        const int u = sh->slot_unit[k];
        const size_t at = (size_t)(p - sh->slot[k]);
        for (int j = 0; j < sh->f->units[u].n_seg; j++)
            if (sh->f->units[u].seg[j].at == at && sh->fp8_seg[(size_t)u * TSR_P_COUNT + j]) {
                *qw = sh->slot8[k] + at;
                *sw_inv = sh->slot_sc[k] + 4 * (TSR_P_COUNT + j);
                return 1;
            }
    }
    return 0;
}

static void src_get(void *ctx, int u, int backward, const tsr_bf16 **w, float **gr) {
    gpu_shard *sh = ctx;
    const fsdp_unit *un = &sh->f->units[u];
    const tsr_bf16 *base;
    float *gbase = NULL;
    if (u == 0) {
        if (!sh->root_valid) gather_unit(sh, 0, sh->root_w, sh->root_ev);
        sh->root_valid = 1;
        tcu_stream_wait_event(sh->s, sh->root_ev);
        base = sh->root_w;
        gbase = sh->root_g;
    } else {
        int next = backward ? u - 1 : u + 1; /* the unit the model asks for after this one */
        int f8 = !backward && unit_fp8(sh, u), nf8 = !backward && unit_fp8(sh, next);
        int k = slot_is(sh, 0, u, f8) ? 0 : slot_is(sh, 1, u, f8) ? 1 : -1;
        if (k < 0) { /* not prefetched: gather now, into the slot not holding the next unit */
            k = slot_is(sh, 0, next, nf8) ? 1 : 0;
            gather_slot(sh, k, u, f8);
        }
        tcu_stream_wait_event(sh->s, sh->slot_ev[k]);
        base = sh->slot[k];
        /* the next unit's gather runs while this one computes: the other slot's last user is
         * queued already, and the gather follows it on the device */
        int o = 1 - k;
        if (next >= 1 && next < sh->f->n_units && !slot_is(sh, o, next, nf8))
            gather_slot(sh, o, next, nf8);
        if (backward && !sh->frozen) { /* a gradient buffer whose last reduce-scatter ended */
            int j = sh->lg_next;
            sh->lg_next ^= 1;
            sh->lg_cur = j;
            tcu_stream_wait_event(sh->s, sh->lg_ev[j]);
            tcu_zero(sh->layer_g[j], (size_t)sh->f->G * un->piece * sizeof(float), sh->s);
            gbase = sh->layer_g[j];
        }
    }
    for (int k = 0; k < un->n_seg; k++) {
        w[un->seg[k].id] = base + un->seg[k].at;
        if (backward && gbase) gr[un->seg[k].id] = gbase + un->seg[k].at; /* (frozen: none) */
    }
}

/* Unit u's gradients (G pieces in src) reduce-scattered and added into the shard. */
static void scatter_add(gpu_shard *sh, int u, const float *src, tcu_event read) {
    size_t P = sh->f->units[u].piece;
    gpu_comm_reduce_scatter(sh->group, src, sh->piece, P);
    if (read) gpu_comm_mark(sh->group, read);
    tcu_add_f32(sh->grads + sh->at[u], sh->piece, P, gpu_comm_follow(sh->group));
}

static void src_put(void *ctx, int u) {
    gpu_shard *sh = ctx;
    if (sh->frozen) return;
    scatter_add(sh, u, sh->layer_g[sh->lg_cur], sh->lg_ev[sh->lg_cur]);
}

static void forget_gathers(gpu_shard *sh) {
    sh->root_valid = 0;
    sh->slot_unit[0] = sh->slot_unit[1] = -1;
    sh->slot_fp8[0] = sh->slot_fp8[1] = 0;
}

/* which segments of the layer units 1 .. L-2 gather in E4M3: the FP8 GEMM's weights whose codes
 * start 16-byte aligned (tcu_matmul_fp8; the others are cast after a bf16 gather, the same
 * bits); 0 when none */
static int fp8_mark(gpu_shard *sh) {
    const tsr_fsdp *f = sh->f;
    int any = 0;
    sh->fp8_seg = tsr_calloc((size_t)f->n_units * TSR_P_COUNT, 1);
    for (int u = 1; u <= sh->g->m->L - 2; u++)
        for (int k = 0; k < f->units[u].n_seg; k++) {
            const fsdp_seg *sg = &f->units[u].seg[k];
            int on = gpu_model_fp8_weight(sh->g, u - 1, sg->id) && sg->at % 16 == 0;
            sh->fp8_seg[(size_t)u * TSR_P_COUNT + k] = (unsigned char)on;
            any |= on;
        }
    return any;
}

/* the E4M3 slots, their scales, this rank's codes and the bf16 rest (the most any rank's piece of
 * an FP8 unit holds) */
static void fp8_alloc(gpu_shard *sh) {
    const tsr_fsdp *f = sh->f;
    size_t max_piece = 0;
    sh->fp8_on = 1; /* (unit_fp8 reads it) */
    for (int u = 1; u < f->n_units; u++) {
        if (!unit_fp8(sh, u)) continue;
        if (f->units[u].piece > max_piece) max_piece = f->units[u].piece;
        for (int r = 0; r < f->G; r++) {
            size_t n = rest_copy(sh, u, r, NULL, NULL, 0, 0, sh->s);
            if (n > sh->rest_n) sh->rest_n = n;
        }
    }
    for (int k = 0; k < 2; k++) {
        sh->slot8[k] = dev_zeroed(sh->max_unit, "zero3: gathered layer (E4M3 weights)", sh->s);
        sh->slot_sc[k] = dev_zeroed(8 * TSR_P_COUNT * sizeof(float), "zero3: FP8 scales", sh->s);
    }
    sh->q8 = dev_zeroed(max_piece, "zero3: this rank's E4M3 piece", sh->s);
    sh->rest = dev_zeroed(sh->rest_n * sizeof(tsr_bf16), "zero3: a piece's bf16 rest", sh->s);
    sh->rest_all = dev_zeroed((size_t)f->G * sh->rest_n * sizeof(tsr_bf16),
                              "zero3: the gathered bf16 rest", sh->s);
    tcu_sync(sh->s);
}

size_t gpu_shard_forward_gather_bytes(const gpu_shard *sh, int fp8) {
    const tsr_fsdp *f = sh->f;
    size_t bytes = 0, G = (size_t)f->G;
    for (int u = 1; u < f->n_units; u++)
        bytes += fp8 && sh->fp8_seg && unit_fp8(sh, u)
                     ? G * f->units[u].piece + G * sh->rest_n * sizeof(tsr_bf16)
                     : G * f->units[u].piece * sizeof(tsr_bf16);
    return bytes;
}

void gpu_shard_fp8_gather(gpu_shard *sh, int on) {
    if (sh->zero1) return;
    if (on && !sh->fp8_seg && fp8_mark(sh)) fp8_alloc(sh);
    sh->fp8_on = on && sh->slot8[0];
    sh->src.fp8 = src_fp8;
}

/* ---- setup ---- */

/* the mesh's shard group's communicator (world rank r is rank r % G of group r / G, fsdp.c)
 * and, with replicas, theirs (the ranks of the same r % G); an error names the sharding */
static int shard_open_comms(gpu_shard *sh, const gpu_train_ctx *c, tcu_stream s) {
    const tsr_fsdp *f = sh->f;
    char why[512] = "";
    sh->group = gpu_comm_open(mesh_group(c->mesh, TSR_MESH_SHARD), s, why, sizeof why);
    if (sh->group && f->R > 1)
        sh->replicas =
            gpu_comm_open(mesh_group(c->mesh, TSR_MESH_REPLICA), s, why, sizeof why);
    if (!sh->group || (f->R > 1 && !sh->replicas)) {
        if (c->dist->rank == 0)
            tsr_error("device = \"cuda\", parallel.sharding = %s: %s",
                      sh->zero1 ? "zero1" : f->R > 1 ? "hsdp" : "zero3", why);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* where each unit's piece and each of this rank's pieces start in the device shard (its size
 * sh->n), the largest gathered unit; returns the largest piece */
static size_t shard_layout(gpu_shard *sh) {
    const tsr_fsdp *f = sh->f;
    sh->at = tsr_malloc((size_t)f->n_units * sizeof(size_t));
    size_t max_piece = 0;
    for (int u = 0; u < f->n_units; u++) {
        size_t P = f->units[u].piece, whole = (size_t)f->G * P;
        sh->at[u] = sh->n;
        sh->n += P;
        if (P > max_piece) max_piece = P;
        if ((u > 0 || sh->zero1) && whole > sh->max_unit) sh->max_unit = whole;
    }
    /* this rank's pieces in the device shard: the unit's start plus the offset in its piece */
    int np = f->n_pieces[f->grank];
    sh->piece_at = tsr_malloc((size_t)(np ? np : 1) * sizeof(size_t));
    sh->segs = tsr_malloc((size_t)(np ? np : 1) * sizeof(tcu_adamw_seg));
    for (int k = 0, u = 0; k < np; k++) {
        const fsdp_piece *p = &f->pieces[f->grank][k];
        while (p->shard >= f->unit_at[u] + (size_t)f->units[u].counts[f->grank]) u++;
        sh->piece_at[k] = sh->at[u] + (p->shard - f->unit_at[u]);
    }
    return max_piece;
}

/* ZeRO-3 and HSDP (and a frozen base): the gathered root and the two layer slots, with their
 * gradients and the reduce-scattered piece where the weights train; the model reads its
 * parameters through them */
static void shard_gather_buffers(gpu_shard *sh, tsr_gpu_model *g, tcu_stream s, int trained,
                                 size_t max_piece) {
    const tsr_fsdp *f = sh->f;
    size_t fb = sizeof(float), bb = sizeof(tsr_bf16);
    size_t whole0 = (size_t)f->G * f->units[0].piece;
    sh->root_w = dev_zeroed(whole0 * bb, "zero3: gathered root weights (bf16)", s);
    if (trained) sh->root_g = dev_zeroed(whole0 * fb, "zero3: root gradients", s);
    for (int k = 0; k < 2; k++) {
        sh->slot[k] = dev_zeroed(sh->max_unit * bb, "zero3: gathered layer (bf16)", s);
        if (trained)
            sh->layer_g[k] = dev_zeroed(sh->max_unit * fb, "zero3: a layer's gradients", s);
        sh->slot_ev[k] = tcu_event_create();
        sh->lg_ev[k] = tcu_event_create();
    }
    if (trained) sh->piece = dev_zeroed(max_piece * fb, "zero3: reduce-scattered piece", s);
    sh->root_ev = tcu_event_create();
    sh->src = (gpu_param_source){sh, src_get, src_put, NULL}; /* (fp8: gpu_shard_fp8_gather) */
    g->src = &sh->src;
}

/* the trained shard: master weights, gradients, AdamW's moments, the bf16 copy; ZeRO-1's unit
 * buffers or ZeRO-3's gathers */
static void shard_alloc_trained(gpu_shard *sh, tsr_gpu_model *g, tcu_stream s, size_t max_piece) {
    size_t fb = sizeof(float), bb = sizeof(tsr_bf16);
    sh->params = dev_zeroed(sh->n * fb, "shard: master weights (fp32)", s);
    sh->grads = dev_zeroed(sh->n * fb, "shard: gradients (fp32)", s);
    sh->m = dev_zeroed(sh->n * fb, "shard: AdamW m (fp32)", s);
    sh->v = dev_zeroed(sh->n * fb, "shard: AdamW v (fp32)", s);
    sh->wbf = dev_zeroed(sh->n * bb, "shard: weights (bf16)", s);
    sh->acc = dev_zeroed(fb, "gradient norm", s);
    if (sh->zero1) {
        sh->pack = dev_zeroed(sh->max_unit * fb, "zero1: a unit's gradients", s);
        sh->packbf = dev_zeroed(sh->max_unit * bb, "zero1: a unit's weights", s);
    } else {
        shard_gather_buffers(sh, g, s, 1, max_piece);
    }
}

int gpu_shard_init(gpu_shard *sh, gpu_train_ctx *c, tsr_gpu_model *g, tcu_stream s) {
    memset(sh, 0, sizeof *sh);
    sh->zero1 = c->mode == GPU_SHARD_ZERO1;
    sh->frozen = c->lora != NULL;
    if (sh->frozen && sh->zero1)
        tsr_die(TSR_EXIT_INTERNAL, "gpu_shard_init: LoRA's zero1 runs as ddp (train_gpu.c fill)");
    sh->g = g;
    sh->s = s;
    if (sh->zero1) fsdp_plan(&sh->own, c->model, c->mesh); /* (the mesh's shard: the world) */
    sh->f = sh->zero1 ? &sh->own : c->fsdp;
    int rc = shard_open_comms(sh, c, s);
    if (rc) return rc;
    size_t max_piece = shard_layout(sh);
    size_t host_n = sh->f->shard_n ? sh->f->shard_n : 1;
    if (sh->frozen) { /* the frozen base: its bf16 shard and the gathers, no optimizer */
        sh->wbf = dev_zeroed(sh->n * sizeof(tsr_bf16), "shard: frozen base weights (bf16)", s);
        shard_gather_buffers(sh, g, s, 0, max_piece);
    } else {
        shard_alloc_trained(sh, g, s, max_piece);
    }
    forget_gathers(sh);
    if (sh->frozen) sh->host_bf16 = tsr_malloc(host_n * sizeof(tsr_bf16));
    else sh->host = tsr_malloc(host_n * sizeof(float));
    tcu_sync(s);
    return 0;
}

void gpu_shard_free(gpu_shard *sh) {
    if (!sh->g) return;
    tcu_sync(sh->s);
    gpu_comm_close(sh->group);
    gpu_comm_close(sh->replicas);
    void *bufs[] = {sh->params, sh->grads, sh->m, sh->v, sh->wbf, sh->acc, sh->pack, sh->packbf,
                    sh->root_w, sh->root_g, sh->slot[0], sh->slot[1], sh->layer_g[0],
                    sh->layer_g[1], sh->piece, sh->slot8[0], sh->slot8[1], sh->slot_sc[0],
                    sh->slot_sc[1], sh->q8, sh->rest, sh->rest_all};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) tcu_free(bufs[i]);
    tcu_event *evs[] = {&sh->root_ev, &sh->slot_ev[0], &sh->slot_ev[1], &sh->lg_ev[0],
                        &sh->lg_ev[1]};
    for (size_t i = 0; !sh->zero1 && i < sizeof evs / sizeof *evs; i++) tcu_event_destroy(*evs[i]);
    if (sh->zero1) fsdp_free(&sh->own);
    free(sh->at), free(sh->piece_at), free(sh->segs), free(sh->host), free(sh->host_bf16);
    free(sh->fp8_seg);
    memset(sh, 0, sizeof *sh);
}

/* ---- a step ---- */

void gpu_shard_zero_grads(gpu_shard *sh) {
    if (sh->zero1) { /* the model's flat gradients accumulate; the shard is written whole */
        tcu_zero(sh->g->grads, sh->g->m->n_params * sizeof(float), sh->s);
        return;
    }
    tcu_zero(sh->grads, sh->n * sizeof(float), sh->s);
    tcu_zero(sh->root_g, (size_t)sh->f->G * sh->f->units[0].piece * sizeof(float), sh->s);
}

void gpu_shard_zero1_ready(void *ctx, int u) {
    gpu_shard *sh = ctx;
    const fsdp_unit *un = &sh->f->units[u];
    size_t whole = (size_t)sh->f->G * un->piece;
    tcu_stream cs = gpu_comm_follow(sh->group);
    for (int k = 0; k < un->n_seg; k++)
        tcu_memcpy_d2d(sh->pack + un->seg[k].at, sh->g->grads + un->seg[k].flat,
                       un->seg[k].len * sizeof(float), cs);
    tcu_zero(sh->pack + un->size, (whole - un->size) * sizeof(float), cs);
    gpu_comm_reduce_scatter(sh->group, sh->pack, sh->grads + sh->at[u], un->piece);
}

void gpu_shard_finish_grads(gpu_shard *sh) {
    if (!sh->zero1) scatter_add(sh, 0, sh->root_g, NULL);
    if (sh->replicas) { /* hsdp: the groups' shards summed over the replicas */
        gpu_comm_wait(sh->group);
        size_t off = 0;
        gpu_comm_allreduce(sh->replicas, sh->grads, &off, &sh->n, 1);
    }
}

double gpu_shard_grad_sumsq(gpu_shard *sh) {
    gpu_comm_wait(sh->group);
    if (sh->replicas) gpu_comm_wait(sh->replicas);
    float sq = 0.0f;
    tcu_zero(sh->acc, sizeof(float), sh->s);
    tcu_sumsq(sh->acc, sh->grads, sh->n, sh->s); /* the padding is zero */
    tcu_memcpy_d2h(&sq, sh->acc, sizeof sq, sh->s);
    double d = sq;
    dist_group_allreduce_sum_f64(sh->f->group, &d, 1); /* the replicas hold equal shards */
    return d;
}

/* zero1: unit u's bf16 piece gathered and unpacked into the model's flat weights (queued) */
static void zero1_gather_unit(gpu_shard *sh, int u) {
    const fsdp_unit *un = &sh->f->units[u];
    gpu_comm_all_gather(sh->group, sh->wbf + sh->at[u], sh->packbf, un->piece, sizeof(tsr_bf16));
    tcu_stream cs = gpu_comm_follow(sh->group);
    for (int k = 0; k < un->n_seg; k++)
        tcu_memcpy_d2d(sh->g->wbf + un->seg[k].flat, sh->packbf + un->seg[k].at,
                       un->seg[k].len * sizeof(tsr_bf16), cs);
}

/* zero1: every unit's. */
static void zero1_gather_weights(gpu_shard *sh) {
    for (int u = 0; u < sh->f->n_units; u++) zero1_gather_unit(sh, u);
    gpu_comm_wait(sh->group);
}

/* whether unit u holds an element of the flat range [flat, flat + n) */
static int unit_holds(const fsdp_unit *un, size_t flat, size_t n) {
    for (int k = 0; k < un->n_seg; k++)
        if (un->seg[k].flat < flat + n && flat < un->seg[k].flat + un->seg[k].len) return 1;
    return 0;
}

void gpu_shard_refresh(gpu_shard *sh, size_t flat, size_t n) {
    if (!sh->zero1) {
        forget_gathers(sh);
        return;
    }
    for (int u = 0; u < sh->f->n_units; u++)
        if (unit_holds(&sh->f->units[u], flat, n)) zero1_gather_unit(sh, u);
    gpu_comm_wait(sh->group);
}

void gpu_shard_update(gpu_shard *sh, const gpu_train_ctx *c, gpu_muon *mu, double lr,
                      float gscale, int step) {
    const tsr_fsdp *f = sh->f;
    const tsr_optim_config *o = c->optim;
    int n = 0;
    for (int k = 0; k < f->n_pieces[f->grank]; k++) { /* one launch per 64 (issue 25, item 5) */
        const fsdp_piece *p = &f->pieces[f->grank][k];
        if (mu->on && muon_plan_tensor(p->id)) continue; /* (gpu_muon_shard) */
        sh->segs[n++] = (tcu_adamw_seg){sh->piece_at[k], p->len, c->decay[p->id]};
    }
    tcu_adamw_update_segments(sh->segs, n, sh->params, sh->wbf, sh->grads, sh->m, sh->v,
                              (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps, gscale,
                              step, sh->s);
    if (mu->on) gpu_muon_shard(mu, sh->params, sh->wbf, sh->grads, sh->m, muon_lr(o, lr), gscale);
    if (sh->zero1) zero1_gather_weights(sh);
    else forget_gathers(sh);
}

/* ---- the host mirror ---- */

/* device shard (padded pieces) <-> host shard of the plan (unpadded) */
static void shard_d2h(const gpu_shard *sh, float *host, const float *dev) {
    const tsr_fsdp *f = sh->f;
    for (int u = 0; u < f->n_units; u++)
        tcu_memcpy_d2h(host + f->unit_at[u], dev + sh->at[u],
                       (size_t)f->units[u].counts[f->grank] * sizeof(float), sh->s);
}
static void shard_h2d(const gpu_shard *sh, float *dev, const float *host) {
    const tsr_fsdp *f = sh->f;
    for (int u = 0; u < f->n_units; u++)
        tcu_memcpy_h2d(dev + sh->at[u], host + f->unit_at[u],
                       (size_t)f->units[u].counts[f->grank] * sizeof(float), sh->s);
    tcu_sync(sh->s);
}

void gpu_shard_pull(gpu_shard *sh, gpu_train_ctx *c, int with_optim) {
    tcu_sync(sh->s);
    if (sh->frozen) return; /* the base never changes: the host shard is current */
    if (!sh->zero1) {
        shard_d2h(sh, c->fsdp->params, sh->params);
        if (with_optim) shard_d2h(sh, c->m, sh->m), shard_d2h(sh, c->v, sh->v);
        return;
    }
    /* zero1: the shard to this rank's part of the flat layout (the trainer's partition), then
     * the full weights on every rank as the CPU's zero1 keeps them */
    tsr_fsdp *f = &sh->own;
    shard_d2h(sh, sh->host, sh->params);
    fsdp_shard_to_part(f, sh->host, c->model->params + c->part_displs[c->dist->rank]);
    dist_allgatherv_f32(c->model->params, c->part_counts, c->part_displs);
    if (!with_optim) return;
    shard_d2h(sh, sh->host, sh->m);
    fsdp_shard_to_part(f, sh->host, c->m);
    shard_d2h(sh, sh->host, sh->v);
    fsdp_shard_to_part(f, sh->host, c->v);
}

void gpu_shard_push(gpu_shard *sh, gpu_train_ctx *c, int with_optim) {
    tcu_sync(sh->s);
    const tsr_fsdp *f = sh->f;
    if (sh->frozen) { /* the host shard rounded on the host, unit by unit into the padded pieces */
        gpu_model_round_bf16(sh->host_bf16, c->fsdp->params, f->shard_n);
        for (int u = 0; u < f->n_units; u++)
            tcu_memcpy_h2d(sh->wbf + sh->at[u], sh->host_bf16 + f->unit_at[u],
                           (size_t)f->units[u].counts[f->grank] * sizeof(tsr_bf16), sh->s);
        tcu_sync(sh->s);
        forget_gathers(sh);
        return;
    }
    if (sh->zero1) { /* this rank's pieces of the full weights */
        const fsdp_piece *p = f->pieces[f->grank];
        for (int k = 0; k < f->n_pieces[f->grank]; k++)
            memcpy(sh->host + p[k].shard, c->model->params + p[k].flat, p[k].len * sizeof(float));
    }
    shard_h2d(sh, sh->params, sh->zero1 ? sh->host : c->fsdp->params);
    tcu_f32_to_bf16(sh->wbf, sh->params, sh->n, sh->s);
    if (with_optim && sh->zero1) {
        fsdp_part_to_shard(&sh->own, c->m, sh->host);
        shard_h2d(sh, sh->m, sh->host);
        fsdp_part_to_shard(&sh->own, c->v, sh->host);
        shard_h2d(sh, sh->v, sh->host);
    } else if (with_optim) {
        shard_h2d(sh, sh->m, c->m);
        shard_h2d(sh, sh->v, c->v);
    }
    if (sh->zero1) zero1_gather_weights(sh);
    else forget_gathers(sh);
    tcu_sync(sh->s);
}

/* fsdp.c — ZeRO-3 / HSDP: units, shards, gathers with prefetch, gradient reduce-scatter, and the
 * checkpoint layout exchange (fsdp.h, docs/sharding.md). */
#include "model/fsdp.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* unit 0: the tensors that are not per layer; unit l+1: layer l's slices of the others; unit
 * L+1+d: multi-token prediction's depth d's layer (model_unit_slice) */
static void build_unit(const tsr_model *m, int u, fsdp_unit *un) {
    memset(un, 0, sizeof *un);
    for (int i = 0; i < TSR_P_COUNT; i++) {
        size_t len, off = model_unit_slice(m, (tsr_param_id)i, u, &len);
        if (off == SIZE_MAX) continue;
        un->seg[un->n_seg++] = (fsdp_seg){i, off, un->size, len};
        un->size += len;
    }
}

size_t fsdp_piece_len(size_t size, int G) {
    size_t P = (size + (size_t)G - 1) / (size_t)G;
    return (P + 15) / 16 * 16;
}

static void plan_units(const tsr_model *m, int G, fsdp_unit *units) {
    for (int u = 0; u <= m->L + m->D; u++) {
        build_unit(m, u, &units[u]);
        units[u].counts = tsr_malloc((size_t)G * sizeof(int));
        units[u].displs = tsr_malloc((size_t)G * sizeof(int));
        size_t size = units[u].size, P = fsdp_piece_len(size, G);
        units[u].piece = P;
        for (int r = 0; r < G; r++) {
            size_t lo = P * (size_t)r < size ? P * (size_t)r : size;
            size_t hi = lo + P < size ? lo + P : size;
            units[u].displs[r] = (int)lo;
            units[u].counts[r] = (int)(hi - lo);
        }
    }
}

void fsdp_plan_bytes(const tsr_model *m, int G, int frozen, double *weights, double *grads,
                     double *optim, double *comm) {
    size_t root = 0, layer = 0, total = 0;
    fsdp_unit un;
    for (int u = 0; u <= m->L + m->D; u++) {
        build_unit(m, u, &un);
        total += un.size;
        if (u == 0) root = un.size;
        else if (un.size > layer) layer = un.size;
    }
    double f = sizeof(float), shard = (double)((total + (size_t)G - 1) / (size_t)G) * f;
    double piece = (double)fsdp_piece_len(root > layer ? root : layer, G) * f;
    *weights = *grads = shard;
    *optim = 2 * shard;
    *comm = (double)(2 * root + 3 * layer) * f + piece;
    if (frozen) *grads = *optim = 0, *comm = (double)(root + 2 * layer) * f;
}

/* Rank r's shard as flat runs, in shard order. */
static int list_pieces(const tsr_fsdp *f, int r, fsdp_piece *out) {
    int n = 0;
    size_t s = 0;
    for (int u = 0; u < f->n_units; u++) {
        const fsdp_unit *un = &f->units[u];
        size_t a = (size_t)un->displs[r], b = a + (size_t)un->counts[r];
        for (int k = 0; k < un->n_seg; k++) {
            const fsdp_seg *g = &un->seg[k];
            size_t x0 = a > g->at ? a : g->at, x1 = b < g->at + g->len ? b : g->at + g->len;
            if (x0 < x1 && out) out[n] = (fsdp_piece){g->id, g->flat + (x0 - g->at), s + (x0 - a), x1 - x0};
            if (x0 < x1) n++;
        }
        s += b - a;
    }
    return n;
}

static void *grab(tsr_fsdp *f, size_t n) {
    float *p = f->ops->alloc((n ? n : 1) * sizeof(float));
    f->ops->zero(p, (n ? n : 1) * sizeof(float));
    return p;
}

static void src_get(void *ctx, int u, int backward, float **w, float **g);
static void src_put(void *ctx, int u, int backward);

void fsdp_plan(tsr_fsdp *f, tsr_model *m, const tsr_mesh *mesh) {
    const tsr_mesh_group *shard = mesh_group(mesh, TSR_MESH_SHARD);
    const tsr_mesh_group *replica = mesh_group(mesh, TSR_MESH_REPLICA);
    if (!shard->on || !shard->cpu)
        tsr_die(TSR_EXIT_INTERNAL, "fsdp_plan: the mesh has no sharding group (mesh_build)");
    fsdp_layout(f, m, shard->size, shard->rank);
    f->R = replica->size;
    f->gindex = replica->rank;
    f->group = shard->cpu;
    f->replicas = replica->cpu;
}

void fsdp_layout(tsr_fsdp *f, const tsr_model *m, int G, int grank) {
    memset(f, 0, sizeof *f);
    f->m = (tsr_model *)m; /* (the layout never writes it: fsdp_init's source does) */
    f->ops = m->ops;
    f->G = G;
    f->R = 1;
    f->grank = grank;
    f->n_units = m->L + 1 + m->D;
    f->units = tsr_calloc((size_t)f->n_units, sizeof *f->units);
    plan_units(m, G, f->units);
    f->unit_at = tsr_malloc((size_t)f->n_units * sizeof(size_t));
    for (int u = 0; u < f->n_units; u++) {
        f->unit_at[u] = f->shard_n;
        f->shard_n += (size_t)f->units[u].counts[f->grank];
        if (u > 0 && f->units[u].size > f->max_layer) f->max_layer = f->units[u].size;
    }
    f->n_pieces = tsr_malloc((size_t)G * sizeof(int));
    f->pieces = tsr_malloc((size_t)G * sizeof(fsdp_piece *));
    for (int r = 0; r < G; r++) {
        f->n_pieces[r] = list_pieces(f, r, NULL);
        f->pieces[r] = tsr_malloc((size_t)(f->n_pieces[r] ? f->n_pieces[r] : 1) * sizeof(fsdp_piece));
        list_pieces(f, r, f->pieces[r]);
    }
    size_t n = m->n_params;
    f->part_counts = tsr_malloc((size_t)G * sizeof(size_t));
    f->part_displs = tsr_malloc((size_t)G * sizeof(size_t));
    for (size_t r = 0; r < (size_t)G; r++) { /* the rule of the trainer's flat partition */
        size_t lo = n * r / (size_t)G / 16 * 16;
        size_t hi = r + 1 == (size_t)G ? n : n * (r + 1) / (size_t)G / 16 * 16;
        f->part_displs[r] = lo;
        f->part_counts[r] = hi - lo;
    }
}

void fsdp_init(tsr_fsdp *f, tsr_model *m, const tsr_mesh *mesh, int frozen) {
    fsdp_plan(f, m, mesh);
    f->frozen = frozen;
    f->params = grab(f, f->shard_n);
    f->root_w = grab(f, f->units[0].size);
    f->slot[0] = grab(f, f->max_layer);
    f->slot[1] = grab(f, f->max_layer);
    f->slot_unit[0] = f->slot_unit[1] = -1;
    f->src = (tsr_param_source){f, src_get, src_put};
    m->src = &f->src;
    if (frozen) return;
    f->grads = grab(f, f->shard_n);
    f->root_g = grab(f, f->units[0].size);
    f->layer_g = grab(f, f->max_layer);
    size_t most = f->units[0].counts[f->grank];
    for (int u = 1; u < f->n_units; u++)
        if ((size_t)f->units[u].counts[f->grank] > most) most = (size_t)f->units[u].counts[f->grank];
    f->piece_buf = grab(f, most);
}

void fsdp_params_changed(tsr_fsdp *f) {
    for (int k = 0; k < 2; k++) {
        dist_wait(f->slot_req[k]);
        f->slot_req[k] = NULL;
        f->slot_unit[k] = -1;
    }
    f->root_valid = 0;
}

void fsdp_free(tsr_fsdp *f) {
    if (!f->units) return;
    fsdp_params_changed(f);
    float *bufs[] = {f->params, f->grads, f->root_w, f->root_g, f->slot[0], f->slot[1],
                     f->layer_g, f->piece_buf};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) f->ops->free(bufs[i]);
    free(f->xbuf);
    for (int u = 0; u < f->n_units; u++) free(f->units[u].counts), free(f->units[u].displs);
    for (int r = 0; r < f->G; r++) free(f->pieces[r]);
    free(f->pieces), free(f->n_pieces), free(f->units), free(f->unit_at);
    free(f->part_counts), free(f->part_displs);
    if (f->m->src == &f->src) f->m->src = NULL;
    memset(f, 0, sizeof *f);
}

void fsdp_init_weights(tsr_fsdp *f, uint64_t seed) {
    const fsdp_piece *p = f->pieces[f->grank];
    for (int k = 0; k < f->n_pieces[f->grank]; k++)
        model_init_weights_range(f->m, seed, p[k].flat, p[k].flat + p[k].len,
                                 f->params + p[k].shard);
    fsdp_params_changed(f);
}

static void gather_unit(tsr_fsdp *f, int u, float *dst) {
    const fsdp_unit *un = &f->units[u];
    dist_group_allgatherv_f32(f->group, f->params + f->unit_at[u], dst, un->counts, un->displs);
    f->sent_bytes += (uint64_t)un->counts[f->grank] * sizeof(float);
}

void fsdp_zero_grads(tsr_fsdp *f) {
    f->ops->zero(f->grads, f->shard_n * sizeof(float));
    f->ops->zero(f->root_g, f->units[0].size * sizeof(float));
}

/* grads[unit u's piece] += this rank's piece of the group's sum of g (the unit's gradients) */
static void scatter_unit(tsr_fsdp *f, int u, const float *g) {
    const fsdp_unit *un = &f->units[u];
    size_t n = (size_t)un->counts[f->grank];
    dist_group_reduce_scatter_f32(f->group, g, f->piece_buf, un->counts);
    f->sent_bytes += (uint64_t)un->size * sizeof(float);
    float *dst = f->grads + f->unit_at[u];
    for (size_t i = 0; i < n; i++) dst[i] += f->piece_buf[i];
}

void fsdp_finish_grads(tsr_fsdp *f) {
    scatter_unit(f, 0, f->root_g);
    if (f->R > 1) {
        dist_group_allreduce_sum_f32(f->replicas, f->grads, f->shard_n);
        f->sent_bytes += (uint64_t)f->shard_n * sizeof(float);
    }
}

/* The slot holding unit u (its gather completed), or -1. */
static int find_slot(tsr_fsdp *f, int u) {
    for (int k = 0; k < 2; k++) {
        if (f->slot_unit[k] != u) continue;
        dist_wait(f->slot_req[k]);
        f->slot_req[k] = NULL;
        return k;
    }
    return -1;
}

static void src_get(void *ctx, int u, int backward, float **w, float **g) {
    tsr_fsdp *f = ctx;
    const fsdp_unit *un = &f->units[u];
    float *base, *gbase = NULL;
    if (u == 0) {
        if (!f->root_valid) gather_unit(f, 0, f->root_w);
        f->root_valid = 1;
        base = f->root_w;
        gbase = f->root_g; /* accumulates over the step's microbatches (NULL: frozen) */
    } else {
        int next = backward ? u - 1 : u + 1; /* the unit the model asks for after this one */
        int k = find_slot(f, u);
        if (k < 0) { /* not prefetched: gather now, into the slot not holding the next unit */
            k = f->slot_unit[0] == next ? 1 : 0;
            dist_wait(f->slot_req[k]);
            f->slot_req[k] = NULL;
            f->slot_unit[k] = u;
            gather_unit(f, u, f->slot[k]);
        }
        base = f->slot[k];
        /* prefetch the next unit into the other slot, overlapping this one's compute */
        int o = 1 - k;
        if (next >= 1 && next < f->n_units && f->slot_unit[o] != next) {
            dist_wait(f->slot_req[o]);
            f->slot_unit[o] = next;
            const fsdp_unit *nu = &f->units[next];
            f->slot_req[o] = dist_group_iallgatherv_f32(f->group, f->params + f->unit_at[next],
                                                        f->slot[o], nu->counts, nu->displs);
            f->sent_bytes += (uint64_t)nu->counts[f->grank] * sizeof(float);
        }
        if (backward && !f->frozen) {
            f->ops->zero(f->layer_g, un->size * sizeof(float));
            gbase = f->layer_g;
        }
    }
    for (int k = 0; k < un->n_seg; k++) {
        w[un->seg[k].id] = base + un->seg[k].at;
        if (backward && gbase) g[un->seg[k].id] = gbase + un->seg[k].at;
    }
}

static void src_put(void *ctx, int u, int backward) {
    tsr_fsdp *f = ctx;
    if (u == 0 || !backward || f->frozen) return;
    const fsdp_unit *un = &f->units[u]; /* the layer's gradients are complete */
    if (f->tap) f->tap(f->tap_ctx, f->layer_g, un->size);
    if (!f->tap_only) scatter_unit(f, u, f->layer_g);
}

/* The flat range [*a, *b) of piece p inside the part [plo, phi); 0 when they do not meet */
static int clip(const fsdp_piece *p, size_t plo, size_t phi, size_t *a, size_t *b) {
    *a = p->flat > plo ? p->flat : plo;
    *b = p->flat + p->len < phi ? p->flat + p->len : phi;
    return *a < *b;
}

/* Walks shard owner r's pieces inside part owner q's part of the flat layout, in shard order (a
 * packed stream), and returns how many of the stream's floats lie in [skip, skip + lim); with
 * buf, copies those to buf (to_buf) or from it, packed, the other side being data: r's shard
 * (data_is_shard) or q's part (read only when to_buf). */
static size_t walk(const tsr_fsdp *f, int r, int q, size_t skip, size_t lim, float *buf,
                   float *data, int data_is_shard, int to_buf) {
    size_t plo = f->part_displs[q], phi = plo + f->part_counts[q], at = 0, n = 0;
    const size_t end = lim > SIZE_MAX - skip ? SIZE_MAX : skip + lim;
    for (int k = 0; k < f->n_pieces[r] && at < end; k++) {
        const fsdp_piece *p = &f->pieces[r][k];
        size_t a, b;
        if (!clip(p, plo, phi, &a, &b)) continue;
        size_t s0 = at > skip ? at : skip, s1 = at + (b - a) < end ? at + (b - a) : end;
        if (s0 < s1 && buf) {
            size_t x = a + (s0 - at); /* the flat offset of the stream's float s0 */
            float *d = data_is_shard ? data + p->shard + (x - p->flat) : data + (x - plo);
            if (to_buf) memcpy(buf + n, d, (s1 - s0) * sizeof(float));
            else memcpy(d, buf + n, (s1 - s0) * sizeof(float));
        }
        n += s0 < s1 ? s1 - s0 : 0;
        at += b - a;
    }
    return n;
}

/* This rank's own pieces of its own part, copied straight between its shard and its part */
static void copy_own(const tsr_fsdp *f, int to_part, const float *src, float *dst) {
    const int me = f->grank;
    size_t plo = f->part_displs[me], phi = plo + f->part_counts[me];
    for (int k = 0; k < f->n_pieces[me]; k++) {
        const fsdp_piece *p = &f->pieces[me][k];
        size_t a, b;
        if (!clip(p, plo, phi, &a, &b)) continue;
        size_t s = p->shard + (a - p->flat), o = a - plo;
        memmove(to_part ? dst + o : dst + s, to_part ? src + s : src + o, (b - a) * sizeof(float));
    }
}

/* FSDP_XCHUNK, or TSR_FSDP_XCHUNK's floats (a test switch: small rounds; docs/sharding.md) */
static size_t xchunk(void) {
    const char *e = getenv("TSR_FSDP_XCHUNK");
    char *end;
    unsigned long long v = e ? strtoull(e, &end, 10) : 0;
    return e && *e && !*end && v >= 16 && v <= ((size_t)1 << 32) ? (size_t)v : FSDP_XCHUNK;
}

size_t fsdp_exchange_floats(size_t n_params, int G) {
    if (G <= 1) return 0;
    size_t per_peer = xchunk() / (size_t)(G - 1), part = n_params / (size_t)G + 16;
    per_peer = per_peer < 16 ? 16 : per_peer;
    return (size_t)(G - 1) * (per_peer < part ? per_peer : part);
}

/* The exchange's rounds: enough for the longest stream between two ranks, per_peer floats a
 * round (the same on every rank: every rank knows every rank's pieces; found at the first call) */
static size_t exchange_rounds(tsr_fsdp *f, size_t per_peer) {
    for (int r = 0; r < f->G && !f->xmost_known; r++)
        for (int q = 0; q < f->G; q++) {
            size_t n = r == q ? 0 : walk(f, r, q, 0, SIZE_MAX, NULL, NULL, 0, 0);
            f->xmost = n > f->xmost ? n : f->xmost;
        }
    f->xmost_known = 1;
    return (f->xmost + per_peer - 1) / per_peer;
}

/* One round of the exchange: floats [k * c, (k + 1) * c) of each stream to and from each peer
 * through the kept buffers (peer x's region at its index among the peers) */
static void exchange_round(tsr_fsdp *f, int to_part, const float *src, float *dst, size_t k,
                           size_t c, size_t *cnt) {
    const int G = f->G, me = f->grank;
    size_t *sc = cnt, *sd = cnt + G, *rc = cnt + 2 * G, *rd = cnt + 3 * G;
    float *sbuf = f->xbuf, *rbuf = f->xbuf + (size_t)(G - 1) * c, *from = (float *)src;
    for (int x = 0; x < G; x++) { /* sending to x, receiving from x */
        sd[x] = rd[x] = (size_t)(x < me ? x : x > me ? x - 1 : 0) * c;
        sc[x] = rc[x] = 0;
        if (x == me) continue;
        sc[x] = to_part ? walk(f, me, x, k * c, c, sbuf + sd[x], from, 1, 1)  /* my shard's runs in x's part */
                        : walk(f, x, me, k * c, c, sbuf + sd[x], from, 0, 1); /* my part's runs of x's shard */
        rc[x] = to_part ? walk(f, x, me, k * c, c, NULL, NULL, 0, 0) : walk(f, me, x, k * c, c, NULL, NULL, 0, 0);
    }
    dist_group_alltoallv(f->group, sbuf, sc, sd, rbuf, rc, rd, sizeof(float));
    for (int x = 0; x < G; x++) {
        if (x == me) continue;
        if (to_part) walk(f, x, me, k * c, c, rbuf + rd[x], dst, 0, 0);
        else walk(f, me, x, k * c, c, rbuf + rd[x], dst, 1, 0);
    }
}

/* Moves floats between shards and parts within the group. to_part: from each rank's shard to the
 * ranks' parts, else back. Both sides walk the shard owner's pieces in shard order, so the packing
 * order needs no message of its own. The rank's own pieces are copied directly; the peers' go in
 * rounds through send and receive buffers of fsdp_exchange_floats each, allocated at the first
 * call and kept (a fresh page costs a fault: the zero3 snapshot blocked 7-12 s a save for
 * gpt2-124m when each call allocated the whole part twice, 2026-11-27). */
static void exchange(tsr_fsdp *f, int to_part, const float *src, float *dst) {
    const int G = f->G;
    copy_own(f, to_part, src, dst);
    if (G == 1) return;
    const size_t per_dir = fsdp_exchange_floats(f->m->n_params, G), c = per_dir / (size_t)(G - 1);
    if (!f->xbuf) f->xbuf = tsr_malloc(2 * per_dir * sizeof(float));
    size_t *cnt = tsr_malloc(4 * (size_t)G * sizeof(size_t)), rounds = exchange_rounds(f, c);
    for (size_t k = 0; k < rounds; k++) exchange_round(f, to_part, src, dst, k, c, cnt);
    free(cnt);
}

/* The part's floats no tensor covers (the flat layout's padding) set to zero: every unit's
 * segments together cover the rest */
static int by_flat(const void *a, const void *b) {
    size_t x = ((const fsdp_seg *)a)->flat, y = ((const fsdp_seg *)b)->flat;
    return x < y ? -1 : x > y;
}

static void zero_gaps(const tsr_fsdp *f, float *part) {
    size_t plo = f->part_displs[f->grank], phi = plo + f->part_counts[f->grank], n = 0, at = plo;
    fsdp_seg *s = tsr_malloc((size_t)f->n_units * TSR_P_COUNT * sizeof *s);
    for (int u = 0; u < f->n_units; u++)
        for (int k = 0; k < f->units[u].n_seg; k++) s[n++] = f->units[u].seg[k];
    qsort(s, n, sizeof *s, by_flat);
    for (size_t i = 0; i <= n && at < phi; i++) {
        size_t lo = i < n ? s[i].flat : phi, hi = i < n ? s[i].flat + s[i].len : phi;
        if (lo > at) memset(part + (at - plo), 0, ((lo < phi ? lo : phi) - at) * sizeof(float));
        at = hi > at ? hi : at;
    }
    free(s);
}

void fsdp_shard_to_part(tsr_fsdp *f, const float *shard, float *part) {
    zero_gaps(f, part); /* padding between tensors */
    exchange(f, 1, shard, part);
}

void fsdp_part_to_shard(tsr_fsdp *f, const float *part, float *shard) { exchange(f, 0, part, shard); }

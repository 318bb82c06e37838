/* model_tp_io.c — a split model's (or a pipeline rank's part's, model_pp.h) state to and from
 * the global layout a checkpoint holds (model_tp.h tp_io): every rank's part of the global flat
 * layout filled from the ranks that
 * hold its elements, and back, by all-to-alls over the world whose pieces each side enumerates
 * from the runs alone.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/model_pp.h"
#include "model/model_tp.h"

/* f(ctx, l, g, n): split flat elements [l, l + n) are global flat elements [g, g + n) */
typedef void (*piece_fn)(void *ctx, size_t l, size_t g, size_t n);

/* the blocks k of a run of count blocks, starting at b0 + k stride and len long, that meet
 * [lo, hi): *k0 .. *k1 inclusive; 0 when none */
static int blocks_within(size_t b0, size_t stride, size_t len, size_t count, size_t lo, size_t hi,
                         size_t *k0, size_t *k1) {
    if (b0 >= hi || count == 0 || lo >= hi) return 0;
    *k0 = b0 + len > lo ? 0 : (lo - b0 - len) / stride + 1;
    *k1 = (hi - 1 - b0) / stride;
    if (*k1 >= count) *k1 = count - 1;
    return *k0 <= *k1;
}

/* one run's pieces within the held window [hlo, hhi) and the global window [glo, ghi) */
static void run_pieces(const tp_run *r, size_t lb, size_t gb, size_t hlo, size_t hhi, size_t glo,
                       size_t ghi, piece_fn f, void *ctx) {
    size_t a0, a1, b0, b1;
    if (!blocks_within(gb + r->global, r->gstride, r->len, r->count, glo, ghi, &a0, &a1) ||
        !blocks_within(lb + r->local, r->lstride, r->len, r->count, hlo, hhi, &b0, &b1))
        return;
    for (size_t k = a0 > b0 ? a0 : b0; k <= a1 && k <= b1; k++) {
        const size_t la = lb + r->local + k * r->lstride, ga = gb + r->global + k * r->gstride;
        size_t lo = 0, hi = r->len;
        if (glo > ga && glo - ga > lo) lo = glo - ga;
        if (hlo > la && hlo - la > lo) lo = hlo - la;
        if (ghi - ga < hi) hi = ghi - ga;
        if (hhi > la && hhi - la < hi) hi = hhi - la;
        if (lo < hi) f(ctx, la + lo, ga + lo, hi - lo);
    }
}

/* the runs of tensor id in the layout `layout` of m's kind (tensor parallelism: a tensor rank's
 * split; a pipeline: a pipeline rank's part, model_pp.h), their local offsets from *lbase */
static int layout_runs(const tsr_model *m, int layout, tsr_param_id id, tp_run *runs,
                       size_t *lbase) {
    if (m->pp && m->tp) return pp_tp_runs(m->pp, m->tp, layout, id, runs, lbase);
    if (m->pp) return pp_part_runs(m->pp, layout, id, runs, lbase);
    *lbase = m->params_info[id].offset; /* (every tensor rank's split is laid out alike) */
    return tp_tensor_runs(&m->tp->global, m->tp->T, layout, m->tp->sp, id, runs);
}

/* this rank's layout among them */
static int layout_of(const tsr_model *m) {
    const int T = m->tp ? m->tp->T : 1, t = m->tp ? m->tp->t : 0;
    return m->pp ? m->pp->p * T + t : t;
}

/* the pieces of the runs of layout `layout` (those it counts, or all) within its held range
 * [hlo, hhi) of its flat layout and the global range [glo, ghi), in run order */
static void each_piece(const tsr_model *m, int layout, int counted, size_t hlo, size_t hhi,
                       size_t glo, size_t ghi, piece_fn f, void *ctx) {
    tp_run runs[PP_TP_MAX_RUNS];
    if (hlo >= hhi || glo >= ghi) return;
    for (int id = 0; id < TSR_P_COUNT; id++) {
        size_t lbase;
        const int n = layout_runs(m, layout, (tsr_param_id)id, runs, &lbase);
        for (int i = 0; i < n; i++)
            if (!counted || runs[i].counted)
                run_pieces(&runs[i], lbase, m->global->params_info[id].offset, hlo, hhi, glo,
                           ghi, f, ctx);
    }
}

void tp_io_plan(tp_io *io, const tsr_model *m, const tsr_mesh *mesh, size_t hold_lo,
                size_t hold_hi) {
    const tsr_mesh_group *w = mesh_group(mesh, TSR_MESH_WORLD);
    const size_t W = (size_t)w->size, n = m->global->n_params;
    memset(io, 0, sizeof *io);
    io->W = w->size, io->rank = w->rank, io->world = w->cpu;
    io->io_lo = tsr_malloc(4 * W * sizeof(size_t));
    io->io_hi = io->io_lo + W, io->hold_lo = io->io_lo + 2 * W, io->hold_hi = io->io_lo + 3 * W;
    io->trank = tsr_malloc(W * sizeof(int));
    io->counts = tsr_malloc(4 * W * sizeof(size_t));
    for (size_t r = 0; r < W; r++) { /* (the trainer's partition of a flat layout) */
        io->io_lo[r] = n * r / W / 16 * 16;
        io->io_hi[r] = r + 1 == W ? n : n * (r + 1) / W / 16 * 16;
    }
    struct { uint64_t lo, hi; int64_t t; } mine = {hold_lo, hold_hi, layout_of(m)}, *all;
    all = tsr_malloc(W * sizeof *all);
    dist_group_allgather(io->world, &mine, all, sizeof mine);
    for (size_t r = 0; r < W; r++)
        io->hold_lo[r] = all[r].lo, io->hold_hi[r] = all[r].hi, io->trank[r] = (int)all[r].t;
    free(all);
}

void tp_io_free(tp_io *io) {
    free(io->io_lo);
    free(io->trank);
    free(io->counts);
    memset(io, 0, sizeof *io);
}

size_t tp_io_part(const tp_io *io) { return io->io_hi[io->rank] - io->io_lo[io->rank]; }

/* a piece's floats counted (src NULL) or packed from src (indexed by the global element, or
 * by the split one) into dst */
typedef struct io_move {
    const float *src;
    float *dst;
    size_t src_at;   /* the flat element src[0] is */
    int from_global;
    size_t n;
} io_move;

static void move_piece(void *ctx, size_t l, size_t g, size_t n) {
    io_move *mv = ctx;
    const size_t s = mv->from_global ? g : l;
    if (mv->src) memcpy(mv->dst + mv->n, mv->src + (s - mv->src_at), n * sizeof(float));
    mv->n += n;
}

/* the exchange: to_global 1 (the split ranks' held elements into the global parts) or 0 (back);
 * mine (this rank's held range's data, or its global part) and theirs (the other side) */
static void exchange(tp_io *io, const tsr_model *m, int to_global, const float *mine,
                     float *theirs);

void tp_to_global(tp_io *io, const tsr_model *m, const float *held, float *gpart) {
    exchange(io, m, 1, held, gpart);
}

void tp_from_global(tp_io *io, const tsr_model *m, const float *gpart, float *held) {
    exchange(io, m, 0, gpart, held);
}

/* the pieces this rank sends to rank d (to_global: its counted runs' within its held range and
 * d's global part; back: d's runs within d's held range and this rank's global part) or receives
 * from rank s (the mirror) */
static void pieces_with(const tp_io *io, const tsr_model *m, int to_global, int send, int peer,
                        piece_fn f, void *ctx) {
    const int me = io->rank, holder = send == to_global ? me : peer;
    const int part = holder == me ? peer : me; /* whose global part */
    each_piece(m, io->trank[holder], to_global, io->hold_lo[holder], io->hold_hi[holder],
               io->io_lo[part], io->io_hi[part], f, ctx);
}

/* place received piece data: the piece's elements at the next floats of buf, into dst */
typedef struct io_place {
    const float *buf;
    float *dst;
    size_t dst_at, n;
    int by_global;
} io_place;

static void place_piece(void *ctx, size_t l, size_t g, size_t n) {
    io_place *p = ctx;
    const size_t d = p->by_global ? g : l;
    memcpy(p->dst + (d - p->dst_at), p->buf + p->n, n * sizeof(float));
    p->n += n;
}

static void exchange(tp_io *io, const tsr_model *m, int to_global, const float *mine,
                     float *theirs) {
    const int W = io->W, me = io->rank;
    size_t *sc = io->counts, *sd = sc + W, *rc = sc + 2 * W, *rd = sc + 3 * W, ns = 0, nr = 0;
    const size_t mine_at = to_global ? io->hold_lo[me] : io->io_lo[me];
    const size_t theirs_at = to_global ? io->io_lo[me] : io->hold_lo[me];
    for (int r = 0; r < W; r++) {
        io_move c = {0};
        pieces_with(io, m, to_global, 1, r, move_piece, &c);
        sd[r] = ns, sc[r] = c.n, ns += c.n;
        c = (io_move){0};
        pieces_with(io, m, to_global, 0, r, move_piece, &c);
        rd[r] = nr, rc[r] = c.n, nr += c.n;
    }
    float *sbuf = tsr_malloc((ns ? ns : 1) * sizeof(float));
    float *rbuf = tsr_malloc((nr ? nr : 1) * sizeof(float));
    for (int r = 0; r < W; r++) {
        io_move pk = {mine, sbuf + sd[r], mine_at, !to_global, 0};
        pieces_with(io, m, to_global, 1, r, move_piece, &pk);
    }
    dist_group_alltoallv(io->world, sbuf, sc, sd, rbuf, rc, rd, sizeof(float));
    for (int r = 0; r < W; r++) {
        io_place pl = {rbuf + rd[r], theirs, theirs_at, 0, to_global};
        pieces_with(io, m, to_global, 0, r, place_piece, &pl);
    }
    free(sbuf);
    free(rbuf);
}

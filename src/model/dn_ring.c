/* dn_ring.c — the Gated DeltaNet layers under context parallelism: the state and the
 * convolution's tail passed from chunk to chunk along the context group (dn_ring.h;
 * docs/deltanet.md "Context parallelism"). */
#include "model/dn_ring.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "common.h"
#include "dist/dist.h"
#include "model/model_ring.h"

/* the chunk (of 2N) that local chunk k (0, 1) of rank r is (model_ring.c's zig-zag split), and
 * the rank that holds chunk j */
static int chunk_at(int N, int r, int k) { return k ? 2 * N - 1 - r : r; }
static int holder(int N, int j) { return j < N ? j : 2 * N - 1 - j; }

/* one layer's pass on this rank */
typedef struct dn_pass {
    tsr_ring *g;
    struct tsr_group *grp;
    dn_dims dc;     /* one local chunk: B sequences of c positions */
    int N, r, c, T; /* the group, this rank, the chunk's positions, the whole sequence's */
    size_t ns, nt;  /* floats of a state (B, HV, dk, dv), of a convolution tail (B, K-1, CD) */
    size_t na;      /* floats of one chunk's dn_acts */
    float *x, *y;   /* scratch (B, c, C): a chunk's rows of the input and the output (or their
                     * gradients) */
    int32_t *seq;   /* scratch (B, c): the chunk's segment ids */
} dn_pass;

static size_t tail_floats(const dn_dims *d) {
    return (size_t)d->B * (d->K - 1) * (2 * (size_t)d->HK * d->dk + (size_t)d->HV * d->dv);
}

static dn_dims chunk_dims(const dn_dims *d) {
    dn_dims dc = *d;
    dc.T = d->T / 2;
    return dc;
}

size_t dn_ring_acts_floats(const dn_dims *d) {
    const dn_dims dc = chunk_dims(d);
    return 2 * dn_acts_floats(NULL, &dc) + 2 * tail_floats(&dc);
}

static dn_pass pass_open(tsr_ring *g, const dn_dims *d) {
    dn_pass s = {.g = g, .grp = ring_mpi_group(g), .dc = chunk_dims(d), .N = g->N, .r = g->r,
                 .c = d->T / 2, .T = d->T * g->N};
    if (!s.grp || d->T % 2)
        tsr_die(TSR_EXIT_INTERNAL, "linear_attention layers under context parallelism: need the "
                "CPU model's MPI ring and an even local length (got %d)", d->T);
    s.ns = (size_t)d->B * d->HV * d->dk * d->dv, s.nt = tail_floats(&s.dc);
    s.na = dn_acts_floats(NULL, &s.dc); /* the fp32 host layout: the ring is the CPU's */
    s.x = tsr_malloc((size_t)d->B * s.c * d->C * sizeof(float));
    s.y = tsr_malloc((size_t)d->B * s.c * d->C * sizeof(float));
    s.seq = tsr_malloc((size_t)d->B * s.c * sizeof(int32_t));
    return s;
}

static void pass_close(dn_pass *s) { free(s->x), free(s->y), free(s->seq); }

/* local chunk k's rows of all (B, 2c, C) into one (B, c, C) */
static void rows_get(float *one, const float *all, const dn_pass *s, int k) {
    const size_t n = (size_t)s->c * s->dc.C;
    for (int b = 0; b < s->dc.B; b++)
        memcpy(one + (size_t)b * n, all + ((size_t)b * 2 + k) * n, n * sizeof *one);
}

/* and back: one's rows into local chunk k's of all (add: +=) */
static void rows_put(float *all, const float *one, const dn_pass *s, int k, int add) {
    const size_t n = (size_t)s->c * s->dc.C;
    for (int b = 0; b < s->dc.B; b++) {
        float *a = all + ((size_t)b * 2 + k) * n;
        const float *o = one + (size_t)b * n;
        if (!add) memcpy(a, o, n * sizeof *a);
        else
            for (size_t i = 0; i < n; i++) a[i] += o[i];
    }
}

/* chunk j's segment ids (B, c) from the whole sequences' (B, T), or NULL without */
static const int32_t *chunk_seq(const dn_pass *s, const int32_t *seq, int j) {
    if (!seq) return NULL;
    for (int b = 0; b < s->dc.B; b++)
        memcpy(s->seq + (size_t)b * s->c, seq + (size_t)b * s->T + (size_t)j * s->c,
               (size_t)s->c * sizeof(int32_t));
    return s->seq;
}

/* a message [state | tail]: the rows of the sequences whose document starts at chunk j's first
 * position zeroed (they carry nothing from the chunk before) */
static void zero_fresh(float *msg, const dn_pass *s, const int32_t *seq, int j) {
    const size_t sb = s->ns / (size_t)s->dc.B, tb = s->nt / (size_t)s->dc.B;
    for (int b = 0; b < s->dc.B; b++) {
        const size_t at = (size_t)b * s->T + (size_t)j * s->c;
        if (j > 0 && !(seq && seq[at] != seq[at - 1])) continue;
        memset(msg + (size_t)b * sb, 0, sb * sizeof *msg);
        memset(msg + s->ns + (size_t)b * tb, 0, tb * sizeof *msg);
    }
}

/* the message of chunk `from` arrives from its holder into buf, unless this rank holds it too
 * (then it is mine); chunk j < 0 or >= 2N: zeros */
static void take(dn_pass *s, float *buf, const float *mine, int from) {
    const size_t n = s->ns + s->nt;
    if (from < 0 || from >= 2 * s->N) memset(buf, 0, n * sizeof *buf);
    else if (holder(s->N, from) == s->r) memmove(buf, mine, n * sizeof *buf);
    else dist_group_sendrecv(s->grp, NULL, -1, buf, holder(s->N, from), n * sizeof *buf);
}

/* the message for chunk `to` goes to its holder, unless it is this rank or there is none */
static void give(dn_pass *s, const float *buf, int to) {
    const size_t bytes = (s->ns + s->nt) * sizeof *buf;
    if (to < 0 || to >= 2 * s->N || holder(s->N, to) == s->r) return;
    dist_group_sendrecv(s->grp, buf, holder(s->N, to), NULL, -1, bytes);
    s->g->sent += bytes;
}

void dn_ring_forward(const tsr_backend *be, tsr_ring *g, float *out, float *acts, const float *x,
                     const dn_params *p, const int32_t *seq, const dn_dims *d) {
    dn_pass s = pass_open(g, d);
    float *in = tsr_calloc(s.ns + s.nt, sizeof(float));
    float *next = tsr_calloc(s.ns + s.nt, sizeof(float));
    for (int k = 0; k < 2; k++) {
        const int j = chunk_at(s.N, s.r, k);
        take(&s, in, next, j - 1);
        zero_fresh(in, &s, seq, j);
        float *hist = acts + 2 * s.na + (size_t)k * s.nt; /* kept for the backward */
        memcpy(hist, in + s.ns, s.nt * sizeof *hist);
        dn_acts a;
        dn_acts_at(NULL, &a, acts + (size_t)k * s.na, &s.dc);
        const dn_cache cin = {in, hist};
        dn_cache cnext = {next, next + s.ns};
        rows_get(s.x, x, &s, k);
        dn_layer_forward(be, s.y, &cin, &cnext, &a, s.x, p, chunk_seq(&s, seq, j), &s.dc);
        rows_put(out, s.y, &s, k, 0);
        give(&s, next, j + 1);
    }
    free(in), free(next);
    pass_close(&s);
}

void dn_ring_backward(const tsr_backend *be, tsr_ring *g, float *dx, const dn_params *grad,
                      const float *dout, float *acts, const float *x, const dn_params *p,
                      const int32_t *seq, void *work, const dn_dims *d) {
    dn_pass s = pass_open(g, d);
    float *dnext = tsr_calloc(s.ns + s.nt, sizeof(float));
    float *din = tsr_calloc(s.ns + s.nt, sizeof(float));
    float *dy = tsr_malloc((size_t)d->B * s.c * d->C * sizeof(float));
    for (int k = 1; k >= 0; k--) {
        const int j = chunk_at(s.N, s.r, k);
        take(&s, dnext, din, j + 1);
        memset(din, 0, (s.ns + s.nt) * sizeof *din);
        dn_acts a;
        dn_acts_at(NULL, &a, acts + (size_t)k * s.na, &s.dc);
        const dn_cache cin = {NULL, acts + 2 * s.na + (size_t)k * s.nt};
        const dn_cache cdn = {dnext, dnext + s.ns};
        dn_cache cdi = {din, din + s.ns};
        rows_get(s.x, x, &s, k);
        rows_get(dy, dout, &s, k);
        memset(s.y, 0, (size_t)d->B * s.c * d->C * sizeof *s.y);
        dn_layer_backward(be, s.y, grad, dy, &cdn, &cdi, &cin, &a, s.x, p,
                          chunk_seq(&s, seq, j), work, &s.dc);
        rows_put(dx, s.y, &s, k, 1);
        zero_fresh(din, &s, seq, j); /* the forward gave those rows zeros, not chunk j-1's */
        give(&s, din, j - 1);
    }
    free(dnext), free(din), free(dy);
    pass_close(&s);
}

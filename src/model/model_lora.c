/* model_lora.c — the LoRA adapters' store, initialisation and the decoder's calls into the
 * backend's adapter path (model_lora.h, docs/lora.md). */
#include "model/model_lora.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "model/model_tp.h"

/* the random stream of target t's A (tsr_rand_uniform): apart from the model's streams */
#define LORA_STREAM 0x4C6F5241ull

/* the base tensor a target's rows live in (part 1: of a target over two outputs; both of
 * kv_a_proj_with_mqa's, the latent's and the RoPE key's, are rows of one tensor); with
 * multi-head latent attention q and o are its q_proj and o_proj */
static tsr_param_id base_of(const tsr_model *m, int t, int part) {
    switch (t) {
    case TSR_LORA_Q: return m->kvr ? TSR_P_MLAQW : TSR_P_QKVW;
    case TSR_LORA_O: return m->kvr ? TSR_P_MLAOW : TSR_P_ATTPROJW;
    case TSR_LORA_QA: return TSR_P_MLAQAW;
    case TSR_LORA_QB: return TSR_P_MLAQW;
    case TSR_LORA_KVA: return TSR_P_MLAKVAW;
    case TSR_LORA_KVB: return TSR_P_MLAKVBW;
    case TSR_LORA_GATE:
    case TSR_LORA_UP: return TSR_P_FCW;
    case TSR_LORA_DOWN: return TSR_P_FCPROJW;
    case TSR_LORA_QKVZ: return part ? TSR_P_DNZW : TSR_P_DNQKVW;
    case TSR_LORA_BA: return part ? TSR_P_DNAW : TSR_P_DNBW;
    case TSR_LORA_OUTPROJ: return TSR_P_DNOW;
    case TSR_LORA_AGATE: return TSR_P_ATTNGATEW;
    default: return TSR_P_QKVW;
    }
}

/* target t's widths: in, out, its first column and row width in the (fused) output, and with
 * two outputs (rows0 < out) the second's row width */
typedef struct lora_dims { int in, out, col, ld, rows0, ld1; } lora_dims;

/* multi-head latent attention's: q (q_proj) or q_a_proj and q_b_proj, kv_a_proj_with_mqa's
 * two outputs (the latent, kvr, then the RoPE key, dr), kv_b_proj, o (o_proj) */
static lora_dims mla_dims_of(const tsr_model *m, int t) {
    const int C = m->C, QW = m->NH * (m->dn + m->dr), KW = m->NH * (m->dn + m->dv);
    const int qr = m->qr, kvr = m->kvr, VD = m->NH * m->dv;
    switch (t) {
    case TSR_LORA_Q: return (lora_dims){C, QW, 0, QW, QW, 0};
    case TSR_LORA_QA: return (lora_dims){C, qr, 0, qr, qr, 0};
    case TSR_LORA_QB: return (lora_dims){qr, QW, 0, QW, QW, 0};
    case TSR_LORA_KVA: return (lora_dims){C, kvr + m->dr, 0, kvr, kvr, m->dr};
    case TSR_LORA_KVB: return (lora_dims){kvr, KW, 0, KW, KW, 0};
    case TSR_LORA_O: return (lora_dims){VD, C, 0, C, C, 0};
    default: return (lora_dims){0, 0, 0, 0, 0, 0};
    }
}

static lora_dims dims_of(const tsr_model *m, int t) {
    if (m->kvr && (t == TSR_LORA_Q || t == TSR_LORA_O || t >= TSR_LORA_QA))
        return mla_dims_of(m, t);
    if (t >= TSR_LORA_QA) return (lora_dims){0, 0, 0, 0, 0, 0}; /* (no MLA: absent) */
    const int C = m->C, QD = m->QD, KV = m->KVH * m->hs, F = m->F;
    const int VD = m->HVl * m->dvl, CD = 2 * m->HKl * m->dkl + VD, HV = m->HVl;
    const lora_dims d[TSR_LORA_COUNT] = {
        [TSR_LORA_Q] = {C, QD, 0, m->QKV, QD, 0},       [TSR_LORA_K] = {C, KV, QD, m->QKV, KV, 0},
        [TSR_LORA_V] = {C, KV, QD + KV, m->QKV, KV, 0}, [TSR_LORA_O] = {QD, C, 0, C, C, 0},
        [TSR_LORA_GATE] = {C, F, 0, m->FW, F, 0},       [TSR_LORA_UP] = {C, F, F, m->FW, F, 0},
        [TSR_LORA_DOWN] = {F, C, 0, C, C, 0},
        [TSR_LORA_QKVZ] = {C, CD + VD, 0, CD, CD, VD},  [TSR_LORA_BA] = {C, 2 * HV, 0, HV, HV, HV},
        [TSR_LORA_OUTPROJ] = {VD, C, 0, C, C, 0},       [TSR_LORA_AGATE] = {C, QD, 0, QD, QD, 0},
    };
    return d[t];
}

/* the layers of a stack of base tensor id: its kind's (model_layer_slot counts them) */
static int stack_layers(const tsr_model *m, tsr_param_id id) {
    return id == TSR_P_DNQKVW || id == TSR_P_DNBW || id == TSR_P_DNOW ? m->LL
           : id == TSR_P_FCW || id == TSR_P_FCPROJW ? m->L : m->L - m->LL;
}

/* tensor parallelism (model_tp.h): target t's share of m's split (m's widths are the rank's): a
 * row-parallel target (o, down) reads A's columns a0 .. of its input's, a column-parallel one
 * B's rows b0 .. of its output's (k, v: the key/value heads the rank holds, one replicated over
 * tp->R ranks when fewer than T); the linear layers' targets are refused with tensor parallelism
 * (config_tensor_pair) */
static void split_of(tsr_lora *lo, const tsr_model *m, int t) {
    const lora_dims l = dims_of(m, t);
    const tsr_tp *tp = m->tp;
    lo->lin[t] = l.in, lo->lout[t] = l.out, lo->a0[t] = lo->b0[t] = 0;
    if (!tp || tp->T <= 1) return;
    if (m->kvr || (t >= TSR_LORA_QKVZ && t != TSR_LORA_AGATE))
        tsr_die(TSR_EXIT_INTERNAL, "lora: target %s under tensor parallelism (the config check "
                "let it through)", config_lora_target_name(t));
    if (t == TSR_LORA_O || t == TSR_LORA_DOWN) lo->a0[t] = tp->t * l.in;
    else if (t == TSR_LORA_K || t == TSR_LORA_V)
        lo->b0[t] = (tp->R > 1 ? tp->t / tp->R : tp->t) * l.out;
    else lo->b0[t] = tp->t * l.out;
}

void lora_plan(tsr_lora *lo, const tsr_model *m, int R, double alpha, double dropout,
               unsigned mask) {
    const tsr_model *g = m->tp ? m->global : m; /* (the store: the whole model's widths) */
    memset(lo, 0, sizeof *lo);
    lo->ops = m->ops;
    lo->model = m;
    lo->R = R;
    lo->L = m->L;
    lo->mask = mask;
    lo->scale = (float)(alpha / R);
    lo->p = (float)dropout;
    size_t at = 0, r = (size_t)R;
    for (int t = 0; t < TSR_LORA_COUNT; t++) {
        const lora_dims d = dims_of(g, t), l = dims_of(m, t);
        lo->in[t] = d.in, lo->out[t] = d.out, lo->col[t] = l.col, lo->ld[t] = l.ld;
        lo->rows0[t] = l.rows0, lo->ld1[t] = l.ld1;
        lo->lin[t] = l.in, lo->lout[t] = l.out;
        if (!(mask & (1u << t))) {
            lo->a_at[t] = lo->b_at[t] = SIZE_MAX;
            continue;
        }
        split_of(lo, m, t);
        const size_t L = (size_t)(lo->Lt[t] = stack_layers(m, base_of(m, t, 0)));
        lo->a_at[t] = at;
        at += L * r * (size_t)d.in;
        lo->b_at[t] = at;
        at += L * (size_t)d.out * r;
    }
    lo->n = at;
}

void lora_init(tsr_lora *lo, tsr_model *m, int R, double alpha, double dropout, unsigned mask) {
    lora_plan(lo, m, R, alpha, dropout, mask);
    float **bufs[] = {&lo->w, &lo->g, &lo->m, &lo->v};
    for (int k = 0; k < 4; k++) *bufs[k] = lo->ops->alloc(lo->n * sizeof(float));
    m->lora = lo;
}

void lora_free(tsr_lora *lo) {
    float *bufs[] = {lo->w, lo->g, lo->m, lo->v};
    for (int k = 0; k < 4; k++)
        if (bufs[k]) lo->ops->free(bufs[k]);
    lora_free_scratch(lo);
    if (lo->slice) lo->ops->free(lo->slice);
    memset(lo, 0, sizeof *lo);
}

void lora_free_scratch(tsr_lora *lo) {
    if (lo->scratch) lo->scratch_be->free(lo->scratch_be, lo->scratch);
    lo->scratch = NULL;
    lo->scratch_cap = 0;
    lo->scratch_be = NULL;
}

void lora_init_weights(tsr_lora *lo, uint64_t seed) {
    for (int t = 0; t < TSR_LORA_COUNT; t++) {
        if (lo->a_at[t] == SIZE_MAX) continue;
        const size_t na = (size_t)lo->Lt[t] * lo->R * lo->in[t];
        const double bound = 1.0 / sqrt((double)lo->in[t]);
        float *a = lo->w + lo->a_at[t];
        for (size_t k = 0; k < na; k++)
            a[k] = (float)(bound * (2.0 * tsr_rand_uniform(seed, LORA_STREAM + (uint64_t)t, k) - 1.0));
        memset(lo->w + lo->b_at[t], 0, (size_t)lo->Lt[t] * lo->out[t] * lo->R * sizeof(float));
    }
}

int lora_tensor(const tsr_lora *lo, int k, char name[TSR_LORA_NAME], int64_t shape[3], size_t *offset,
                size_t *numel) {
    const int t = k / 2, is_b = k % 2;
    if (t >= TSR_LORA_COUNT || lo->a_at[t] == SIZE_MAX) return 0;
    snprintf(name, TSR_LORA_NAME, "%s_%c", config_lora_target_name(t), is_b ? 'B' : 'A');
    shape[0] = lo->Lt[t];
    shape[1] = is_b ? lo->out[t] : lo->R;
    shape[2] = is_b ? lo->R : lo->in[t];
    *offset = is_b ? lo->b_at[t] : lo->a_at[t];
    *numel = (size_t)lo->Lt[t] * (size_t)lo->R * (size_t)(is_b ? lo->out[t] : lo->in[t]);
    return 1;
}

void lora_set_pass(tsr_lora *lo, int train, uint64_t key, int64_t row0) {
    lo->train = train;
    lo->key = key;
    lo->row0 = row0;
}

void lora_set_context(tsr_lora *lo, int N, int r, int T) {
    lo->cpN = N > 1 ? N : 1;
    lo->cpR = r;
    lo->cpT = T;
}

int64_t lora_pass_row0(int rank, int64_t per_rank, int64_t b, int T) {
    return ((int64_t)rank * per_rank + b) * T;
}

/* W (part's rows of the base tensor at stack slot s) += scale B_part A, through m's ops */
static void merge_part(const tsr_lora *lo, const float *w, tsr_model *m, int t, int part,
                       float *at, float *ba) {
    const size_t R = (size_t)lo->R, in = (size_t)lo->in[t], Lt = (size_t)lo->Lt[t];
    const size_t r0 = (size_t)lo->rows0[t], rows = part ? (size_t)lo->out[t] - r0 : r0;
    const tsr_param_id id = base_of(m, t, part);
    const tsr_param_info *p = &m->params_info[id];
    /* (the first row: part 0's column, part 1's 0, or rows0 when both parts share the tensor) */
    const size_t row = part ? (id == base_of(m, t, 0) ? r0 : 0) : (size_t)lo->col[t];
    for (size_t s = 0; s < Lt; s++) {
        const float *A = w + lo->a_at[t] + s * R * in;
        const float *B = w + lo->b_at[t] + s * (size_t)lo->out[t] * R + (part ? r0 * R : 0);
        for (size_t i = 0; i < in; i++) /* A^T, so that matmul_forward gives B A */
            for (size_t k = 0; k < R; k++) at[i * R + k] = A[k * in + i];
        m->ops->matmul_forward(ba, B, at, NULL, (int)rows, (int)R, (int)in);
        float *W = m->params + p->offset + s * (p->numel / Lt) + row * in;
        for (size_t i = 0; i < rows * in; i++) W[i] += lo->scale * ba[i];
    }
}

void lora_merge(const tsr_lora *lo, const float *w, tsr_model *m) {
    for (int t = 0; t < TSR_LORA_COUNT; t++) {
        if (lo->a_at[t] == SIZE_MAX) continue;
        const size_t in = (size_t)lo->in[t], out = (size_t)lo->out[t];
        float *at = m->ops->alloc(in * (size_t)lo->R * sizeof(float));
        float *ba = m->ops->alloc(out * in * sizeof(float));
        merge_part(lo, w, m, t, 0, at, ba);
        if (lo->ld1[t] > 0) merge_part(lo, w, m, t, 1, at, ba); /* (two outputs) */
        m->ops->free(at);
        m->ops->free(ba);
    }
}

size_t lora_store_bytes(const tsr_lora *lo) { return 4 * lo->n * sizeof(float); }

size_t lora_scratch_bytes(const tsr_lora *lo, const tsr_backend *be, int N) {
    size_t most = 0;
    for (int t = 0; t < TSR_LORA_COUNT; t++) {
        if (lo->a_at[t] == SIZE_MAX || !be->lora_scratch) continue;
        size_t b = be->lora_scratch(N, lo->lin[t], lo->lout[t], lo->R);
        if (b > most) most = b;
    }
    return most;
}

/* the scratch on the backend that runs the pass (the fp32 ops' memory, or the device's) */
static void *scratch_for(tsr_lora *lo, const tsr_backend *be, int N) {
    size_t need = lora_scratch_bytes(lo, be, N);
    if (need > lo->scratch_cap || (lo->scratch && lo->scratch_be != be)) {
        lora_free_scratch(lo);
        lo->scratch = be->try_alloc(be, need);
        if (!lo->scratch)
            tsr_die(TSR_EXIT_USAGE, "lora: no room on the %s backend for the adapters' scratch "
                    "(%zu bytes for %d rows): use a smaller micro_batch or seq_len", be->name,
                    need, N);
        lo->scratch_cap = need;
        lo->scratch_be = be;
    }
    return lo->scratch;
}

/* the pass's dropout: its probability and target t of layer l's key */
static float pass_p(const tsr_lora *lo) { return lo->train ? lo->p : 0.0f; }
static uint64_t pass_key(const tsr_lora *lo, int l, int t) {
    return tsr_rand_u64(lo->key, (uint64_t)l, (uint64_t)t);
}

int lora_target_on(const tsr_lora *lo, int t) { return lo && lo->a_at[t] != SIZE_MAX; }

typedef struct lora_call {
    tsr_lora *lo;
    const tsr_backend *be;
    int l, t, N;               /* l: the slot in target t's stack */
    int part;                  /* 1: the second output of a target over two */
    void *out;                 /* forward: the projection output; backward: dinp */
    const void *inp, *dout;
    const float *A;            /* the slot's A (R, lin): the store's, or its columns a0 .. */
    float *dA;                 /* and its gradient (backward) */
    void (*run)(const struct lora_call *c, int n0, int n, int64_t row0);
} lora_call;

/* one run of rows of call c at global row row0: a row-parallel target's dropout under tensor
 * parallelism draws an element's mask by its place in the whole input, row row0 + n of in
 * columns, column a0 + c: row ((row0 + n) in + a0) / lin of the rank's lin columns (in = T lin,
 * a0 a multiple of lin), so its rows go one a call */
static void emit(void *ctx, int n0, int n, int64_t row0) {
    const lora_call *c = ctx;
    const tsr_lora *lo = c->lo;
    const int t = c->t, in = lo->in[t], lin = lo->lin[t];
    if (lin == in || pass_p(lo) == 0.0f) {
        c->run(c, n0, n, row0);
        return;
    }
    for (int i = 0; i < n; i++)
        c->run(c, n0 + i, 1, ((row0 + i) * (int64_t)in + lo->a0[t]) / lin);
}

/* A pass's rows in runs whose global row numbers are consecutive: all N rows at row0, or
 * (context parallelism with dropout) each chunk of each sequence at its position in the whole
 * sequence (model_ring.h's zig-zag: local chunk k of rank r is chunk r, or 2 cpN - 1 - r).
 * emit(c, first row of the run, its rows, its global row number) for each. */
static void row_runs(const tsr_lora *lo, int N, lora_call *c) {
    if (lo->cpN <= 1 || pass_p(lo) == 0.0f) {
        emit(c, 0, N, lo->row0);
        return;
    }
    const int Tl = lo->cpT / lo->cpN, h = Tl / 2;
    for (int n0 = 0; n0 < N; n0 += h) {
        const int b = n0 / Tl, k = n0 % Tl / h, chunk = k ? 2 * lo->cpN - 1 - lo->cpR : lo->cpR;
        emit(c, n0, h, lo->row0 + (int64_t)b * lo->cpT + (int64_t)chunk * h);
    }
}

/* the call's output: its rows of B (from row b0), their count, the output's row width and
 * first column */
typedef struct lora_out { size_t b0; int rows, ld, col; } lora_out;

static lora_out out_of(const lora_call *c) {
    const tsr_lora *lo = c->lo;
    const int t = c->t, r0 = lo->rows0[t];
    if (c->part) return (lora_out){(size_t)r0, lo->out[t] - r0, lo->ld1[t], 0};
    return (lora_out){(size_t)lo->b0[t], r0, lo->ld[t], lo->col[t]};
}

/* the call's slot of A and its gradient: the store's, or (a row-parallel target under tensor
 * parallelism) its columns a0 .. copied into lo->slice, the gradient's zeroed beside them */
static void a_of(lora_call *c, int grad) {
    tsr_lora *lo = c->lo;
    const int t = c->t;
    const size_t R = (size_t)lo->R, in = (size_t)lo->in[t], lin = (size_t)lo->lin[t];
    const size_t at = lo->a_at[t] + (size_t)c->l * R * in;
    c->A = lo->w + at, c->dA = lo->g + at;
    if (lin == in) return;
    if (lo->slice_cap < 2 * R * lin) {
        if (lo->slice) lo->ops->free(lo->slice);
        lo->slice = lo->ops->alloc(2 * R * lin * sizeof(float)), lo->slice_cap = 2 * R * lin;
    }
    for (size_t k = 0; k < R; k++)
        memcpy(lo->slice + k * lin, lo->w + at + k * in + lo->a0[t], lin * sizeof(float));
    c->A = lo->slice, c->dA = lo->slice + R * lin;
    if (grad) memset(c->dA, 0, R * lin * sizeof(float));
}

/* a sliced A's gradient into the store's columns a0 .. */
static void a_back(const lora_call *c) {
    tsr_lora *lo = c->lo;
    const int t = c->t;
    const size_t R = (size_t)lo->R, in = (size_t)lo->in[t], lin = (size_t)lo->lin[t];
    if (lin == in) return;
    float *g = lo->g + lo->a_at[t] + (size_t)c->l * R * in + lo->a0[t];
    for (size_t k = 0; k < R; k++)
        for (size_t i = 0; i < lin; i++) g[k * in + i] += c->dA[k * lin + i];
}

/* B's rows of the call's output (the store's, or its gradient's: g) */
static size_t b_at(const lora_call *c) {
    const tsr_lora *lo = c->lo;
    return lo->b_at[c->t] + ((size_t)c->l * lo->out[c->t] + out_of(c).b0) * lo->R;
}

static void forward_run(const lora_call *c, int n0, int n, int64_t row0) {
    tsr_lora *lo = c->lo;
    const size_t e = tsr_dtype_size(c->be->act), t = (size_t)c->t, lin = (size_t)lo->lin[t];
    const lora_out o = out_of(c);
    c->be->lora_forward(c->be, (char *)c->out + ((size_t)n0 * o.ld + o.col) * e, o.ld,
                        (const char *)c->inp + (size_t)n0 * lin * e, c->A, lo->w + b_at(c),
                        lo->scale, pass_p(lo), pass_key(lo, c->l, c->t), row0,
                        scratch_for(lo, c->be, c->N), n, (int)lin, o.rows, lo->R);
}

static void backward_run(const lora_call *c, int n0, int n, int64_t row0) {
    tsr_lora *lo = c->lo;
    const size_t e = tsr_dtype_size(c->be->act), t = (size_t)c->t, lin = (size_t)lo->lin[t];
    const lora_out o = out_of(c);
    c->be->lora_backward(c->be, (char *)c->out + (size_t)n0 * lin * e, c->dA, lo->g + b_at(c),
                         (const char *)c->dout + ((size_t)n0 * o.ld + o.col) * e, o.ld,
                         (const char *)c->inp + (size_t)n0 * lin * e, c->A, lo->w + b_at(c),
                         lo->scale, pass_p(lo), pass_key(lo, c->l, c->t), row0,
                         scratch_for(lo, c->be, c->N), n, (int)lin, o.rows, lo->R);
}

int lora_slot(const tsr_lora *lo, int l, int t) {
    return model_layer_slot(lo->model, base_of(lo->model, t, 0), l);
}

void lora_forward_part(tsr_lora *lo, const tsr_backend *be, int l, int t, int part, void *out,
                       const void *inp, int N) {
    if (!lora_target_on(lo, t)) return;
    lora_call c = {lo, be, lora_slot(lo, l, t), t, N, part, out, inp, NULL, NULL, NULL,
                   forward_run};
    a_of(&c, 0);
    row_runs(lo, N, &c);
}

void lora_backward_part(tsr_lora *lo, const tsr_backend *be, int l, int t, int part, void *dinp,
                        const void *dout, const void *inp, int N) {
    if (!lora_target_on(lo, t)) return;
    lora_call c = {lo, be, lora_slot(lo, l, t), t, N, part, dinp, inp, dout, NULL, NULL,
                   backward_run};
    a_of(&c, 1);
    row_runs(lo, N, &c);
    a_back(&c);
}

void lora_forward_at(tsr_lora *lo, const tsr_backend *be, int l, int t, void *out,
                     const void *inp, int N) {
    lora_forward_part(lo, be, l, t, 0, out, inp, N);
}

void lora_backward_at(tsr_lora *lo, const tsr_backend *be, int l, int t, void *dinp,
                      const void *dout, const void *inp, int N) {
    lora_backward_part(lo, be, l, t, 0, dinp, dout, inp, N);
}

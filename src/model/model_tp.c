/* model_tp.c — tensor parallelism's split of a model (model_tp.h): the split sizes and layout,
 * each tensor's runs from its row's split rule, the initial weights, the ALiBi slopes, the
 * partial gradients' sums and the gradient norm's share, the whole weights made from the split
 * (tp_whole: Muon's matrices, GRPO's rollouts), the bytes of a step. The decoder's
 * communication points are decoder_tp.c's, the checkpoints' exchange model_tp_io.c's.
 */
#include "model/model_tp.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/layer_kind.h"

/* ---- the runs ------------------------------------------------------------------------------ */

/* a segment of the split dimension: global elements [g, g + n) at local l; how its gradient is
 * completed and whether this rank counts it */
typedef struct tp_seg {
    size_t g, n, l;
    int sum, counted;
} tp_seg;

/* the frame's tensors (the root's, the block's norms): a rank sees its share of the tokens */
static int frame_tensor(const tsr_model *g, tsr_param_id id) {
    const tsr_layer_kind *k = model_param_kind(g, id);
    return k->half == TSR_HALF_ROOT || k->half == TSR_HALF_BLOCK;
}

/* TSR_SPLIT_HEADS: the segments of rank t from the kind's head blocks; 0 when the tensor is
 * shared by every head (replicated) */
static int head_segs(const tsr_model *g, tsr_param_id id, int T, int t, tp_seg *s) {
    tsr_head_block b[3];
    const int nb = model_param_kind(g, id)->heads(g, id, b);
    size_t at = 0, l = 0;
    for (int i = 0; i < nb; i++) {
        const size_t n = (size_t)b[i].n, sz = (size_t)b[i].size;
        if (n % (size_t)T == 0) {
            s[i] = (tp_seg){at + (size_t)t * (n / T) * sz, n / T * sz, l, TP_SUM_NONE, 1};
        } else if (b[i].kv && T % (int)n == 0) { /* the key/value head t's query heads read */
            const int R = T / (int)n;
            s[i] = (tp_seg){at + (size_t)(t / R) * sz, sz, l, TP_SUM_KV, t % R == 0};
        } else {
            tsr_die(TSR_EXIT_INTERNAL, "tensor parallelism: %s's %zu heads do not split over %d "
                    "ranks (the config check let it through)", g->params_info[id].name, n, T);
        }
        at += n * sz, l += s[i].n;
    }
    return nb;
}

tp_rule tp_rule_of(const tsr_model *m, tsr_param_id id) {
    const tsr_param_row *row = model_param_row(m, id);
    if (row->split != TSR_SPLIT_EXPERTS) return (tp_rule){row->split, row->dim, row->parts};
    tsr_split_rule split; /* (inside each expert: the kind's cut) */
    tp_rule r;
    model_param_kind(m, id)->within(id, &split, &r.dim, &r.parts);
    r.split = split;
    return r;
}

/* the segments of rank t of the split dimension D of tensor id's row */
static int split_segs(const tsr_model *g, tsr_param_id id, size_t D, int T, int t, tp_seg *s) {
    const tp_rule rule = tp_rule_of(g, id);
    const int parts = rule.split == TSR_SPLIT_OUT && rule.parts > 1 ? rule.parts : 1;
    if (rule.split == TSR_SPLIT_HEADS) return head_segs(g, id, T, t, s);
    const size_t Dp = D / (size_t)parts, n = Dp / (size_t)T;
    if (D % ((size_t)parts * (size_t)T))
        tsr_die(TSR_EXIT_INTERNAL, "tensor parallelism: %s's %zu rows do not split over %d ranks "
                "(the config check let it through)", g->params_info[id].name, D, T);
    for (int p = 0; p < parts; p++)
        s[p] = (tp_seg){(size_t)p * Dp + (size_t)t * n, n, (size_t)p * n, TP_SUM_NONE, 1};
    return parts;
}

/* tp_tensor_runs, an expert tensor under expert parallelism included */
static int tensor_runs(const tsr_model *g, int T, int t, int sp, tsr_param_id id, tp_run *runs) {
    const tsr_param_info *p = &g->params_info[id];
    if (!p->numel) return 0;
    const tp_rule row = tp_rule_of(g, id);
    tp_seg s[TP_MAX_RUNS];
    int ns = 0;
    const int lay = model_param_per_layer(id), nd = p->ndim - lay; /* the slice's dimensions */
    if (row.split != TSR_SPLIT_REPLICATED && row.split != TSR_SPLIT_AFTER_SUM)
        ns = split_segs(g, id, (size_t)p->shape[lay + row.dim], T, t, s);
    if (ns == 0) { /* whole on every rank: summed when a rank computes a part of its gradient */
        const int sum = row.split == TSR_SPLIT_AFTER_SUM || !frame_tensor(g, id) || sp;
        runs[0] = (tp_run){id, 1, p->numel, 0, p->numel, 0, p->numel,
                           (unsigned char)(sum ? TP_SUM_TENSOR : TP_SUM_NONE), t == 0};
        return 1;
    }
    size_t outer = lay ? (size_t)g->depth[id] : 1, inner = 1, Dl = 0;
    for (int d = 0; d < row.dim; d++) outer *= (size_t)p->shape[lay + d];
    for (int d = row.dim + 1; d < nd; d++) inner *= (size_t)p->shape[lay + d];
    const size_t D = (size_t)p->shape[lay + row.dim];
    for (int i = 0; i < ns; i++) Dl += s[i].n;
    for (int i = 0; i < ns; i++)
        runs[i] = (tp_run){id, outer, s[i].n * inner, s[i].l * inner, Dl * inner,
                           s[i].g * inner, D * inner, (unsigned char)s[i].sum,
                           (unsigned char)s[i].counted};
    return ns;
}

int tp_tensor_runs(const tsr_model *g, int T, int t, int sp, tsr_param_id id, tp_run *runs) {
    return g->params_info[id].ep ? 0 : tensor_runs(g, T, t, sp, id, runs);
}

/* which 0: expw1, 1: expw2; the runs' blocks are one per expert and layer (and row), so a
 * buffer of `experts` experts of `layers` MoE layers holds count / (LM E) x layers x experts */
void tp_expert_copy(const tsr_tp *tp, int layers, int experts, float *whole, float *split,
                    int to_split) {
    const tsr_model *g = &tp->global;
    const size_t per = (size_t)g->LM * (size_t)g->E, mine = (size_t)layers * (size_t)experts;
    size_t wb = 0, sb = 0; /* each tensor's start in the two buffers */
    for (int which = 0; which < 2; which++) {
        const tsr_param_id id = which ? TSR_P_EXPW2 : TSR_P_EXPW1;
        tp_run runs[TP_MAX_RUNS];
        const int n = tensor_runs(g, tp->T, tp->t, tp->sp, id, runs);
        size_t sn = 0;
        for (int i = 0; i < n; i++) {
            const tp_run *r = &runs[i];
            const size_t count = r->count / per * mine;
            for (size_t k = 0; k < count; k++) {
                float *a = split + sb + r->local + k * r->lstride;
                float *b = whole + wb + r->global + k * r->gstride;
                memcpy(to_split ? a : b, to_split ? b : a, r->len * sizeof(float));
            }
            sn += count * r->len;
        }
        wb += g->params_info[id].numel / per * mine, sb += sn;
    }
}

/* ---- the split model ----------------------------------------------------------------------- */

/* the sizes rule by rule: heads, key/value heads (one a rank when fewer than T), the MLP's
 * width, the vocabulary rows, the linear layers' heads */
static void split_dims(tsr_model *m, int T) {
    m->NH /= T;
    m->KVH = m->KVH >= T ? m->KVH / T : 1;
    m->QD = m->NH * m->hs;
    m->QKV = (m->NH + 2 * m->KVH) * m->hs;
    m->F /= T;
    m->FW = config_mlp_gated(&m->cfg) ? 2 * m->F : m->F;
    m->Vp /= T;
    m->HKl /= T, m->HVl /= T;
    m->FE /= T, m->S /= T; /* (each expert's width, the shared expert's) */
}

/* every tensor's runs tile its split shape (their elements add up to it) */
static void check_runs(const tsr_model *m, const tsr_tp *tp) {
    size_t n[TSR_P_COUNT] = {0};
    for (size_t i = 0; i < tp->n_runs; i++)
        n[tp->runs[i].id] += tp->runs[i].count * tp->runs[i].len;
    for (int id = 0; id < TSR_P_COUNT; id++)
        if (!m->params_info[id].ep && n[id] != m->params_info[id].numel)
            tsr_die(TSR_EXIT_INTERNAL, "tensor parallelism: %s's runs hold %zu elements, its "
                    "split shape %zu", m->params_info[id].name, n[id], m->params_info[id].numel);
}

void model_set_tensor(tsr_model *m, tsr_tp *tp, int T, int t, int sp) {
    memset(tp, 0, sizeof *tp);
    if (T <= 1) return;
    tp->T = T, tp->t = t, tp->sp = sp;
    tp->global = *m; /* (nothing allocated yet: the layout and sizes only) */
    tp->R = m->KVH >= T ? 1 : T / m->KVH;
    split_dims(m, T);
    model_relayout(m);
    tp->v0 = t * m->Vp;
    tp->Vl = m->V - tp->v0 < 0 ? 0 : m->V - tp->v0 < m->Vp ? m->V - tp->v0 : m->Vp;
    tp->runs = tsr_malloc((size_t)TSR_P_COUNT * TP_MAX_RUNS * sizeof *tp->runs);
    for (int id = 0; id < TSR_P_COUNT; id++)
        tp->n_runs += (size_t)tp_tensor_runs(&tp->global, T, t, sp, (tsr_param_id)id,
                                             tp->runs + tp->n_runs);
    check_runs(m, tp);
    m->tp = tp;
    m->global = &tp->global;
}

void tp_attach(tsr_tp *tp, const tsr_mesh *mesh) {
    tp->group = mesh_group(mesh, TSR_MESH_TENSOR)->cpu;
    tp->kv = mesh_group(mesh, TSR_MESH_TENSOR_KV)->cpu;
}

void tp_free(tsr_tp *tp) {
    tsr_free_all(tp->runs, tp->red, tp->xent, tp->capped, tp->hlogits, tp->hrow);
    memset(tp, 0, sizeof *tp);
}

void tp_pieces(const tsr_tp *tp, const tsr_model *m, size_t lo, size_t hi,
               void (*f)(void *ctx, size_t l, size_t g, size_t n, int counted), void *ctx) {
    for (size_t i = 0; i < tp->n_runs; i++) {
        const tp_run *r = &tp->runs[i];
        const size_t base = m->params_info[r->id].offset, gb = m->global->params_info[r->id].offset;
        for (size_t k = 0; k < r->count; k++) {
            const size_t a = base + r->local + k * r->lstride, b = a + r->len;
            const size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
            if (x < y) f(ctx, x, gb + r->global + k * r->gstride + (x - a), y - x, r->counted);
        }
    }
}

typedef struct whole_move {
    float *whole, *split;
    size_t l0, w0; /* the flat elements split[0] and whole[0] are (split, global) */
    int fill;
} whole_move;

static void move_whole(void *ctx, size_t l, size_t g, size_t n, int counted) {
    whole_move *w = ctx;
    if (w->fill && counted) memcpy(w->whole + (g - w->w0), w->split + (l - w->l0), n * sizeof(float));
    else if (!w->fill) memcpy(w->split + (l - w->l0), w->whole + (g - w->w0), n * sizeof(float));
}

void tp_whole(const tsr_tp *tp, const tsr_model *m, size_t lo, size_t hi, const float *split,
              float *whole, size_t w0, size_t n) {
    memset(whole, 0, n * sizeof *whole);
    whole_move mv = {whole, (float *)split, lo, w0, 1};
    tp_pieces(tp, m, lo, hi, move_whole, &mv);
    dist_group_allreduce_sum_f32(tp->group, whole, n);
}

void tp_take(const tsr_tp *tp, const tsr_model *m, size_t lo, size_t hi, const float *whole,
             size_t w0, float *split) {
    whole_move mv = {(float *)whole, split, lo, w0, 0};
    tp_pieces(tp, m, lo, hi, move_whole, &mv);
}

/* ---- the gradients --------------------------------------------------------------------------- */

uint64_t tp_collective_bytes(int n, int allreduce, uint64_t bytes) {
    return n > 1 ? (allreduce ? 2 : 1) * (uint64_t)(n - 1) * bytes / (uint64_t)n : 0;
}

/* calls f(ctx, at, len) for each stretch of the spans (in order) that a run of this rank with
 * sum `sum` (-1: the runs it counts) covers: at its data, len floats; in run order within a
 * span */
static void each_stretch(const tsr_tp *tp, const tsr_model *m, int sum, const tp_span *sp,
                         size_t n, void (*f)(void *ctx, float *at, size_t len), void *ctx) {
    for (size_t s = 0; s < n; s++) {
        const size_t lo = sp[s].flat, hi = lo + sp[s].len;
        for (size_t i = 0; i < tp->n_runs; i++) {
            const tp_run *r = &tp->runs[i];
            if (sum >= 0 ? r->sum != sum : !r->counted) continue;
            const size_t base = m->params_info[r->id].offset;
            for (size_t k = 0; k < r->count; k++) {
                const size_t a = base + r->local + k * r->lstride, b = a + r->len;
                const size_t x = a > lo ? a : lo, y = b < hi ? b : hi;
                if (x < y) f(ctx, sp[s].data ? sp[s].data + (x - lo) : NULL, y - x);
            }
        }
    }
}

/* a gather of stretches into (pack) or out of (unpack) a contiguous buffer, or their squares */
typedef struct tp_pack {
    float *buf;
    size_t n;
    int unpack;
    double sq;
} tp_pack;

static void pack_stretch(void *ctx, float *at, size_t len) {
    tp_pack *p = ctx;
    if (p->buf && p->unpack) memcpy(at, p->buf + p->n, len * sizeof(float));
    else if (p->buf) memcpy(p->buf + p->n, at, len * sizeof(float));
    p->n += len;
}

/* the stretches of sum s gathered, summed over group grp (of n ranks), put back */
static void sum_stretches(tsr_tp *tp, const tsr_model *m, int s, tsr_group *grp, int n,
                          const tp_span *sp, size_t ns) {
    tp_pack p = {NULL, 0, 0, 0.0};
    each_stretch(tp, m, s, sp, ns, pack_stretch, &p); /* (the count) */
    if (n <= 1 || p.n == 0) return;
    if (tp->red_cap < p.n) {
        free(tp->red);
        tp->red = tsr_malloc(p.n * sizeof(float)), tp->red_cap = p.n;
    }
    const size_t total = p.n;
    p = (tp_pack){tp->red, 0, 0, 0.0};
    each_stretch(tp, m, s, sp, ns, pack_stretch, &p);
    dist_group_allreduce_sum_f32(grp, tp->red, total);
    tp->sent += tp_collective_bytes(n, 1, total * sizeof(float));
    p = (tp_pack){tp->red, 0, 1, 0.0};
    each_stretch(tp, m, s, sp, ns, pack_stretch, &p);
}

void tp_finish_spans(tsr_tp *tp, const tsr_model *m, const tp_span *sp, size_t n) {
    sum_stretches(tp, m, TP_SUM_TENSOR, tp->group, tp->T, sp, n);
    sum_stretches(tp, m, TP_SUM_KV, tp->kv, tp->R, sp, n);
}

void tp_finish_grads(tsr_tp *tp, const tsr_model *m, float *g, size_t lo, size_t hi) {
    const tp_span sp = {lo, hi - lo, g};
    tp_finish_spans(tp, m, &sp, 1);
}

static void sq_stretch(void *ctx, float *at, size_t len) {
    tp_pack *p = ctx;
    double s = 0.0;
    for (size_t i = 0; i < len; i++) s += (double)at[i] * at[i];
    p->sq += s;
}

double tp_sumsq_spans(const tsr_tp *tp, const tsr_model *m, const tp_span *sp, size_t n) {
    tp_pack p = {NULL, 0, 0, 0.0};
    each_stretch(tp, m, -1, sp, n, sq_stretch, &p);
    return p.sq;
}

double tp_sumsq(const tsr_tp *tp, const tsr_model *m, const float *g, size_t lo, size_t hi) {
    const tp_span sp = {lo, hi - lo, (float *)g};
    return tp_sumsq_spans(tp, m, &sp, 1);
}

void tp_partial_floats(const tsr_tp *tp, const tsr_model *m, size_t *tensor, size_t *kv) {
    const tp_span all = {0, m->n_params, NULL};
    tp_pack p = {NULL, 0, 0, 0.0};
    each_stretch(tp, m, TP_SUM_TENSOR, &all, 1, pack_stretch, &p);
    *tensor = p.n;
    p.n = 0;
    each_stretch(tp, m, TP_SUM_KV, &all, 1, pack_stretch, &p);
    *kv = p.n;
}

/* ---- a step's bytes ------------------------------------------------------------------------ */

/* the collectives of (N, C) activations a microbatch's pass runs: with sequence parallelism
 * all-gathers and reduce-scatters (*xs), without it all-reduces (*ar) */
static void pass_collectives(const tsr_model *m, const tsr_tp *tp, int *xs, int *ar) {
    const int L = m->L, post = m->cfg.norm_placement != TSR_NPLACE_PRE;
    const tsr_actckpt_kind k = m->cfg.activation_checkpointing;
    /* a checkpointed layer's recomputation: block reruns both halves (a gather each with
     * sequence parallelism, the mixer's output sum), attention or mlp one half's gather */
    const int re_xs = k == TSR_ACTCKPT_BLOCK ? 3 : k == TSR_ACTCKPT_NONE ? 0 : 1;
    const int re_ar = k == TSR_ACTCKPT_BLOCK ? 1 : 0;
    /* forward: the embedding's sum; each half's gather and sum; the final norm's gather.
     * backward: the head's input gradient; each half's output gradient and input gathered, its
     * input gradient summed, its post-norm's output recomputed; the embedding's gradient */
    *xs = 1 + 4 * L + 1 + 1 + L * 2 * (3 + post) + m->n_ckpt * re_xs + 1;
    *ar = 1 + 2 * L + 1 + L * 2 * (1 + post) + m->n_ckpt * re_ar;
    if (tp->sp) *ar = 0;
    else *xs = 0;
}

/* model.qk_norm_scope = "projection": each attention layer's sums over the group (decoder_tp.c
 * dec_tp_qknorm_forward / _backward), one forward and one backward, and the forward's again
 * where a checkpointed layer reruns its mixer (block and attention modes) */
static int qkn_reductions(const tsr_model *m) {
    const tsr_actckpt_kind k = m->cfg.activation_checkpointing;
    int n = 0;
    if (!m->cfg.qk_norm || m->cfg.qk_norm_scope != TSR_QKN_PROJECTION) return 0;
    for (int l = 0; l < m->L; l++)
        if (!config_layer_linear(&m->cfg, l))
            n += 2 + (model_ckpt_layer(m, l) &&
                      (k == TSR_ACTCKPT_BLOCK || k == TSR_ACTCKPT_ATTENTION));
    return n;
}

uint64_t tp_step_bytes(const tsr_model *m, int micro, int B, int T, size_t act) {
    const tsr_tp *tp = m->tp;
    if (!tp || tp->T <= 1) return 0;
    const uint64_t N = (uint64_t)B * (uint64_t)T, nc = N * (uint64_t)m->C * act;
    int xs, ar;
    pass_collectives(m, tp, &xs, &ar);
    uint64_t one = (uint64_t)xs * tp_collective_bytes(tp->T, 0, nc) +
                   (uint64_t)ar * tp_collective_bytes(tp->T, 1, nc);
    /* the cross-entropy: each row's maximum, then its sum of exponentials and target logit */
    one += tp_collective_bytes(tp->T, 1, N * sizeof(float)) +
           tp_collective_bytes(tp->T, 1, 2 * N * sizeof(double));
    one += (uint64_t)qkn_reductions(m) * tp_collective_bytes(tp->T, 1, 2 * N * sizeof(double));
    size_t tensor, kv;
    tp_partial_floats(tp, m, &tensor, &kv);
    return (uint64_t)micro * one + tp_collective_bytes(tp->T, 1, tensor * sizeof(float)) +
           tp_collective_bytes(tp->R, 1, kv * sizeof(float));
}

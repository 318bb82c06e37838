/* model_pp.c — pipeline parallelism's cut of a model (model_pp.h): the cost of each layer, the
 * balanced cut, a rank's part and its chunks, the part's runs of the whole model's layout.
 */
#include "model/model_pp.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "model/layer_kind.h"

/* ---- the cut ------------------------------------------------------------------------------- */

double pp_layer_cost(const tsr_model *m, int l, int T) {
    const tsr_layer_kind *mix = model_mixer(&m->cfg, l), *mlp = model_mlp(&m->cfg, l);
    double params = 0.0, own = 0.0;
    for (int id = 0; id < TSR_P_COUNT; id++) {
        size_t len;
        if (model_unit_slice(m, (tsr_param_id)id, l + 1, &len) != SIZE_MAX) params += (double)len;
        else if (m->params_info[id].ep && model_layer_slot(m, (tsr_param_id)id, l) >= 0)
            params += (double)m->params_info[id].numel / model_param_layers(m, (tsr_param_id)id);
    }
    if (mlp->idle) params -= mlp->idle(m);
    if (mix->flops) own += mix->flops(m, l, T);
    if (mlp->flops) own += mlp->flops(m, l, T);
    return 6.0 * params + own;
}

double pp_head_cost(const tsr_model *m) { return 6.0 * (double)m->V * m->C; }

/* the most costly stage of the best cut of layers [0, j) into s stages: best[s][j] (a table of
 * (S + 1) x (L + 1)); at[s][j] the first layer of its last stage */
static void balance(const double *pre, int L, int S, double head, double *best, int *at) {
    const double inf = 1e300;
    for (int s = 0; s <= S; s++)
        for (int j = 0; j <= L; j++) best[s * (L + 1) + j] = inf;
    best[0] = 0.0;
    for (int s = 1; s <= S; s++)
        for (int j = s; j <= L; j++)
            for (int i = s - 1; i < j; i++) { /* the last stage: layers [i, j) */
                const double last = pre[j] - pre[i] + (s == S && j == L ? head : 0.0);
                const double prev = best[(s - 1) * (L + 1) + i];
                const double worst = prev > last ? prev : last;
                if (worst < best[s * (L + 1) + j]) {
                    best[s * (L + 1) + j] = worst;
                    at[s * (L + 1) + j] = i;
                }
            }
}

void pp_cut(const tsr_model *m, const tsr_config *cfg, int T, int S, int *cut) {
    const int L = m->L;
    char why[600];
    if (cfg->pipeline_layout[0]) {
        if (config_pipeline_layout(cfg->pipeline_layout, L, S, cut, why, sizeof why) != 0)
            tsr_die(TSR_EXIT_INTERNAL, "parallel.pipeline_layout: %s (the config check let it "
                    "through)", why);
        return;
    }
    double *pre = tsr_malloc((size_t)(L + 1) * sizeof *pre);
    double *best = tsr_malloc((size_t)(S + 1) * (size_t)(L + 1) * sizeof *best);
    int *at = tsr_calloc((size_t)(S + 1) * (size_t)(L + 1), sizeof *at);
    pre[0] = 0.0; /* (the embedding's lookup costs nothing here) */
    for (int l = 0; l < L; l++) pre[l + 1] = pre[l] + pp_layer_cost(m, l, T);
    balance(pre, L, S, pp_head_cost(m), best, at);
    cut[S] = L;
    for (int s = S; s > 0; s--) cut[s - 1] = at[s * (L + 1) + cut[s]];
    free(pre);
    free(best);
    free(at);
}

/* ---- a part of the model ------------------------------------------------------------------- */

/* the floats of tensor id's padded vocabulary rows in m (0 but for the embedding and the head) */
static size_t padded_rows(const tsr_model *m, tsr_param_id id) {
    if ((id != TSR_P_WTE && id != TSR_P_LMHEAD) || !m->params_info[id].numel) return 0;
    return (size_t)(m->Vp - m->V) * (size_t)m->C;
}

/* m (the whole model's sizes, its layer checkpointing [glo, glo + gn)) becomes the part of
 * `part`: its layers and their kinds' counts, the checkpointed ones among them, the layout */
static void part_layout(tsr_model *m, const tsr_model_part *part, int glo, int gn) {
    m->cfg.part = *part;
    m->cfg.n_layer = 0;
    for (int i = 0; i < part->n; i++) m->cfg.n_layer += part->len[i];
    m->L = m->cfg.n_layer;
    m->LM = m->LL = 0;
    m->ckpt_lo = m->n_ckpt = 0;
    for (int l = 0; l < m->L; l++) {
        const int g = config_layer_at(&m->cfg, l);
        m->LM += model_moe_layer(m, l);
        m->LL += config_layer_linear(&m->cfg, l);
        if (g >= glo && g < glo + gn && m->n_ckpt++ == 0) m->ckpt_lo = l;
    }
    m->LD = m->L - m->LM;
    m->LX = m->cfg.kv_lora_rank > 0 ? m->L - m->LL : 0; /* (as model_init: MLA's layers) */
    m->LA = m->L - m->LL - m->LX;
    model_relayout(m);
    m->n_params_counted = 0;
    for (int id = 0; id < TSR_P_COUNT; id++)
        m->n_params_counted += m->params_info[id].numel - padded_rows(m, (tsr_param_id)id);
}

/* the part of rank p (chunks c: stages c P + p) */
static tsr_model_part rank_part(const tsr_pp *pp) {
    tsr_model_part part = {.n = pp->V, .no_embed = pp->p != 0, .no_head = pp->p != pp->P - 1};
    for (int c = 0; c < pp->V; c++) {
        const int s = pp_chunk_stage(pp, c);
        part.first[c] = pp->cut[s], part.len[c] = pp->cut[s + 1] - pp->cut[s];
    }
    return part;
}

/* the slot in model m's stack of tensor id of its first layer in [l0, l0 + n) of that kind, and
 * how many of them; 0 when none */
static int slots_in(const tsr_model *m, tsr_param_id id, int l0, int n, int *first) {
    int k = 0;
    for (int l = l0; l < l0 + n; l++) {
        const int s = model_layer_slot(m, id, l);
        if (s >= 0 && k++ == 0) *first = s;
    }
    return k;
}

/* chunk c: a part of its one range, its tensors at their slices of the rank's layout */
static void chunk_layout(tsr_pp *pp, const tsr_model *m, int c, int glo, int gn) {
    tsr_model *v = &pp->chunk[c];
    const int s = pp_chunk_stage(pp, c);
    tsr_model_part part = {.n = 1, .no_embed = s != 0, .no_head = s != pp->S - 1};
    part.first[0] = pp->cut[s], part.len[0] = pp->cut[s + 1] - pp->cut[s];
    *v = pp->global;
    part_layout(v, &part, glo, gn);
    for (int id = 0; id < TSR_P_COUNT; id++) {
        tsr_param_info *p = &v->params_info[id];
        const tsr_param_info *r = &m->params_info[id];
        int first = 0;
        if (!p->numel) continue;
        if (!model_param_per_layer((tsr_param_id)id)) p->offset = r->offset;
        else if (slots_in(m, (tsr_param_id)id, pp->chunk_l0[c], v->L, &first))
            p->offset = r->offset + (size_t)first * (r->numel / (size_t)m->depth[id]);
        if (!r->numel || p->offset + p->numel > r->offset + r->numel)
            tsr_die(TSR_EXIT_INTERNAL, "pipeline: chunk %d's %s lies outside the rank's", c,
                    p->name);
    }
    v->n_params = m->n_params;
    v->pp = NULL;
    v->global = &pp->global;
}

/* part m's runs of the whole model g: a root tensor whole (a tied wte's second copy, a part
 * without the embedding that holds wte, not counted), a per-layer tensor a run per range of the
 * part (its layers' slices), into l */
static void part_runs(pp_part_layout *l, const tsr_model *g, const tsr_model *m) {
    const tsr_model_part *part = &m->cfg.part;
    l->runs = tsr_malloc((size_t)TSR_P_COUNT * (size_t)part->n * sizeof *l->runs);
    for (int id = 0; id < TSR_P_COUNT; id++) {
        const tsr_param_info *p = &m->params_info[id];
        l->off[id] = p->offset;
        if (!p->numel || p->ep) continue;
        if (!model_param_per_layer((tsr_param_id)id)) {
            const int counted = id != TSR_P_WTE || !part->no_embed;
            l->runs[l->n_runs++] = (tp_run){id, 1, p->numel, 0, p->numel, 0, p->numel,
                                            TP_SUM_NONE, (unsigned char)counted};
            continue;
        }
        const size_t slice = p->numel / (size_t)m->depth[id];
        for (int c = 0, l0 = 0; c < part->n; l0 += part->len[c++]) {
            int lf = 0, gf = 0;
            const int k = slots_in(m, (tsr_param_id)id, l0, part->len[c], &lf);
            if (!k) continue;
            slots_in(g, (tsr_param_id)id, part->first[c], part->len[c], &gf);
            l->runs[l->n_runs++] = (tp_run){id, 1, k * slice, lf * slice, k * slice, gf * slice,
                                            k * slice, TP_SUM_NONE, 1};
        }
    }
}

/* every pipeline rank's part's runs (its layout from the whole model's, nothing allocated) */
static void all_parts(tsr_pp *pp, int glo, int gn) {
    pp->parts = tsr_calloc((size_t)pp->P, sizeof *pp->parts);
    tsr_model *q = tsr_malloc(sizeof *q);
    tsr_pp other = *pp;
    for (other.p = 0; other.p < pp->P; other.p++) {
        *q = pp->global;
        const tsr_model_part part = rank_part(&other);
        part_layout(q, &part, glo, gn);
        part_runs(&pp->parts[other.p], &pp->global, q);
    }
    free(q);
}

int pp_part_runs(const tsr_pp *pp, int q, tsr_param_id id, tp_run *runs, size_t *lbase) {
    const pp_part_layout *l = &pp->parts[q];
    int n = 0;
    *lbase = l->off[id];
    for (size_t i = 0; i < l->n_runs; i++)
        if (l->runs[i].id == (int)id) runs[n++] = l->runs[i];
    return n;
}

/* tensor run tr of split model s's tensor id as blocks of one layer's slice each: a replicated
 * tensor's one run of all its layers cut at them */
static tp_run layer_blocks(const tsr_model *s, tsr_param_id id, const tp_run *tr) {
    const size_t depth = (size_t)s->depth[id], slice = s->params_info[id].numel / depth;
    if (tr->count != 1 || depth == 1) return *tr;
    return (tp_run){tr->id, depth, slice, 0, slice, 0, slice, tr->sum, tr->counted};
}

/* part run pr (of the split model s: layers whole, model_pp.h) after tensor run tr (the split's
 * elements in the whole model): the part's elements in the whole model */
static tp_run compose(const tsr_model *s, tsr_param_id id, const tp_run *pr, const tp_run *tr) {
    tp_run r = *tr;
    r.counted = (unsigned char)(pr->counted && tr->counted);
    if (!model_param_per_layer(id)) return r;
    r = layer_blocks(s, id, tr), r.counted = (unsigned char)(pr->counted && tr->counted);
    const size_t slice = s->params_info[id].numel / (size_t)s->depth[id];
    const size_t per = r.count / (size_t)s->depth[id]; /* (blocks a layer) */
    const size_t lf = pr->local / slice, gf = pr->global / slice, k = pr->len / slice;
    r.count = k * per;
    r.local += lf * slice;
    r.global += gf * per * r.gstride;
    return r;
}

int pp_tp_runs(const tsr_pp *pp, const tsr_tp *tp, int q, tsr_param_id id, tp_run *runs,
               size_t *lbase) {
    tp_run pr[TSR_PART_MAX], tr[TP_MAX_RUNS];
    const int np = pp_part_runs(pp, q / tp->T, id, pr, lbase);
    const int nt = tp_tensor_runs(&tp->global, tp->T, q % tp->T, tp->sp, id, tr);
    int n = 0;
    for (int i = 0; i < np; i++)
        for (int j = 0; j < nt; j++) runs[n++] = compose(&pp->global, id, &pr[i], &tr[j]);
    return n;
}

/* tensor parallelism's runs of this rank (model_tp.h: its split tensors in the whole model)
 * become its part's (pp_tp_runs) */
static void tensor_runs_of_part(const tsr_pp *pp, tsr_tp *tp) {
    tp_run *runs = tsr_malloc((size_t)TSR_P_COUNT * PP_TP_MAX_RUNS * sizeof *runs);
    size_t n = 0, lbase;
    for (int id = 0; id < TSR_P_COUNT; id++)
        n += (size_t)pp_tp_runs(pp, tp, pp->p * tp->T + tp->t, (tsr_param_id)id, runs + n, &lbase);
    free(tp->runs);
    tp->runs = runs, tp->n_runs = n;
}

void model_set_pipeline(tsr_model *m, tsr_pp *pp, int P, int V, int p, const int *cut) {
    memset(pp, 0, sizeof *pp);
    if (P <= 1) return;
    if (V > TSR_PART_MAX)
        tsr_die(TSR_EXIT_INTERNAL, "pipeline: %d chunks a rank (the config check let it "
                "through)", V);
    pp->P = P, pp->V = V, pp->S = P * V, pp->p = p;
    pp->cut = tsr_malloc((size_t)(pp->S + 1) * sizeof *pp->cut);
    memcpy(pp->cut, cut, (size_t)(pp->S + 1) * sizeof *cut);
    pp->global = *m; /* (nothing allocated yet: the layout and sizes only) */
    const int glo = m->ckpt_lo, gn = m->n_ckpt;
    const tsr_model_part part = rank_part(pp);
    part_layout(m, &part, glo, gn);
    for (int c = 0, l0 = 0; c < V; l0 += part.len[c++]) {
        pp->chunk_l0[c] = l0;
        for (int l = 0; l < part.first[c]; l++) pp->moe_before[c] += model_moe_layer(&pp->global, l);
        chunk_layout(pp, m, c, glo, gn);
    }
    all_parts(pp, glo, gn);
    pp->runs = pp->parts[p].runs, pp->n_runs = pp->parts[p].n_runs;
    m->pp = pp;
    m->global = m->tp ? &m->tp->global : &pp->global;
    for (int c = 0; c < V; c++) pp->chunk[c].global = m->global;
    if (m->tp) tensor_runs_of_part(pp, m->tp);
}

/* a chunk's unit u as its part's (struct pp_chunk_src) */
static int part_unit(const struct pp_chunk_src *s, int u) { return u ? u + s->l0 : 0; }

static void chunk_get(void *ctx, int u, int backward, float **w, float **g) {
    const struct pp_chunk_src *s = ctx;
    s->part->get(s->part->ctx, part_unit(s, u), backward, w, g);
}

static void chunk_put(void *ctx, int u, int backward) {
    const struct pp_chunk_src *s = ctx;
    s->part->put(s->part->ctx, part_unit(s, u), backward);
}

void pp_attach(tsr_pp *pp, const tsr_model *m) {
    for (int c = 0; pp && c < pp->V; c++) {
        tsr_model *v = &pp->chunk[c];
        pp->chunk_map[c] = (struct pp_chunk_src){m->src, pp->chunk_l0[c]};
        pp->chunk_src[c] = (tsr_param_source){&pp->chunk_map[c], chunk_get, chunk_put};
        v->params = m->params, v->grads = m->grads, v->src = m->src ? &pp->chunk_src[c] : NULL;
        v->alibi_slopes = m->alibi_slopes, v->rope_freqs = m->rope_freqs;
        v->be = m->be;
        v->lora = m->lora, v->ring = m->ring, v->cpN = m->cpN;
        v->ep = m->ep; /* (the store of the part's MoE layers: its chunks' found by place) */
    }
}

void pp_free(tsr_pp *pp) {
    free(pp->cut);
    for (int q = 0; pp->parts && q < pp->P; q++) free(pp->parts[q].runs);
    free(pp->parts);
    memset(pp, 0, sizeof *pp);
}

int pp_chunk_stage(const tsr_pp *pp, int c) { return c * pp->P + pp->p; }

int pp_tied_copy(const tsr_pp *pp, const tsr_model *m) {
    return pp && pp->P > 1 && m->cfg.tie_embeddings && !m->cfg.part.no_head &&
           m->cfg.part.no_embed;
}

void pp_wte_range(const tsr_model *m, size_t *lo, size_t *n) {
    *lo = m->params_info[TSR_P_WTE].offset, *n = m->params_info[TSR_P_WTE].numel;
}

double pp_sumsq(const tsr_pp *pp, const tsr_model *m, const float *g, size_t lo, size_t hi) {
    size_t a, n;
    pp_wte_range(m, &a, &n);
    const size_t x = a > lo ? a : lo, y = a + n < hi ? a + n : hi; /* (the copy: not counted) */
    if (!pp_tied_copy(pp, m) || x >= y) return m->ops->sumsq(g, hi - lo);
    return m->ops->sumsq(g, x - lo) + m->ops->sumsq(g + (y - lo), hi - y);
}

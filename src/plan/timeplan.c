/* timeplan.c — tessera-train --time (timeplan.h; docs/planning.md). */
#include "plan/timeplan.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "model/model_ring.h"
#include "fsutil.h"
#include "mesh/mesh.h"
#include "metrics_units.h"
#include "pipeline/pp_schedule.h"

#define TP_ROWS 512             /* rows of a table (TSR_PROFILE's own limit is 256 ops) */
#define TP_FILE_MAX (1 << 20)   /* bytes of a table file */
#define TP_NAME 32

typedef struct tp_row {
    char name[TP_NAME];
    double a, b, c;    /* the shape (0: unused) */
    double calls, ms;  /* per step */
} tp_row;

typedef struct tp_table {
    tp_row r[TP_ROWS];
    int n, steps;
    char path[4096], gpu[64];
} tp_table;

/* What the table's run measured, reduced to rates (see timeplan.h) */
typedef struct tp_rates {
    double fb_ms, opt_ms;           /* forward + backward; AdamW + gradient norm */
    double gemm_ms, gemm_flops;     /* per step */
    double att_ms, att_flops;
    double xent_ms, xent_logits;
    double rest_ms, rest_units;     /* tokens x layers x d_model */
    double params;                  /* the matmuls' weights: AdamW's work */
    double B, T, L, C, Vp, M;       /* the reference run's shape; M microbatches a step */
} tp_rates;

/* Link figures: the health checker's expected NCCL bus bandwidth for the model
 * (healthcheck/healthcheck.cfg: nccl_node, nccl_pairs) */
static const struct { const char *gpu; double node, net; const char *src; } link_table[] = {
    {"H100", 460.0, 350.0, "healthcheck.cfg's H100 nccl_node (Azure ND H100 v5's limit) and "
                           "nccl_pairs (an estimate: 8 x 400 Gb/s NDR a node)"},
    {"H200", 431.0, 350.0, "healthcheck.cfg's H200 nccl_node (Azure ND H200 v5's limit) and "
                           "nccl_pairs (an estimate: 8 x 400 Gb/s NDR a node)"},
    {"A100", 228.0, 180.0, "healthcheck.cfg's A100 nccl_node (Azure NDm A100 v4's limit) and "
                           "nccl_pairs (an estimate: 8 x 200 Gb/s HDR a node)"},
};

int timeplan_parse_link(const char *s, timeplan_opts *o, char *why, size_t n) {
    char *end;
    double node = strtod(s, &end), net = node;
    if (end != s && *end == ',') {
        const char *p = end + 1;
        net = strtod(p, &end);
        if (end == p) end = (char *)s; /* nothing after the comma */
    }
    if (end == s || *end || !(node > 0 && node <= 1e5 && net > 0 && net <= 1e5)) {
        snprintf(why, n, "--link %s: expected NODE[,NET], bus bandwidth in GB/s (0 < x <= 100000) "
                 "within a node and between nodes, e.g. --link 431,350", s);
        return -1;
    }
    o->link_node = node, o->link_net = net;
    return 0;
}

/* ---- the table ---- */

static void parse_shape(const char *s, tp_row *r) {
    r->a = r->b = r->c = 0;
    if (strcmp(s, "-") == 0) return;
    char *end;
    r->a = strtod(s, &end);
    if (*end == 'x') r->b = strtod(end + 1, &end);
    if (*end == 'x') r->c = strtod(end + 1, &end);
}

/* one row of TSR_PROFILE's table: the op (28 columns), shape, calls, ms/step, us/call, % f+b */
static int parse_row(const char *line, int steps, tp_row *r) {
    size_t len = strlen(line);
    if (len < 30 || line[28] != ' ') return -1;
    memcpy(r->name, line, 28);
    r->name[28] = '\0';
    for (int i = 27; i >= 0 && r->name[i] == ' '; i--) r->name[i] = '\0';
    char shape[64];
    double calls, ms, us, pct;
    if (!r->name[0] || sscanf(line + 29, "%63s %lf %lf %lf %lf", shape, &calls, &ms, &us, &pct) != 5 ||
        !(calls >= 0 && ms >= 0 && ms < 1e9))
        return -1;
    parse_shape(shape, r);
    r->calls = calls / steps, r->ms = ms;
    return 0;
}

/* The table's lines: '#' comments, the header "...TSR_PROFILE device time per op ... over N
 * step(s)", the column header, the rows; it ends at the first other line. */
static int parse_table(tp_table *tb, char *text) {
    int line_no = 0, state = 0; /* 0: before the header, 1: column header next, 2: rows */
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        line_no++;
        if (line[0] == '#') continue;
        const char *h = strstr(line, "TSR_PROFILE device time per op");
        if (state == 0) {
            if (h && sscanf(strstr(h, " over ") ? strstr(h, " over ") : "", " over %d step",
                            &tb->steps) == 1 && tb->steps > 0)
                state = 1;
            continue;
        }
        if (state == 1) {
            if (strncmp(line, "op ", 3) != 0) break;
            state = 2;
            continue;
        }
        if (tb->n == TP_ROWS) {
            tsr_error("%s: more than %d rows in the table", tb->path, TP_ROWS);
            return TSR_EXIT_DATA;
        }
        if (parse_row(line, tb->steps, &tb->r[tb->n]) != 0) break; /* the table's end */
        tb->n++;
    }
    if (state != 2 || tb->n == 0) {
        tsr_error("%s: no TSR_PROFILE table in it (%d lines): expected the header line 'NAME: "
                  "TSR_PROFILE device time per op (CUDA events) over N steps', the column line "
                  "'op shape calls ms/step us/call %% f+b' and its rows (docs/planning.md)",
                  tb->path, line_no);
        return TSR_EXIT_DATA;
    }
    return 0;
}

static int load_table(tp_table *tb) {
    struct stat st;
    FILE *f = fopen(tb->path, "rb");
    if (!f || fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > TP_FILE_MAX) {
        tsr_error("%s: %s", tb->path, !f ? "cannot open" : st.st_size > TP_FILE_MAX
                                                ? "over 1 MiB: not a TSR_PROFILE table"
                                                : "not a regular file");
        if (f) fclose(f);
        return TSR_EXIT_DATA;
    }
    char *text = tsr_malloc((size_t)st.st_size + 1);
    size_t got = fread(text, 1, (size_t)st.st_size, f);
    fclose(f);
    text[got] = '\0';
    int rc = parse_table(tb, text);
    free(text);
    return rc;
}

/* o->gpu: a file (has a '/' or exists), else a model whose table is looked for as
 * PREFIX/share/tessera/profiles/NAME.prof beside the program, then the checkout's
 * configs/profiles/. 1: found (tb->path), 0: a known model with no table, -1: neither (said). */
static int find_table(tp_table *tb, const char *gpu) {
    if (strchr(gpu, '/') || access(gpu, F_OK) == 0) {
        snprintf(tb->path, sizeof tb->path, "%s", gpu);
        snprintf(tb->gpu, sizeof tb->gpu, "the GPU of %s", gpu);
        return 1;
    }
    snprintf(tb->gpu, sizeof tb->gpu, "%s", gpu);
    for (char *p = tb->gpu; *p; p++) *p = (char)toupper((unsigned char)*p);
    char exe[4096];
    fs_exe_dir(exe, sizeof exe);
    static const char *const dirs[] = {"../share/tessera/profiles", "../configs/profiles"};
    for (int i = 0; *exe && i < 2; i++)
        if (!tsr_snprintf(tb->path, sizeof tb->path, "%s/%s/%s.prof", exe, dirs[i], tb->gpu) &&
            access(tb->path, R_OK) == 0)
            return 1;
    snprintf(tb->path, sizeof tb->path, "configs/profiles/%s.prof", tb->gpu);
    if (metrics_peak_flops(tb->gpu, 0) > 0) return 0;
    tsr_error("--time=%s: not a GPU model tessera knows (H100, H200, A100) nor a file holding a "
              "TSR_PROFILE table", gpu);
    return -1;
}

/* ---- rates ---- */

static const tp_row *row(const tp_table *tb, const char *name) {
    for (int i = 0; i < tb->n; i++)
        if (strcmp(tb->r[i].name, name) == 0) return &tb->r[i];
    return NULL;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* sums the table's rows into rates; NULL when a class the plan needs has no row (why says) */
static int rates_of(const tp_table *tb, tp_rates *q, char *why, size_t n) {
    memset(q, 0, sizeof *q);
    const tp_row *fb = row(tb, "step: forward+backward"), *opt = row(tb, "step: AdamW"),
                 *gn = row(tb, "step: gradient norm");
    double sum = 0, att_fwd_calls = 0;
    for (int i = 0; i < tb->n; i++) {
        const tp_row *r = &tb->r[i];
        if (starts(r->name, "step: ")) continue;
        sum += r->ms;
        if (starts(r->name, "matmul_forward")) {
            q->gemm_ms += r->ms, q->gemm_flops += r->calls * 2 * r->a * r->b * r->c;
            q->params += r->calls * r->b * r->c;
        } else if (starts(r->name, "matmul_backward")) {
            q->gemm_ms += r->ms, q->gemm_flops += r->calls * 4 * r->a * r->b * r->c;
        } else if (starts(r->name, "attention_")) {
            q->att_ms += r->ms, q->B = r->a, q->T = r->b;
            if (strcmp(r->name, "attention_forward") == 0) att_fwd_calls += r->calls;
        } else if (starts(r->name, "softmax_xent")) {
            q->xent_ms += r->ms, q->Vp = r->b, q->M = r->calls;
            q->xent_logits += r->calls * r->a * r->b;
        } else if (!q->C && (strstr(r->name, "layernorm") || strstr(r->name, "rmsnorm"))) {
            q->C = r->b;
        }
    }
    const char *miss = !fb ? "'step: forward+backward'" : !opt ? "'step: AdamW'"
                       : !q->gemm_ms ? "matmul_forward/matmul_backward" : !att_fwd_calls ? "attention_forward"
                       : !q->xent_ms ? "softmax_xent" : !q->C ? "layernorm_* or rmsnorm_*" : NULL;
    if (miss) return snprintf(why, n, "%s: no %s row", tb->path, miss), -1;
    q->L = att_fwd_calls / q->M;
    q->params /= q->M;
    /* attention's FLOPs as MFU counts them (docs/mfu.md): 12 L (NH hs) T a token, the forward a
     * third; the table's width C = NH hs (GPT-2's) */
    q->att_flops = 12 * q->L * q->C * q->T * q->B * q->T * q->M;
    q->fb_ms = fb->ms, q->opt_ms = opt->ms + (gn ? gn->ms : 0);
    /* the rest of the forward + backward: its other rows and the gaps between ops */
    q->rest_ms = fb->ms - q->gemm_ms - q->att_ms - q->xent_ms;
    q->rest_units = q->B * q->T * q->M * q->L * q->C;
    if (!(q->rest_ms > 0 && q->params > 0 && q->B > 0 && q->T > 0 && sum > 0))
        return snprintf(why, n, "%s: the rows add up to more than 'step: forward+backward' or "
                        "give no shape", tb->path), -1;
    return 0;
}

/* ---- the recipe ---- */

/* what the recipe needs that a table of dense AdamW training cannot say; NULL: nothing */
static const char *unmeasured(const plan_view *t, const tp_table *tb) {
    int lora = 0;
    for (int i = 0; i < tb->n; i++) lora |= starts(tb->r[i].name, "lora_");
    if (t->cfg.lora.rank > 0 && !lora) return "LoRA's adapter ops (lora_forward, lora_backward)";
    if (t->cfg.optim.name == TSR_OPTIM_MUON) return "Muon's orthogonalisation (optim.name = muon)";
    return NULL;
}

/* the step of one rank of W: compute (ms), its backward part that collectives can hide under
 * (ms), bytes and exposed time of its collectives */
typedef struct tp_step {
    int W, G, nodes;
    int N, D;                /* the mesh's context group and data ranks (mesh_build's) */
    int Tt;                  /* and its tensor group (parallel.tensor) */
    int P;                   /* the pipeline's ranks (parallel.pipeline; 1: none) */
    int64_t per_rank, micro; /* sequences a data rank; a microbatch's (at most per_rank) */
    double fb, compute, overlap, bytes, comm, exposed;
    double att;              /* attention's part of fb, its recomputation aside (the ring's cover) */
    double bubble, idle;     /* the pipeline's: the schedule's idle share, its ms (in exposed) */
    double node, net;        /* bytes on the node's links and on the network's */
    char na[160]; /* why the row has no figures */
} tp_step;

static double recompute_share(const tsr_config *c) {
    int lo, n;
    const char *key;
    char why[200];
    if (c->model.activation_checkpointing == TSR_ACTCKPT_NONE ||
        config_actckpt_layers(&c->model, &lo, &n, &key, why, sizeof why) != 0)
        return 0;
    return (double)n / c->model.n_layer;
}

/* the element-wise work of a token beyond the dense layers' L d_model (the rest's unit, priced at
 * its rate; docs/planning.md "Mixtures of experts and hybrid layers"): a MoE layer's K rows of
 * d_model gathered and combined, a Gated DeltaNet layer's convolution and gates over its CD
 * channels and its gated norm over HV d_v */
static double extra_units(const tsr_model *m) {
    const double cd = 2.0 * m->HKl * m->dkl + (double)m->HVl * m->dvl;
    return (double)m->LM * m->K * m->C + (double)m->LL * (cd + (double)m->HVl * m->dvl);
}

/* parallel.pipeline: the costliest pipeline rank's share of the forward and backward, its
 * chunks' layers and the head on the last stage priced by the cut's own cost (model_pp.h); 1
 * without a pipeline */
static double stage_share(const plan_view *t) {
    const tsr_pp *pp = &t->part.pp;
    const tsr_model *g = t->model.global;
    if (t->mesh.P <= 1 || !g || !pp->cut) return 1;
    double most = 0, all = 0;
    for (int r = 0; r < pp->P; r++) {
        double c = 0;
        for (int s = r; s < pp->S; s += pp->P) {
            for (int l = pp->cut[s]; l < pp->cut[s + 1]; l++) c += pp_layer_cost(g, l, t->T);
            if (s == pp->S - 1) c += pp_head_cost(g);
        }
        most = c > most ? c : most, all += c;
    }
    return all > 0 ? most / all : 1;
}

static void compute_of(const plan_view *t, const tp_rates *q, tp_step *s) {
    const tsr_model *m = t->model.global ? t->model.global : &t->model; /* (the whole model's) */
    /* a context group's N ranks share its sequences, each computing T / N positions of each (the
     * zig-zag split gives each the same attention work: docs/parallelism.md); a tensor group's
     * Tt ranks share them too, each computing 1/Tt of every matmul, head and logit, and of the
     * norms and element-wise work with sequence parallelism (all of that without) */
    double tok = (double)s->per_rank * t->T / s->N, split = s->Tt;
    double rest = t->cfg.sequence ? split : 1;
    double att = 12.0 * m->QD * model_attn_keys(m, t->T); /* per token, as in flops_per_token */
    double gemm = (t->out.flops_per_token - att) * tok / split;
    /* activation checkpointing runs a checkpointed layer's forward again: a third more of it */
    double re = 1 + recompute_share(&t->cfg) / 3;
    double ms = gemm * re / (q->gemm_flops / q->gemm_ms) +
                att * tok / split * re / (q->att_flops / q->att_ms) +
                tok * m->Vp / split / (q->xent_logits / q->xent_ms) +
                tok * (m->L * m->C + extra_units(m)) / rest * re / (q->rest_units / q->rest_ms);
    ms *= stage_share(t); /* (the pipeline's costliest rank) */
    m = &t->model; /* (a rank's parameters: its split's) */
    double owned = (double)m->n_params / (t->cfg.sharding == TSR_SHARD_DDP ? 1 : s->G);
    s->fb = ms, s->compute = ms + q->opt_ms * owned / q->params;
    s->att = att * tok / split / (q->att_flops / q->att_ms);
    /* the last microbatch's backward, less its last layer (two thirds of a pass) */
    s->overlap = ms * s->micro / (double)s->per_rank * 2 / 3 * (m->L - 1) / m->L;
}

static double bw_of(int group, int per_node, const timeplan_opts *o) {
    return (group <= per_node ? o->link_node : o->link_net) * 1e9 / 1e3; /* bytes per ms */
}

/* b bytes over a group of `group` ranks: counted on its link (the node's when it fits one), their
 * ms returned */
static double link_add(tp_step *s, double b, int group, int per_node, const timeplan_opts *o) {
    if (group <= per_node) s->node += b;
    else s->net += b;
    return b / bw_of(group, per_node, o);
}

/* the parameters of one layer, on average (ids whose (id) says which: model_param_per_layer or
 * model_fp8_linear) */
static double layer_params(const tsr_model *m, int (*which)(tsr_param_id)) {
    double Pl = 0;
    for (int id = 0; id < TSR_P_COUNT; id++)
        if (which((tsr_param_id)id)) Pl += (double)m->params_info[id].numel / m->L;
    return Pl;
}

/* precision.fp8_allgather under zero3 / hsdp (docs/cuda.md "FP8"): the bytes a forward pass's
 * layer gathers save, the FP8 linear weights of the FP8 layers up to L-3 moving as E4M3 (one byte,
 * not two; the last two layers gather bf16 for the backward to reuse); *first, *last: the
 * layers. Assumes their shapes are multiples of 16 (cuBLASLt's FP8 rule), as every config's are. */
static double fp8_gather_saved(const plan_view *t, int *first, int *last) {
    const tsr_model *m = &t->model;
    model_fp8_layers(m->L, t->cfg.precision.fp8_skip, first, last);
    if (*last > m->L - 3) *last = m->L - 3;
    if (t->cfg.precision.fp8 == TSR_FP8_NONE || !t->cfg.precision.fp8_allgather ||
        t->cfg.lora.rank > 0 || *last < *first ||
        (t->cfg.sharding != TSR_SHARD_ZERO3 && t->cfg.sharding != TSR_SHARD_HSDP))
        return 0;
    return (*last - *first + 1) * layer_params(m, model_fp8_linear);
}

/* bytes one rank sends per step (docs/sharding.md's formulas; the GPU path gathers bf16 weights,
 * the FP8 all-gather's in part E4M3, sums fp32 gradients) and the part of their time the
 * schedule does not hide */
static void comm_of(const plan_view *t, const timeplan_opts *o, int per_node, tp_step *s) {
    const tsr_model *m = &t->model;
    /* (a split model's: its own parameters, summed over the W / Tt ranks that hold the same) */
    double N = (double)m->n_params, Pl = layer_params(m, model_param_per_layer);
    /* the ranks that hold the same part; their groups span a stage's ranks (W / P) */
    const int Wd = s->W / (s->Tt * s->P), span = s->W / s->P;
    double W = Wd;
    double G = s->G, R = W / G;
    int f8a, f8b;
    double root = N - m->L * Pl, M = ceil((double)s->per_rank / s->micro), f = (W - 1) / W;
    s->bytes = s->comm = s->exposed = 0;
    if (W == 1) return;
    switch (t->cfg.sharding) {
    case TSR_SHARD_DDP:
    case TSR_SHARD_ZERO1: {
        double grads = (t->cfg.sharding == TSR_SHARD_DDP ? 2 : 1) * f * 4 * N;
        double gather = t->cfg.sharding == TSR_SHARD_DDP ? 0 : f * 2 * N; /* after AdamW */
        s->bytes = grads + gather, s->comm = link_add(s, s->bytes, span, per_node, o);
        double g = s->comm * grads / s->bytes, hidden = g - g / m->L < s->overlap ? g - g / m->L : s->overlap;
        s->exposed = s->comm - hidden;
        break;
    }
    default: { /* zero3 in groups of G (hsdp: then the shard over R replicas) */
        double fg = (G - 1) / G;
        double layers = fg * (2 * M * (2 * m->L - 2) * Pl - M * fp8_gather_saved(t, &f8a, &f8b) +
                              4 * M * m->L * Pl);
        double roots = fg * 6 * root, reps = R > 1 ? 2 * (R - 1) / R * 4 * N / G : 0;
        s->bytes = layers + roots + reps;
        double tl = link_add(s, layers, s->G, per_node, o), fb = s->fb;
        double tr = link_add(s, roots, s->G, per_node, o) + link_add(s, reps, span, per_node, o);
        s->comm = tl + tr;
        /* the first gather and the last reduce-scatter of a layer wait; the rest runs beside
         * the passes when they are longer */
        s->exposed = (tl > fb ? tl - fb : 0) + tl / (M * m->L) + tr;
        break;
    }
    }
}

/* A linear (Gated DeltaNet) layer's state messages under context N, per rank and pass of a
 * microbatch of B sequences (docs/deltanet.md "Context parallelism"): the group's 2N - 2 messages
 * of B (HV dk dv + (K - 1) CD) fp32 over its N ranks */
static double dn_state_bytes(const tsr_model *m, int N, double B) {
    const double cd = 2.0 * m->HKl * m->dkl + (double)m->HVl * m->dvl;
    return (2.0 * N - 2) / N * B * ((double)m->HVl * m->dkl * m->dvl + (m->Kc - 1) * cd) * 4;
}

/* parallel.context = N (docs/parallelism.md "Ring attention"): per attention layer and
 * microbatch each rank passes its key/value blocks (multi-head latent attention: its latent and
 * RoPE key, ring_dims_of) N - 1 hops in the forward, again in the
 * backward with their fp32 gradients N hops (ring_layer_bytes, bf16 activations on the GPU), and
 * a checkpointed layer's recomputation a forward's more, over its context group's link; each hop
 * runs beside the attention of a block, so what the attention's time does not cover waits. A
 * hybrid's linear layers pass their state instead (dn_state_bytes), blocking: all of it waits. */
static void ring_of(const plan_view *t, const timeplan_opts *o, int per_node, tp_step *s) {
    const tsr_model *m = &t->model;
    if (s->N < 2) return;
    double M = ceil((double)s->per_rank / s->micro), re = recompute_share(&t->cfg);
    const int w = ring_dims_of(m).width;
    double fw = (double)ring_layer_bytes(2, s->N, (int)s->micro, t->T, w, 0);
    double bw = (double)ring_layer_bytes(2, s->N, (int)s->micro, t->T, w, 1);
    const double LA = m->L - m->LL, sb = dn_state_bytes(m, s->N, s->micro);
    double tf = link_add(s, M * LA * (1 + re) * fw, s->N, per_node, o),
           tb = link_add(s, M * LA * bw, s->N, per_node, o),
           ts = link_add(s, M * m->LL * (2 + re) * sb, s->N, per_node, o);
    double af = s->att / 3 * (1 + re), ab = s->att * 2 / 3; /* attention's forward, backward */
    s->bytes += M * LA * ((1 + re) * fw + bw) + M * m->LL * (2 + re) * sb;
    s->comm += tf + tb + ts;
    s->exposed += (tf > af ? tf - af : 0) + (tb > ab ? tb - ab : 0) + ts;
}

/* parallel.tensor = Tt (docs/parallelism.md "Tensor parallelism"): a rank's collectives over its
 * tensor group a step (tp_step_bytes, bf16 activations), over the group's link (within a node
 * unless the group is larger); none overlaps compute (each half waits for its sum) */
static void tensor_of(const plan_view *t, const timeplan_opts *o, int per_node, tp_step *s) {
    if (s->Tt < 2 || !t->model.tp) return;
    const int M = (int)ceil((double)s->per_rank / s->micro);
    const double b = (double)tp_step_bytes(&t->model, M, (int)s->micro, t->T, 2);
    const double ms = link_add(s, b, s->Tt, per_node, o);
    s->bytes += b, s->comm += ms, s->exposed += ms;
}

/* parallel.pipeline = P (docs/planning.md "Choosing the layout"): the costliest rank's forward
 * and backward (compute_of) stretched by the schedule's bubble (its table at equal action
 * times, plan_pipeline_table), and the stage sends: each microbatch's activations forward and
 * their gradients back at each of a rank's chunk boundaries (bf16; 1/T of the tokens with
 * sequence parallelism), over the node's link when the pipeline's W ranks fit a node, else the
 * network's (a conservative reading: some hops of a wide stage stay in a node); they run beside the
 * compute but the pipeline's fill and drain, 2 (S - 1) messages on its critical path */
static void pipeline_of(const plan_view *t, const timeplan_opts *o, int per_node, tp_step *s) {
    if (s->P < 2 || !t->part.pp.cut) return;
    const int M = (int)(s->per_rank / s->micro), V = t->part.pp.V;
    int first, last;
    s->bubble = plan_pipeline_table(t, M, &first, &last);
    if (s->bubble < 0) {
        snprintf(s->na, sizeof s->na, "the %s schedule does not build at P %d, V %d, M %d",
                 pp_kind_name((pp_kind)t->cfg.pipeline_schedule), s->P, V, M);
        return;
    }
    s->idle = s->fb * s->bubble / (1 - s->bubble);
    const double msg = (double)s->micro * (t->T / s->N) * t->model.C * 2 /
                       (t->cfg.sequence && s->Tt > 1 ? s->Tt : 1);
    const double ms = link_add(s, 2.0 * M * V * msg, s->W, per_node, o);
    s->bytes += 2.0 * M * V * msg, s->comm += ms;
    s->exposed += s->idle + ms / (M * V) * (t->part.pp.S - 1);
}

/* W's data ranks by the trainer's mesh (mesh_build, as a plan); 0, or why they do not split */
static int data_ranks(const plan_view *t, int per_node, tp_step *s) {
    const int P = t->cfg.pipeline > 1 ? (int)t->cfg.pipeline : 1;
    const long long TN = (t->cfg.tensor > 1 ? t->cfg.tensor : 1) * (t->cfg.context > 1 ? t->cfg.context : 1);
    if (s->W % P || (P > 1 && (s->W / P) % TN)) /* (the mesh below needs whole stages) */
        return snprintf(s->na, sizeof s->na, "parallel.pipeline = %d%s does not divide %d rank%s",
                        P, TN > 1 ? " x parallel.tensor x parallel.context" : "", s->W,
                        s->W > 1 ? "s" : ""), 1;
    tsr_mesh me;
    tsr_dist w = t->dist;
    w.rank = 0, w.world = s->W, w.local_world = s->W < per_node ? s->W : per_node, w.view = NULL;
    mesh_build(&me, &t->cfg, &w, 1);
    s->N = me.N, s->D = me.D, s->Tt = me.T, s->P = me.P > 1 ? me.P : 1;
    mesh_free(&me);
    const long long gb = t->cfg.global_batch;
    if (s->W % s->Tt)
        snprintf(s->na, sizeof s->na, "parallel.tensor = %d does not divide %d rank%s", s->Tt,
                 s->W, s->W > 1 ? "s" : "");
    else if ((s->W / s->Tt) % s->N)
        snprintf(s->na, sizeof s->na, "parallel.context = %d does not divide %d rank%s", s->N,
                 s->W, s->W > 1 ? "s" : "");
    else if (gb % s->D && s->Tt > 1)
        snprintf(s->na, sizeof s->na, "global_batch %lld does not split over %d data ranks (%d "
                 "ranks / parallel.tensor x parallel.context %d)", gb, s->D, s->W, s->N * s->Tt);
    else if (gb % s->D && s->N > 1)
        snprintf(s->na, sizeof s->na, "global_batch %lld does not split over %d data ranks (%d "
                 "ranks / parallel.context %d)", gb, s->D, s->W, s->N);
    else if (gb % s->D)
        snprintf(s->na, sizeof s->na, "global_batch %lld does not split over %d ranks", gb, s->W);
    return s->na[0] != 0;
}

/* one row of the table: W's split of the batch over its data ranks (micro: the recipe's
 * micro_batch), its compute and its collectives */
static void plan_row(const plan_view *t, const tp_rates *q, const timeplan_opts *o, int per_node,
                     int64_t micro, const char *missing, tp_step *s) {
    if (data_ranks(t, per_node, s)) return;
    s->per_rank = t->cfg.global_batch / s->D;
    s->micro = micro < s->per_rank ? micro : s->per_rank;
    const int was = tsr_log_muted(); /* (--fit layout's trials are muted already) */
    tsr_log_mute(1); /* hsdp's group: its reason is said below */
    const int Wt = s->W / (s->Tt * s->P), pn = per_node / s->Tt > 0 ? per_node / s->Tt : 1;
    int bad = run_shard_group(&t->cfg, Wt, Wt < pn ? Wt : pn, &s->G);
    tsr_log_mute(was);
    if (bad) {
        snprintf(s->na, sizeof s->na, "parallel.replica_group = %lld does not divide %d ranks",
                 (long long)t->cfg.replica_group, s->W);
        return;
    }
    if (!missing) compute_of(t, q, s);
    comm_of(t, o, per_node, s);
    ring_of(t, o, per_node, s);
    tensor_of(t, o, per_node, s);
    if (!missing) pipeline_of(t, o, per_node, s);
}

/* ---- printing ---- */

static void human_time(char *buf, size_t n, double s) {
    if (s < 2 * 3600) snprintf(buf, n, "%.1f min", s / 60);
    else if (s < 3 * 86400) snprintf(buf, n, "%.1f h", s / 3600);
    else snprintf(buf, n, "%.1f days", s / 86400);
}

static void print_rates(const tp_table *tb, const tp_rates *q) {
    printf("time plan (--time; docs/planning.md): %s, per-op table %s\n", tb->gpu, tb->path);
    printf("  the table's run: B=%.0f T=%.0f L=%.0f d_model=%.0f vocab %.0f, %.0f microbatch(es) a "
           "step, %d steps; forward+backward %.2f ms, AdamW + gradient norm %.2f ms\n",
           q->B, q->T, q->L, q->C, q->Vp, q->M, tb->steps, q->fb_ms, q->opt_ms);
    printf("  its rates: GEMMs %.3g TFLOP/s (%.2f ms), attention %.3g TFLOP/s (%.2f ms), softmax + "
           "cross-entropy %.3f ps a logit (%.2f ms), the rest %.3f ps a token x layer x d_model "
           "(%.2f ms: norms, element-wise ops, gaps), AdamW + norm %.3f ps a parameter (%.2f ms)\n",
           q->gemm_flops / q->gemm_ms / 1e9, q->gemm_ms, q->att_flops / q->att_ms / 1e9, q->att_ms,
           1e9 * q->xent_ms / q->xent_logits, q->xent_ms, 1e9 * q->rest_ms / q->rest_units,
           q->rest_ms, 1e9 * q->opt_ms / q->params, q->opt_ms);
}

static void print_step(const plan_view *t, const tp_step *s, double peak, int computed) {
    char nodes[16], left[48] = "-", gh[32] = "-";
    snprintf(nodes, sizeof nodes, "%d", s->nodes);
    if (s->na[0]) {
        printf("%6d %6s  %s\n", s->W, nodes, s->na);
        return;
    }
    if (!computed) {
        printf("%6d %6s %9lld %12s %12.1f %10.2f %10s %10s %12s %7s %14s %12s\n", s->W, nodes,
               (long long)s->per_rank, "-", s->bytes / 1e6, s->comm, "-", "-", "-", "-", "-", "-");
        return;
    }
    double step = s->compute + s->exposed, tps = t->cfg.global_batch * t->T / (step / 1e3);
    char mfu[16] = "-";
    if (peak > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100 * t->out.flops_per_token * tps / (s->W * peak));
    if (t->cfg.max_duration.unit != TSR_DUR_EPOCHS) {
        double secs = (double)t->total_steps * step / 1e3;
        human_time(left, sizeof left, secs);
        double h = s->W * secs / 3600;
        snprintf(gh, sizeof gh, h < 100 ? "%.1f" : "%.0f", h);
    }
    printf("%6d %6s %9lld %12.2f %12.1f %10.2f %10.2f %10.2f %12.0f %7s %14s %12s\n", s->W, nodes,
           (long long)s->per_rank, s->compute, s->bytes / 1e6, s->comm, s->exposed, step, tps, mfu,
           left, gh);
}

static void print_assumptions(const plan_view *t, const timeplan_opts *o, int per_node,
                              long long micro, const char *link_src) {
    char dur[32];
    char steps[96];
    duration_format(dur, sizeof dur, t->cfg.max_duration);
    if (t->cfg.max_duration.unit == TSR_DUR_EPOCHS)
        snprintf(steps, sizeof steps, "in epochs: its steps need the data's size (a dry run opens none)");
    else snprintf(steps, sizeof steps, "= %lld steps", (long long)t->total_steps);
    printf("  assumptions (docs/planning.md says how far to trust them):\n"
           "  - every rate of the table holds at the recipe's shapes (GEMM efficiency, attention's "
           "at its T and head size, the memory-bound ops per element); the recipe's norms, RoPE "
           "and SwiGLU cost what the table's norms and element-wise ops cost per element\n"
           "  - global_batch %lld and micro_batch %lld as in the recipe at every W (per-rank batch "
           "global_batch / the data ranks, W / parallel.context; micro_batch at most that); "
           "max_duration %s %s\n",
           (long long)t->cfg.global_batch, micro, dur, steps);
    printf("  - %d GPUs a node; bus bandwidth %.0f GB/s within a node, %.0f GB/s between nodes "
           "(%s); every collective bandwidth-bound (no latency term), one link at a time\n",
           per_node, o->link_node, o->link_net, link_src);
    printf("  - overlap: ddp's and zero1's gradient sums hide under the last microbatch's backward "
           "but the last layer's; zero3's layer gathers and reduce-scatters under all the passes "
           "but a layer's; zero1's weight gather, zero3's root and hsdp's replica sum do not hide\n"
           "  - the data, checkpoints, evaluation and logging cost nothing; no straggler, no "
           "failure, no requeue\n");
    if (t->model.E)
        printf("  - MoE: the active experts' matmuls at the table's GEMM rate (grouped GEMMs of "
               "%d-wide experts run slower: a lower bound), the routing's gather and combine (%d "
               "rows of d_model a token and layer) at its rest rate; expert parallelism's "
               "exchange not counted\n", t->model.FE, t->model.K);
    if (t->model.LL)
        printf("  - Gated DeltaNet layers (%d; not on CUDA yet: an estimate of what a kernel "
               "would take): their products (docs/mfu.md's D) at the GEMM rate, their convolution, "
               "gates and norm at the rest rate\n", t->model.LL);
}

struct timeplan {
    tp_table tb;
    tp_rates q;
    int found;        /* 0: a GPU tessera knows but has no table for */
    timeplan_opts o;  /* --link's figures, else the GPU's defaults (link_src) */
    const char *link_src;
};

timeplan *timeplan_open(const timeplan_opts *o, int *rc) {
    timeplan *p = tsr_calloc(1, sizeof *p);
    p->o = *o;
    p->found = find_table(&p->tb, o->gpu ? o->gpu : "H200");
    char why[4400];
    *rc = p->found < 0 ? TSR_EXIT_USAGE : p->found ? load_table(&p->tb) : 0;
    if (!*rc && p->found && rates_of(&p->tb, &p->q, why, sizeof why) != 0) {
        tsr_error("%s (docs/planning.md: the table's rows)", why);
        *rc = TSR_EXIT_DATA;
    }
    if (*rc) return free(p), NULL;
    p->link_src = "--link";
    for (size_t i = 0; i < sizeof link_table / sizeof link_table[0]; i++)
        if (!o->link_node && strcasecmp(p->tb.gpu, link_table[i].gpu) == 0)
            p->o.link_node = link_table[i].node, p->o.link_net = link_table[i].net,
            p->link_src = link_table[i].src;
    return p;
}

void timeplan_close(timeplan *p) { free(p); }

/* parallel.context = N: what a row's ranks and its "per rank" are, and the ring's bytes (ring_of)
 * at the recipe's microbatch of micro sequences */
static void print_context(const plan_view *t, long long micro) {
    const tsr_model *m = &t->model;
    const int N = t->mesh.N;
    const int w = ring_dims_of(m).width;
    double fw = (double)ring_layer_bytes(2, N, (int)micro, t->T, w, 0);
    double bw = (double)ring_layer_bytes(2, N, (int)micro, t->T, w, 1);
    char a[32], b[32], c[32];
    metrics_human_bytes(a, sizeof a, fw + bw);
    metrics_human_bytes(b, sizeof b, 2 * fw);
    metrics_human_bytes(c, sizeof c, bw - fw);
    printf("  parallel.context = %d: W ranks are W/%d data ranks, each a group of %d ranks sharing "
           "its sequences ('per rank': a data rank's sequences, each rank computing %d of their %d "
           "positions); the ring sends %s a rank, layer and microbatch of %lld (%s %s, forward "
           "and backward; their fp32 gradients %s; a checkpointed layer's recomputation a "
           "forward's more), in the comm columns; it waits where the attention beside it is "
           "shorter\n", N, N, N, t->T / N, t->T, a, micro,
           m->kvr ? "latent and RoPE key blocks" : "key/value blocks", b, c);
    if (!m->LL) return;
    metrics_human_bytes(a, sizeof a, dn_state_bytes(m, N, (double)micro));
    printf("  the ring goes round the %d attention layers only; the %d linear layers pass their "
           "state and convolution tail along the group instead, %s a rank, layer and pass "
           "(forward, backward, recomputation), blocking: all of it in exposed. Not priced: the "
           "state pipeline is a chain, so a linear layer takes about the whole sequence's time on "
           "its critical path where the table divides it by %d (docs/deltanet.md \"Context "
           "parallelism\")\n", m->L - m->LL, m->LL, a, N);
}

/* the lines above the table: the rates, or what is missing */
static void print_head(const timeplan *p, const plan_view *t, const char *missing,
                       long long micro) {
    const tp_table *tb = &p->tb;
    if (p->found) print_rates(tb, &p->q);
    else
        printf("time plan (--time; docs/planning.md): %s: no per-op table (%s): tessera has not "
               "been measured on an %s yet. The prepared GPU call writes it: a device run of "
               "'PROFILE_RUNS=base bash tests/gpu/device.sh profile gpt2-124m' on that GPU; its "
               "log (profile-gpt2-124m.txt) becomes %s. Below: the communication alone\n",
               tb->gpu, tb->path, tb->gpu, tb->path);
    if (p->found && missing)
        printf("  no step time: the table has no rows for %s; a TSR_PROFILE run of such a recipe on "
               "the GPU fills them (docs/planning.md). Below: the communication alone\n", missing);
    int f8a, f8b;
    double saved = fp8_gather_saved(t, &f8a, &f8b), Pl = layer_params(&t->model,
                                                                       model_param_per_layer);
    if (saved > 0)
        printf("  precision.fp8_allgather: a forward pass's layer gathers move %.1f MB instead of "
               "%.1f MB in bf16 (the FP8 linear weights of decoder layers %d to %d as E4M3); the "
               "comm columns count it\n", (2 * t->model.L * Pl - saved) / 1e6,
               2 * t->model.L * Pl / 1e6, f8a, f8b);
    if (t->mesh.N > 1) print_context(t, micro);
    if (t->mesh.T > 1)
        printf("  parallel.tensor = %d: W ranks are W/%d tensor groups sharing their sequences "
               "(W/%d data ranks x parallel.context), each rank computing 1/%d of every matmul, "
               "head and logit%s; the tensor group's collectives (the decoder's gathers and sums, "
               "bf16, and the partial gradients' sums) are in the comm columns, all exposed (a "
               "half waits for its sum); the data-parallel sums over W/%d ranks of a rank's "
               "split\n", t->mesh.T, t->mesh.T, t->mesh.T * t->mesh.N, t->mesh.T,
               t->cfg.sequence ? " and of the norms' and element-wise work (sequence "
                                 "parallelism)" : "", t->mesh.T);
    if (t->cfg.lora.rank > 0)
        printf("  the communication below is full training's: LoRA sums its adapters' gradients "
               "only (a frozen base is gathered once under zero3/hsdp)\n");
    if (!p->o.link_node)
        printf("  no link figures for %s: give --link NODE,NET (GB/s bus bandwidth, e.g. from "
               "tessera-healthcheck --full's nccl_node and nccl_pairs); the comm columns below "
               "are for 1 GB/s\n", tb->gpu);
    printf("%6s %6s %9s %12s %12s %10s %10s %10s %12s %7s %14s %12s\n", "W", "nodes", "per rank",
           "compute ms", "comm MB/rank", "comm ms", "exposed ms", "step ms", "tokens/s", "MFU",
           "to max_dur.", "GPU-hours");
}

void timeplan_print(const timeplan *p, const plan_view *t, long long recipe_micro) {
    if (t->dist.rank != 0) return;
    long long micro = recipe_micro > 0 ? recipe_micro : t->cfg.micro_batch;
    const char *missing = p->found ? unmeasured(t, &p->tb) : "every op: no table";
    print_head(p, t, missing, micro > 0 ? micro : t->micro);
    timeplan_opts lo = p->o;
    if (!lo.link_node) lo.link_node = lo.link_net = 1;
    int per_node = lo.per_node ? lo.per_node : 8, pw = lo.plan_world;
    int ws[5] = {1, 8, 64, 512, pw};
    int nw = pw && pw != 1 && pw != 8 && pw != 64 && pw != 512 ? 5 : 4;
    double peak = t->cfg.peak_flops > 0 ? t->cfg.peak_flops : metrics_peak_flops(p->tb.gpu, 0);
    for (int i = 0; i < nw; i++) {
        tp_step s = {.W = ws[i], .nodes = (ws[i] + per_node - 1) / per_node};
        plan_row(t, &p->q, &lo, per_node, micro > 0 ? micro : t->micro, missing, &s);
        print_step(t, &s, peak, !missing);
    }
    print_assumptions(t, &lo, per_node, micro, p->link_src);
    if (peak <= 0) printf("  - MFU: no peak FLOP/s for %s: set peak_flops\n", p->tb.gpu);
    fflush(stdout);
}

int timeplan_layout_of(const timeplan *p, const plan_view *t, timeplan_layout *r) {
    memset(r, 0, sizeof *r);
    if (!p->found || unmeasured(t, &p->tb)) return -1;
    timeplan_opts lo = p->o;
    if (!lo.link_node) lo.link_node = lo.link_net = 1;
    const int per_node = t->dist.local_world > 0 ? t->dist.local_world : 8;
    tp_step s = {.W = t->dist.world, .nodes = (t->dist.world + per_node - 1) / per_node};
    plan_row(t, &p->q, &lo, per_node, t->micro, NULL, &s);
    if (s.na[0]) return snprintf(r->na, sizeof r->na, "%s", s.na), 1;
    r->step_ms = s.compute + s.exposed, r->compute_ms = s.compute;
    r->idle_ms = s.idle, r->exposed_ms = s.exposed - s.idle, r->bubble = s.bubble;
    r->node_bytes = s.node, r->net_bytes = s.net;
    r->tokens_gpu = (double)t->cfg.global_batch * t->T / (r->step_ms / 1e3) / s.W;
    return 0;
}

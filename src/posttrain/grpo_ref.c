/* grpo_ref.c — GRPO's KL reference (grpo.kl_coef > 0; docs/rl.md "The KL term").
 *
 * base (LoRA): the base with the adapters off, one more forward per microbatch, as DPO's base
 * reference. initial (full finetuning): the starting weights, frozen: ddp and zero1 keep a copy
 * of the flat parameters, zero3 / hsdp a shard of them under a sharded source of their own (the
 * same plan as the weights', gathered unit by unit in the reference's forward). A fresh start
 * stores them in run_dir/grpo-reference.bin (they cannot be made again once the run has moved
 * on) and records the file's checksum in the run's config (grpo.reference_checksum, so in every
 * checkpoint); a resume reads them back, each rank its part, and checks the checksums. Under
 * tensor parallelism the file holds the whole model in one part (made whole over each tensor
 * group, written by rank 0; read whole by every rank, which keeps its split): it resumes at any T.
 *
 * The file is a reference file (checkpoint/ckpt_ref.h): kind "grpo-initial", f32 values, the
 * n_params floats of the flat layout cut in G parts (the flat layout's checkpoint partition over
 * a sharding group, 1 without sharding), no record; its checksum is the reference file's. Files
 * of format 1 (before the reference-file format; a run an older build started resumes with one)
 * are still read: header {magic "TSRGRPRF", version u32 (1), parts u32 (G), n_params u64, then G
 * u32 CRC32C, one per part}, then the floats; its checksum the header's CRC32C.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_ref.h"
#include "common.h"
#include "crc32c.h"
#include "fsutil.h"
#include "model/model_rollout.h"
#include "model/model_tp.h"
#include "posttrain/grpo_int.h"
#include "telemetry/metrics.h"

#define REF_FILE "grpo-reference.bin"
#define REF_KIND "grpo-initial"  /* the reference file's kind (checkpoint/ckpt_ref.h) */
#define REF_MAGIC "TSRGRPRF"     /* format 1: still read */
#define REF_VERSION 1u
#define HDR_FIXED 24 /* format 1: magic, version, parts, n_params */

static int is_initial(const tsr_run *run) {
    return run->cfg->grpo.kl_coef > 0 && run->cfg->grpo.reference == TSR_GRPO_REF_INITIAL;
}

void grpo_ref_logps(const tsr_run *run, tsr_grpo *g, const int32_t *in, const int32_t *tg, int B,
                    float *ref) {
    tsr_model *m = run->model;
    float *params = m->params;
    const tsr_param_source *src = m->src;
    struct tsr_lora *lo = m->lora;
    if (run->part->lora_on) lora_set_pass(&run->part->lora, 0, 0, 0), m->lora = NULL;
    else if (g->ref_fsdp) m->src = &g->ref_fsdp->src;
    else m->params = g->ref_params;
    const int T = *run->T;
    model_token_scores(m, in, tg, B, T, g->losses, NULL);
    m->params = params, m->src = src, m->lora = lo;
    for (size_t i = 0; i < (size_t)B * (size_t)T; i++) ref[i] = tg[i] >= 0 ? -g->losses[i] : 0.0f;
}

/* tensor parallelism: the file holds the whole model (one part, its flat layout), made whole
 * over each tensor group by every rank and written by rank 0; read whole by every rank, which
 * keeps its split (a resume at T = 1 without sharding reads the same file) */
static const tsr_tp *split_of(const tsr_run *run) {
    return run->model->tp && run->model->tp->T > 1 ? run->model->tp : NULL;
}

/* the parts of the flat layout the file is cut in: the sharding group's checkpoint partition */
static int parts_of(const tsr_run *run) {
    return run->part->fsdp_on && !split_of(run) ? run->part->fsdp.G : 1;
}

/* the floats the file holds: the whole model's */
static size_t whole_n(const tsr_run *run) {
    return split_of(run) ? split_of(run)->global.n_params : run->model->n_params;
}

/* the reference's split flat layout, whole on this rank: its copy, or its shard gathered into a
 * new buffer (zero3 / hsdp; collective over the sharding group) */
static float *split_flat(const tsr_run *run, tsr_grpo *g) {
    if (!g->ref_fsdp) return g->ref_params;
    float *flat = tsr_malloc(run->model->n_params * sizeof *flat);
    model_gather_full(g->ref_fsdp, flat);
    return flat;
}

/* tensor parallelism: the whole model, on rank 0 (NULL elsewhere). Collective. */
static float *whole_part(const tsr_run *run, tsr_grpo *g) {
    const tsr_tp *tp = split_of(run);
    float *split = split_flat(run, g), *whole = tsr_malloc(whole_n(run) * sizeof *whole);
    tp_whole(tp, run->model, 0, run->model->n_params, split, whole, 0, whole_n(run));
    if (split != g->ref_params) free(split);
    if (run->dist->rank == 0) return whole;
    free(whole);
    return NULL;
}

/* tensor parallelism: this rank's split of the whole model read (whole) into the reference */
static void take_split(const tsr_run *run, tsr_grpo *g, const float *whole) {
    float *split = g->ref_fsdp ? tsr_malloc(run->model->n_params * sizeof *split) : g->ref_params;
    tp_take(split_of(run), run->model, 0, run->model->n_params, whole, 0, split);
    if (!g->ref_fsdp) return;
    fsdp_part_to_shard(g->ref_fsdp, split + g->ref_fsdp->part_displs[g->ref_fsdp->grank],
                       g->ref_fsdp->params);
    free(split);
}

static size_t hdr_bytes(int G) { return HDR_FIXED + (size_t)G * 4; }

static void hdr_fill(const tsr_run *run, unsigned char *h, const uint32_t *crc) {
    const uint32_t v = REF_VERSION, G = (uint32_t)parts_of(run);
    const uint64_t n = whole_n(run);
    memcpy(h, REF_MAGIC, 8), memcpy(h + 8, &v, 4), memcpy(h + 12, &G, 4), memcpy(h + 16, &n, 8);
    memcpy(h + HDR_FIXED, crc, (size_t)G * 4);
}

static void ref_path(const tsr_run *run, char *out, size_t cap, const char *suffix) {
    snprintf(out, cap, "%s/%s%s", run->cfg->run_dir, REF_FILE, suffix);
}

/* this rank's part of the flat layout and where it starts (the whole of it without sharding);
 * NULL on the ranks that write none (other hsdp groups, ranks but 0 without sharding) */
static float *my_part(const tsr_run *run, tsr_grpo *g, size_t *at, size_t *n) {
    if (split_of(run)) {
        *at = 0, *n = whole_n(run);
        return whole_part(run, g);
    }
    if (!run->part->fsdp_on) {
        *at = 0, *n = run->model->n_params;
        return run->dist->rank == 0 ? g->ref_params : NULL;
    }
    tsr_fsdp *f = g->ref_fsdp;
    *at = f->part_displs[f->grank], *n = f->part_counts[f->grank];
    float *part = tsr_malloc((*n + 1) * sizeof *part);
    fsdp_shard_to_part(f, f->params, part);
    if (f->gindex == 0) return part;
    free(part);
    return NULL;
}

/* The reference file of this run's weights (part_crc: G of them) */
static void describe(const tsr_run *run, ckpt_ref *r, uint32_t *part_crc) {
    memset(r, 0, sizeof *r);
    snprintf(r->kind, sizeof r->kind, "%s", REF_KIND);
    r->elem = sizeof(float), r->parts = (uint32_t)parts_of(run), r->n = whole_n(run);
    r->part_crc = part_crc;
}

/* A fresh start: the parts written (each at its offset, by the rank that holds it), the header
 * and the trailer with their CRCs, the file renamed into place; its checksum recorded.
 * Collective. */
static int store(const tsr_run *run, tsr_grpo *g) {
    const int W = run->dist->world;
    char tmp[1300], path[1300];
    ref_path(run, tmp, sizeof tmp, ".tmp"), ref_path(run, path, sizeof path, "");
    uint32_t crc = 0, *crcs = tsr_calloc((size_t)W, sizeof *crcs);
    ckpt_ref r;
    describe(run, &r, crcs);
    int64_t rc = run->dist->rank == 0 ? ckpt_ref_create(tmp) : 0;
    dist_allreduce_sum_i64(&rc, 1);
    if (rc) {
        free(crcs);
        return TSR_EXIT_DATA;
    }
    size_t at, n;
    float *part = my_part(run, g, &at, &n);
    if (part) {
        rc = ckpt_ref_write_values(tmp, &r, at, part, n, &crc);
        if (part != g->ref_params) free(part);
    }
    dist_allgather(&crc, crcs, sizeof crc); /* (the first G ranks hold the parts, in order) */
    g->ref_crc = ckpt_ref_checksum(&r);
    dist_allreduce_sum_i64(&rc, 1);
    if (!rc && run->dist->rank == 0) rc = ckpt_ref_commit(tmp, path, &r);
    free(crcs);
    dist_allreduce_sum_i64(&rc, 1);
    return rc ? TSR_EXIT_DATA : 0;
}

/* Format 1 (TSRGRPRF): the header checked against the run, this rank's part (part grank: the
 * values [at, at + n)) read into part and checked against its CRC; g->ref_crc the file's
 * checksum. Returns 1 when missing or not as expected. */
static int read_v1(const tsr_run *run, tsr_grpo *g, const char *path, int grank, size_t at,
                   size_t n, float *part) {
    const int G = parts_of(run);
    unsigned char *h = tsr_calloc(1, hdr_bytes(G)), *e = tsr_calloc(1, hdr_bytes(G));
    int fd = open(path, O_RDONLY);
    int bad = fd < 0 || pread(fd, h, hdr_bytes(G), 0) != (ssize_t)hdr_bytes(G);
    uint32_t crcs[G];
    memcpy(crcs, h + HDR_FIXED, sizeof crcs);
    hdr_fill(run, e, crcs);
    bad = bad || memcmp(h, e, HDR_FIXED) != 0;
    g->ref_crc = tsr_crc32c(0, h, hdr_bytes(G));
    const off_t off = (off_t)(hdr_bytes(G) + at * sizeof(float));
    bad = bad || pread(fd, part, n * sizeof *part, off) != (ssize_t)(n * sizeof *part) ||
          tsr_crc32c(0, part, n * sizeof *part) != crcs[grank];
    if (fd >= 0) close(fd);
    free(h), free(e);
    return bad;
}

/* A reference file (checkpoint/ckpt_ref.h): as read_v1; why: what was not as expected */
static int read_ref(const tsr_run *run, tsr_grpo *g, const char *path, int grank, size_t at,
                    size_t n, float *part, char *why, size_t cap) {
    uint32_t *crcs = tsr_calloc((size_t)parts_of(run), sizeof *crcs);
    ckpt_ref r;
    describe(run, &r, crcs);
    int rc = ckpt_ref_read_header(path, &r, &g->ref_crc, why, cap);
    if (!rc) rc = ckpt_ref_read_part(path, &r, (uint32_t)grank, at, n, part, why, cap);
    free(crcs);
    return rc != 0;
}

/* A resume: the file checked (against the run and the checkpoint's record), this rank's part
 * read and checked against its CRC, into the reference. Collective. */
static int load(const tsr_run *run, tsr_grpo *g) {
    char path[1300], want[32] = "", why[600] = "";
    ref_path(run, path, sizeof path, "");
    tsr_config *ck = tsr_calloc(1, sizeof *ck);
    if (run->dist->rank == 0 && run_resumed_config(run, ck) == 0)
        snprintf(want, sizeof want, "%s", ck->grpo.reference_checksum);
    free(ck);
    dist_bcast(want, sizeof want, 0);
    size_t at = 0, n = whole_n(run);
    int grank = 0;
    if (run->part->fsdp_on && !split_of(run)) {
        const tsr_fsdp *f = g->ref_fsdp;
        grank = f->grank, at = f->part_displs[grank], n = f->part_counts[grank];
    }
    float *part = run->part->fsdp_on || split_of(run) ? tsr_malloc((n + 1) * sizeof *part)
                                                      : g->ref_params;
    g->ref_crc = 0;
    int bad = ckpt_ref_is_one(path) == 1
                  ? read_ref(run, g, path, grank, at, n, part, why, sizeof why)
                  : read_v1(run, g, path, grank, at, n, part);
    char got[32];
    snprintf(got, sizeof got, "crc32c:%08x", g->ref_crc);
    bad = bad || (want[0] && strcmp(got, want) != 0);
    if (!bad && split_of(run)) take_split(run, g, part);
    else if (!bad && run->part->fsdp_on) fsdp_part_to_shard(g->ref_fsdp, part, g->ref_fsdp->params);
    if (part != g->ref_params) free(part);
    int worst = bad;
    dist_allreduce_max_int(&worst, 1);
    if (worst && run->dist->rank == 0)
        tsr_error("%s: missing, damaged or another run's (this run resumes with grpo.reference = "
                  "\"initial\" from %s, which recorded %s; the file's checksum is %s%s%s): the "
                  "starting weights cannot be made again once the run has moved on: restore the "
                  "file, or start a new run_dir", path, run->out->start_load.path,
                  want[0] ? want : "none", got, why[0] ? "; " : "", why);
    return worst ? TSR_EXIT_DATA : 0;
}

int grpo_ref_open(const tsr_run *run, tsr_grpo *g) {
    if (!g || !is_initial(run)) return 0;
    tsr_model *m = run->model;
    if (run->part->fsdp_on) { /* a sharded source of its own, the policy's restored */
        g->ref_fsdp = tsr_calloc(1, sizeof *g->ref_fsdp);
        fsdp_init(g->ref_fsdp, m, run->mesh, 1);
        m->src = &run->part->fsdp.src;
        memcpy(g->ref_fsdp->params, run->part->fsdp.params,
               run->part->fsdp.shard_n * sizeof(float));
    } else {
        g->ops = run->be->ops;
        g->ref_params = g->ops->alloc(m->n_params * sizeof(float));
        memcpy(g->ref_params, m->params, m->n_params * sizeof(float));
    }
    const int resume = !strcmp(run->out->start_load.what, "resume");
    TSR_CHECK(resume ? load(run, g) : store(run, g));
    char *sum = run->cfg->grpo.reference_checksum;
    snprintf(sum, sizeof run->cfg->grpo.reference_checksum, "crc32c:%08x", g->ref_crc);
    int64_t rc = run->dist->rank == 0 ? metrics_save_config(run->cfg) : 0; /* the config names it */
    dist_allreduce_sum_i64(&rc, 1);
    return rc ? TSR_EXIT_DATA : 0;
}

void grpo_ref_free(tsr_grpo *g) {
    if (g->ref_params) g->ops->free(g->ref_params);
    if (g->ref_fsdp) fsdp_free(g->ref_fsdp), free(g->ref_fsdp);
    g->ref_params = NULL, g->ref_fsdp = NULL;
}

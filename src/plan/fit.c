/* fit.c — --gpu-mem and --fit (fit.h; docs/planning.md "Does it fit"). */
#include "plan/fit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define GIB 1073741824.0
#define SEQ_STEP 128         /* --fit seq_len: its values are multiples of this (and of 2N) */
#define SEQ_MAX (1LL << 24)  /* ... up to this */

int plan_fit_parse_mem(const char *s, double *bytes, char *why, size_t n) {
    char *end;
    double g = strtod(s, &end);
    if (end == s || *end || !(g > 0 && g <= 1e5)) {
        snprintf(why, n, "--gpu-mem %s: expected the memory of one GPU in GiB (0 < x <= 100000), "
                 "e.g. --gpu-mem 80 or --gpu-mem 139.8", s);
        return -1;
    }
    *bytes = g * GIB;
    return 0;
}

int plan_fit_parse_key(const char *s, plan_fit_key *key, char *why, size_t n) {
    *key = !strcmp(s, "seq_len") ? PLAN_FIT_SEQ_LEN
           : !strcmp(s, "micro_batch") ? PLAN_FIT_MICRO_BATCH
           : !strcmp(s, "layout") ? PLAN_FIT_LAYOUT
           : !strcmp(s, "world") ? PLAN_FIT_WORLD : PLAN_FIT_NONE;
    if (*key == PLAN_FIT_NONE)
        snprintf(why, n, "--fit %s: expected seq_len or micro_batch (the key whose largest value "
                 "that fits --gpu-mem is searched), layout (the fastest layouts that fit) or "
                 "world (the fewest GPUs that fit)", s);
    return *key == PLAN_FIT_NONE ? -1 : 0;
}

int plan_fit_check(const tsr_config *cfg, int world, plan_fit_key key) {
    if (cfg->device != TSR_DEVICE_CUDA) {
        tsr_error("--gpu-mem compares the device memory plan of device = \"cuda\" (the config has "
                  "device = \"cpu\", whose plan is host memory): add --set device=cuda");
        return TSR_EXIT_USAGE;
    }
    if (key != PLAN_FIT_NONE && world > 1) {
        tsr_error("--fit plans, it runs nothing: start it as one process (--plan RANKS gives the "
                  "world), not under mpirun/srun with %d ranks", world);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

void plan_fit_print(const tsr_dist *d, double device_bytes, double gpu_bytes) {
    if (d->rank != 0) return;
    const double b = device_bytes;
    if (b <= gpu_bytes)
        printf("fits: %.1f of %.1f GiB a GPU (the device memory per rank above; --gpu-mem), "
               "%.1f GiB to spare\n", b / GIB, gpu_bytes / GIB, (gpu_bytes - b) / GIB);
    else
        printf("does not fit: needs %.1f GiB of device memory per rank, %.1f GiB more than the "
               "%.1f GiB a GPU of --gpu-mem\n", b / GIB, (b - gpu_bytes) / GIB, gpu_bytes / GIB);
    fflush(stdout);
}

/* cfg with key = v planned quietly on d (as --plan plans it): the device memory per rank, or -1
 * when the config refuses v */
/* The search's one question: does cfg with key = v fit (its plan's device memory per rank, -1
 * refused), tried by the trainer's dry start (plan_fit_trial) */
typedef struct fit_ask {
    const tsr_config *cfg;
    const tsr_dist *d;
    plan_fit_trial trial;
} fit_ask;

static double planned(const fit_ask *a, plan_fit_key key, long long v, int64_t *per_rank,
                      int *pairs) {
    tsr_config *c = tsr_malloc(sizeof *c);
    *c = *a->cfg;
    if (key == PLAN_FIT_SEQ_LEN) c->seq_len = v;
    else c->micro_batch = v;
    double b = a->trial(c, a->d, per_rank, pairs);
    free(c);
    return b;
}

typedef struct fit_found {
    long long v, next;   /* the largest value that fits (0: none); the next one tried (0: none) */
    int pairs;           /* micro_batch: the samples are preference pairs, kept whole (even) */
    double b, next_b;    /* their memory (next_b < 0: the config refuses next) */
} fit_found;

static int fits(double b, double gpu_bytes) { return b >= 0 && b <= gpu_bytes; }

/* the longest seq_len, a multiple of q up to cap: doubling, then halving the interval */
static void search_seq(const fit_ask *a, double gpu, long long q, long long cap, fit_found *f) {
    long long lo = 0, hi = 1; /* in units of q: lo fits (0: none yet), hi is the next to try */
    double b;
    while (hi * q <= cap && fits(b = planned(a, PLAN_FIT_SEQ_LEN, hi * q, NULL, NULL), gpu))
        lo = hi, f->b = b, hi *= 2;
    if (hi * q > cap) hi = cap / q + 1;
    while (hi - lo > 1) {
        long long mid = lo + (hi - lo) / 2;
        if (fits(b = planned(a, PLAN_FIT_SEQ_LEN, mid * q, NULL, NULL), gpu)) lo = mid, f->b = b;
        else hi = mid;
    }
    f->v = lo * q;
    f->next = hi * q <= cap ? hi * q : 0;
    if (f->next) f->next_b = planned(a, PLAN_FIT_SEQ_LEN, f->next, NULL, NULL);
}

/* the largest micro_batch dividing the per-rank batch (an even one for pairs: dpo's) */
static void search_micro(const fit_ask *a, double gpu, fit_found *f) {
    int64_t per_rank = 0;
    planned(a, PLAN_FIT_MICRO_BATCH, 1, &per_rank, &f->pairs);
    const long long step = f->pairs ? 2 : 1;
    for (long long m = per_rank - per_rank % step; m >= step; m -= step) {
        if (per_rank % m) continue;
        double b = planned(a, PLAN_FIT_MICRO_BATCH, m, NULL, NULL);
        if (fits(b, gpu)) {
            f->v = m, f->b = b;
            return;
        }
        f->next = m, f->next_b = b;
    }
}

/* rank 0's line: what the search found */
static void print_found(const tsr_dist *d, plan_fit_key key, double gpu,
                        long long q, const fit_found *f) {
    const char *name = key == PLAN_FIT_SEQ_LEN ? "seq_len" : "micro_batch";
    char next[160] = "", how[96];
    if (f->next && f->next_b >= 0)
        snprintf(next, sizeof next, "; %s = %lld needs %.2f GiB", name, f->next, f->next_b / GIB);
    else if (f->next)
        snprintf(next, sizeof next, "; %s = %lld is refused by the config's checks", name, f->next);
    else if (key == PLAN_FIT_MICRO_BATCH)
        snprintf(next, sizeof next, "; it is the whole per-rank batch");
    if (key == PLAN_FIT_SEQ_LEN) snprintf(how, sizeof how, "multiples of %lld", q);
    else snprintf(how, sizeof how, "the divisors of the per-rank batch%s",
                  f->pairs ? " (even: whole preference pairs)" : "");
    if (!f->v)
        printf("fit: no %s fits %.1f GiB a GPU on %d ranks (%s tried)%s\n", name, gpu / GIB,
               d->world, how, next);
    else
        printf("fit: %s = %lld is the %s that fits %.1f GiB a GPU on %d ranks: %.2f GiB of device "
               "memory per rank (%s tried%s); a run: --set %s=%lld\n", name, f->v,
               key == PLAN_FIT_SEQ_LEN ? "longest" : "largest", gpu / GIB, d->world, f->b / GIB,
               how, next, name, f->v);
    fflush(stdout);
}

int plan_fit_search(const tsr_config *cfg, const tsr_dist *d, plan_fit_key key, double gpu_bytes,
                    plan_fit_trial trial) {
    if (key == PLAN_FIT_WORLD) return plan_fit_world(cfg, d, gpu_bytes, trial);
    fit_found f = {0};
    const fit_ask a = {cfg, d, trial};
    const long long N = cfg->context > 1 ? cfg->context : 1;
    long long q = SEQ_STEP;
    while (q % (2 * N)) q += SEQ_STEP; /* a multiple of 2N too (the zig-zag chunks) */
    long long cap = SEQ_MAX; /* learned positions: the table's rows, when given */
    if (cfg->model.pos == TSR_POS_LEARNED && cfg->model.max_seq_len > 0) cap = cfg->model.max_seq_len;
    if (key == PLAN_FIT_SEQ_LEN) search_seq(&a, gpu_bytes, q, cap, &f);
    else search_micro(&a, gpu_bytes, &f);
    if (d->rank == 0) print_found(d, key, gpu_bytes, q, &f);
    return 0;
}

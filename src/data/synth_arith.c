/* synth_arith.c — the synthetic arithmetic corpus (synth_arith.h). */
#include "data/synth_arith.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"

#define ARITH_STREAM 0x61726974ull /* "arit" */

typedef struct problem {
    int a, b, op; /* op 0: a+b, 1: a-b (a >= b) */
} problem;

static int answer(const problem *p) { return p->op ? p->a - p->b : p->a + p->b; }

static int held_out(uint64_t seed, const problem *p) {
    uint64_t k = ((uint64_t)p->op << 40) | ((uint64_t)p->a << 20) | (uint64_t)p->b;
    return tsr_rand_uniform(seed, ARITH_STREAM, k) < 0.2;
}

/* every problem, in a seeded order (Fisher-Yates) */
static problem *problems(int max, uint64_t seed, size_t *n) {
    const size_t cap = 2 * (size_t)(max + 1) * (size_t)(max + 1);
    problem *p = tsr_malloc(cap * sizeof *p);
    *n = 0;
    for (int op = 0; op < 2; op++)
        for (int a = 0; a <= max; a++)
            for (int b = 0; b <= (op ? a : max); b++) p[(*n)++] = (problem){a, b, op};
    for (size_t i = *n; i > 1; i--) {
        size_t j = (size_t)(tsr_rand_u64(seed, ARITH_STREAM + 1, i) % i);
        problem t = p[i - 1];
        p[i - 1] = p[j], p[j] = t;
    }
    return p;
}

static FILE *open_in(const char *tmp, const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "w");
    if (!f) tsr_error("%s: cannot create: %s", path, strerror(errno));
    return f;
}

/* the SFT response of problem p: its answer, or (example e drawn verbose) the answer running on
 * with the equation ("c because a+b=c"), which a reward reading the whole completion as the
 * answer does not accept */
static void put_sft(FILE *f, const problem *p, int verbose) {
    const char o = p->op ? '-' : '+';
    if (verbose)
        fprintf(f, "{\"prompt\": \"%d%c%d=\", \"response\": \"%d because %d%c%d=%d\"}\n", p->a, o,
                p->b, answer(p), p->a, o, p->b, answer(p));
    else fprintf(f, "{\"prompt\": \"%d%c%d=\", \"response\": \"%d\"}\n", p->a, o, p->b, answer(p));
}

static int write_all(const char *tmp, const problem *p, size_t n, uint64_t examples, double verbose,
                     uint64_t seed, uint64_t counts[2]) {
    static const char *const names[4] = {"pretrain.jsonl", "sft.jsonl", "prompts.jsonl",
                                         "heldout.jsonl"};
    FILE *f[4];
    int rc = 0;
    for (int k = 0; k < 4; k++)
        if (!(f[k] = open_in(tmp, names[k]))) rc = TSR_EXIT_DATA;
    for (size_t i = 0; i < n && !rc; i++) {
        const char o = p[i].op ? '-' : '+';
        int h = held_out(seed, &p[i]);
        fprintf(f[h ? 3 : 2], "{\"prompt\": \"%d%c%d=\", \"answer\": %d}\n", p[i].a, o, p[i].b,
                answer(&p[i]));
        counts[h]++;
    }
    for (uint64_t e = 0; e < examples && !rc; e++) { /* every problem, in turn */
        const problem *q = &p[e % n];
        fprintf(f[0], "{\"text\": \"%d%c%d=%d\"}\n", q->a, q->op ? '-' : '+', q->b, answer(q));
        put_sft(f[1], q, tsr_rand_uniform(seed, ARITH_STREAM + 2, e) < verbose);
    }
    for (int k = 0; k < 4; k++)
        if (f[k] && (fflush(f[k]) != 0 || fsync(fileno(f[k])) != 0 || fclose(f[k]) != 0) && !rc) {
            tsr_error("%s/%s: write failed: %s", tmp, names[k], strerror(errno));
            rc = TSR_EXIT_DATA;
        }
    return rc;
}

int synth_arithmetic(const char *dir, uint64_t examples, int max_operand, double verbose,
                     uint64_t seed, int quiet) {
    char tmp[4096];
    struct stat st;
    if (lstat(dir, &st) == 0) {
        tsr_error("%s: already exists; refusing to overwrite (choose a new --out or remove it)", dir);
        return TSR_EXIT_DATA;
    }
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", dir) || fs_make_parents(tmp) ||
        (mkdir(tmp, 0777) != 0 && errno != EEXIST)) {
        tsr_error("%s: cannot create: %s", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t n;
    problem *p = problems(max_operand, seed, &n);
    uint64_t counts[2] = {0, 0};
    int rc = write_all(tmp, p, n, examples, verbose, seed, counts);
    free(p);
    if (!rc && rename(tmp, dir) != 0) {
        tsr_error("%s: rename to %s failed: %s", tmp, dir, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (!rc) rc = fs_sync_parent(dir);
    if (!rc && !quiet)
        printf("synth: wrote %s: arithmetic with operands 0..%d: %llu examples of all problems in "
               "pretrain.jsonl and sft.jsonl (%.0f%% of the SFT responses verbose), %llu problems "
               "in prompts.jsonl, %llu held out from them in heldout.jsonl\n", dir, max_operand,
               (unsigned long long)examples, 100 * verbose, (unsigned long long)counts[0],
               (unsigned long long)counts[1]);
    return rc;
}

/* hc.h — tessera-healthcheck's vocabulary: the checks, the facts a gather step measures, the
 * thresholds a config file gives, and the verdicts the pure judge step derives from both.
 *
 * Gather, then judge (as LBNL NHC does): measurement code only fills an hc_facts; hc_judge() is a
 * pure function of (facts, thresholds), so tests/unit/test_healthcheck.c feeds it canned facts.
 * A check is either a rate that must reach a floor (GFLOP/s, GB/s: limit = expected * (1 -
 * tolerance)) or a count that must stay at or below a ceiling (wrong GEMM results: limit = max).
 */
#ifndef TSR_HC_H
#define TSR_HC_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    HC_SGEMM = 0,    /* fp32 GEMM burn rate, GFLOP/s */
    HC_SGEMM_VERIFY, /* fp32 GEMM burn: elements that differed from the reference, summed */
    HC_DGEMM,        /* fp64 GEMM burn rate, GFLOP/s */
    HC_DGEMM_VERIFY, /* fp64 GEMM burn: wrong elements */
    HC_MEMBW,        /* STREAM-triad bandwidth, GB/s (1e9 bytes/s) */
    HC_ALLREDUCE,    /* MPI all-reduce bus bandwidth with this node's partners, GB/s */
    HC_CHECK_COUNT
} hc_check;

typedef enum { HC_AT_LEAST = 0, HC_AT_MOST, HC_SENSE_COUNT } hc_sense;

typedef struct hc_check_info {
    const char *name; /* as in verdict lines, config keys and TSR_HC_FAULT */
    const char *unit;
    hc_sense sense;
    int decimals;     /* printed precision of actual and limit */
} hc_check_info;

extern const hc_check_info hc_checks[HC_CHECK_COUNT];

/* Which checks a mode runs: quick = the GEMM burns; full = everything. */
typedef enum { HC_MODE_QUICK = 0, HC_MODE_FULL, HC_MODE_COUNT } hc_mode;
extern const char *const hc_mode_names[HC_MODE_COUNT];

/* ---- thresholds (healthcheck.cfg, one device section) ---- */

typedef struct hc_limit {
    int set;                   /* the section gives this check */
    double expected, tolerance; /* HC_AT_LEAST: pass when actual >= expected * (1 - tolerance) */
    double max;                 /* HC_AT_MOST: pass when actual <= max */
} hc_limit;

typedef struct hc_params {     /* how to measure, per device section */
    int gemm_n;                /* N: the burn multiplies (N, N) x (N, N) */
    double quick_burn_s, full_burn_s; /* GEMM burn time per mode, split between fp32 and fp64 */
    int membw_mib;             /* size of each of the 3 triad arrays, MiB */
    int membw_reps;            /* triad repetitions; the best is kept (STREAM convention) */
    int allreduce_mib;         /* all-reduce message size, MiB */
    int allreduce_iters;       /* timed all-reduces per partner group (after 2 warm-up ones) */
} hc_params;

typedef struct hc_thresholds {
    char source[512];  /* config file */
    char section[64];  /* the device section's name */
    char match[128];   /* its match string ("" = the default of its mode) */
    int gpu;           /* section for the GPU mode */
    hc_limit lim[HC_CHECK_COUNT];
    hc_params params;
} hc_thresholds;

/* The limit that decides pass/fail of check c. */
double hc_limit_value(const hc_thresholds *t, hc_check c);

/* ---- facts (gather) ---- */

typedef struct hc_facts {
    char node[64];     /* $SLURMD_NODENAME, else the host name */
    char device[128];  /* CPU model name (GPU name in the GPU mode) */
    int rank, threads;
    unsigned measured; /* bit (1u << check) set when value[check] was measured */
    double value[HC_CHECK_COUNT];
    /* details for the JSON report */
    long gemm_iters[2];       /* [0] fp32, [1] fp64 */
    double gemm_seconds[2];
    int n_rounds;             /* all-reduce rounds this rank took part in (0..2) */
    int group_size[2];        /* ranks in its group per round */
    int partner[2];           /* first other rank of its group per round */
    double busbw_round[2];    /* GB/s per round; HC_ALLREDUCE is the best of them */
    char skipped[128];        /* checks of the mode not measured, and why */
} hc_facts;

static inline void hc_fact_set(hc_facts *f, hc_check c, double v) {
    f->value[c] = v;
    f->measured |= 1u << c;
}

/* ---- verdicts (judge) ---- */

typedef struct hc_verdict {
    hc_check check;
    int ok;
    double actual, limit;
} hc_verdict;

/* Pure: one verdict per measured check, in hc_check order, into out (room for HC_CHECK_COUNT).
 * A measured check without a threshold fails (config validation prevents it). NaN fails.
 * Returns the number of verdicts; *n_failed gets how many failed. */
int hc_judge(const hc_facts *f, const hc_thresholds *t, hc_verdict *out, int *n_failed);

/* "NODE CHECK OK|FAIL ACTUAL EXPECTED UNIT" (no newline). Returns 0, or 1 when truncated. */
int hc_verdict_line(char *buf, size_t n, const char *node, const hc_verdict *v);

/* Drain reason for the first failing verdict: "tessera-hc: CHECK ACTUAL<LIMIT UNIT" (">" for
 * at-most checks), with " (+K more)" when K more failed; sanitised. Returns 0, 1 if none failed. */
int hc_drain_reason(char *buf, size_t n, const hc_verdict *v, int n_verdicts);

/* In place: keeps printable ASCII (0x20..0x7e) except quotes and backslash, which become '_';
 * other bytes are dropped. Returns the new length. */
size_t hc_sanitize_reason(char *s);
/* A node name as passed to scontrol: [A-Za-z0-9._-]+ only. Returns 1 when valid. */
int hc_node_name_ok(const char *s);

#endif

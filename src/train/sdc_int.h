/* sdc_int.h — what the sdc files share (sdc.h is the trainer's surface): the entries a rank
 * hashes (sdc_state.c), the verdict and its report (sdc_report.c), the injected fault
 * (sdc_fault.c); the checks' order in a step is sdc.c's. */
#ifndef TSR_SDC_INT_H
#define TSR_SDC_INT_H

#include <stddef.h>
#include <stdint.h>

#include "train/sdc.h"
#include "train/sdc_vote.h"
#include "train/train_state.h"

/* The sets an entry belongs to */
typedef enum { SDC_WEIGHTS = 0, SDC_M, SDC_V, SDC_GRADS, SDC_N_SETS } sdc_set;

/* A run of an entry's elements in this rank's memory: at its tensor's element `at`, len floats */
typedef struct sdc_run {
    const float *p;
    size_t at, len;
} sdc_run;

/* One tensor of one set as this rank holds it (whole, a part or a shard's pieces) */
typedef struct sdc_entry {
    char name[64];     /* its checkpoint name ("model/wte", "optim/m/wte", "lora/q_A"), or
                        * "grads/wte" for the reduced gradients */
    sdc_set set;
    int color;         /* the ranks of one color hold the same bytes (compared); -1: none */
    int frozen;        /* never changes (LoRA's base): its stored fingerprint stays */
    int run0, n_runs;  /* its runs */
    size_t numel;      /* the floats this rank holds of it */
    uint64_t total;    /* the tensor's elements (whole: numel == total) */
} sdc_entry;

/* The injected fault (test-only, TSR_FAULT=flip:SITE:TENSOR:BIT:WHO:STEP; docs/health.md
 * "Fault injection") */
typedef enum {
    SDC_SITE_WEIGHTS = 0, SDC_SITE_M, SDC_SITE_V, SDC_SITE_GRADS, SDC_SITE_RGRADS,
    SDC_SITE_LOADED, /* the weights as a resume left them, before the start's checks */
    SDC_N_SITES
} sdc_site;
typedef struct sdc_flip {
    int on, done;
    sdc_site site;
    char tensor[48];   /* a parameter's name (wte, qkvw, ...) */
    int bit;           /* 0..31 of the float's bits */
    int rank;          /* the world rank, or -1 with node */
    char node[64];     /* the node's name (every rank on it), or "" */
    int64_t step;
} sdc_flip;

/* What a check found (the run stops with exit 87) */
typedef enum {
    SDC_FOUND_NONE = 0,
    SDC_FOUND_REPLICAS, /* the copies of a tensor differ */
    SDC_FOUND_AT_REST,  /* a rank's state changed since its fingerprints were stored */
    SDC_FOUND_LOAD,     /* a rank's state after a resume differs from the checkpoint's CRC32C */
} sdc_found;
#define SDC_MAX_VOTES 8
typedef struct sdc_verdict {
    sdc_found found;
    int64_t step;      /* the step after which the state was compared (or checked at rest) */
    int64_t since;     /* at rest: the step whose fingerprints were stored */
    int n_votes, n_mismatch; /* replicas: the votes kept, the (entry, color) pairs that differ */
    sdc_vote votes[SDC_MAX_VOTES];
    int *rest_entry;   /* at rest: (world) each rank's first entry that changed, -1 none */
    int *rest_count;   /* and how many */
    uint32_t *rest_crc;/* (world x 2) that entry's stored and current fingerprints */
    int64_t suspect_from; /* checkpoints of this step and later may hold it: set aside */
} sdc_verdict;

typedef struct tsr_sdc {
    int on;
    int64_t interval;
    int n;                     /* entries */
    sdc_entry *e;
    int n_runs;
    sdc_run *runs;
    uint32_t *crc;             /* (n) the last fingerprints */
    uint32_t *stored;          /* (n) the fingerprints at rest of the open window */
    int64_t reduced_step;      /* the gradients' buffers hold this step's reduced gradients */
    int64_t grads_step;        /* crc[] holds the reduced gradients of this step (sdc_grads) */
    int window;                /* stored[] holds the state after step window_step: the next
                                * update checks it */
    int64_t window_step;
    int64_t compared;          /* the step of the last comparison that agreed, -1 */
    char (*hosts)[64];         /* (world) every rank's node */
    uint32_t *table;           /* (world x 2n) the gathered fingerprints and colors */
    /* figures (docs/health.md "Telemetry") */
    int64_t comparisons, rest_checks;
    double hash_s;             /* seconds spent hashing */
    double comm_s;             /* seconds in the checks' collectives (with the wait for the
                                * slowest rank, which the step's next collective would wait) */
    sdc_flip flip;
    sdc_verdict v;
} tsr_sdc;

/* sdc_state.c: the entries of this run (the trainer's sharding, LoRA, experts) */
void sdc_build(tsr_trainer *t, tsr_sdc *s);
/* The fingerprints (s->crc) of the entries kept at rest (rest = 1) and of the reduced gradients
 * (grads = 1), hashed on the rank's threads; the seconds spent added to s->hash_s. */
void sdc_hash_sets(tsr_trainer *t, tsr_sdc *s, int rest, int grads);
/* An entry that is kept between the steps (checked at rest): every set but the gradients */
int sdc_at_rest(const sdc_entry *e);

/* sdc_report.c: rank 0's error lines, the metrics.jsonl event and the culprit file */
void sdc_report(tsr_trainer *t, tsr_sdc *s);
void sdc_write_culprit(tsr_trainer *t, tsr_sdc *s);

/* sdc_fault.c: TSR_FAULT's flip read and checked against the model; 0 or TSR_EXIT_USAGE */
int sdc_fault_parse(tsr_trainer *t, sdc_flip *f);

#endif

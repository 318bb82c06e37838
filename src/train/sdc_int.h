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
    SDC_SITE_ACTS,   /* a layer's output in the rank's first forward of the step */
    SDC_SITE_SENT,   /* the gradients a rank sends into the step's reduction (its reduce-scatter) */
    SDC_SITE_RECEIVED, /* the reduced gradients a rank receives (the reduction's all-gather) */
    SDC_N_SITES
} sdc_site;
typedef struct sdc_flip {
    int on, done;
    sdc_site site;
    char tensor[48];   /* a parameter's name (wte, qkvw, ...); acts: layerL */
    int layer;         /* acts: L */
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
    SDC_FOUND_REPLAY,   /* a microbatch recomputed by another rank gave other gradients */
} sdc_found;

/* A replay's verdict (sdc_replay.c) */
typedef enum { SDC_RP_TRANSIENT = 0, SDC_RP_PERSISTENT, SDC_RP_UNATTRIBUTED } sdc_rp_kind;
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
    /* replay: rank q's first microbatch (or batch), replayed by rank r, the suspect (-1: none), the kind;
     * the third rank and the rank of the (last) second try, -1 when none; the fingerprints: q's,
     * r's, the third's, the second try's */
    int rp_q, rp_r, rp_suspect, rp_third, rp_retry;
    int rp_whole;      /* the ranks' whole batches were replayed (after a guard's outlier) */
    sdc_rp_kind rp_kind;
    uint32_t rp_crc[4];
    /* a tensor, context or expert group's replay (rp_stride ranks, a microbatch their collective
     * computation: a fault of one may change every member's gradients): the positions (bit p) in
     * the suspect's group whose results differed, all blamed; 0 otherwise */
    uint64_t rp_group;
    int rp_stride;
    int rp_mstep;      /* the ranks between two members of a group (1; a pipeline's: W / P) */
    int rp_batch;      /* the unit is a rank's batch (a pipeline's schedule), not its first
                        * microbatch */
} sdc_verdict;

/* Deterministic replay (sdc_replay.c; docs/health.md "Deterministic replay") */
typedef struct sdc_replay {
    int on;
    int64_t interval;
    tsr_group *world;          /* every rank (mesh_group_open): the rows' transfers */
    tsr_group *pos;            /* a tensor, context or expert group's lockstep: the ranks of this
                                * rank's position in every group (ordered by group), or NULL */
    int stride;                /* the ranks of such a group (1: none): a rank's partner is the
                                * same position in the group before (sdc_replay.c) */
    int ring;                  /* the ranks a replay shifts the work around: the world, or
                                * (parallel.pipeline) a stage's W / P, a rank's partner the same
                                * stage's rank of the pipeline before */
    int members, mstep;        /* a group's ranks (its stride, or a pipeline's P stages) and the
                                * ranks between two of them (1, or W / P) */
    size_t bytes;              /* a rank's batch: its tokens, targets and segment starts */
    uint8_t *mine, *theirs;    /* this rank's rows sent; the ones it recomputes */
    int64_t step;              /* the replay step whose first microbatch own is the fingerprint of */
    uint32_t own;
    uint32_t theirs_crc;       /* the right neighbour's first microbatch recomputed (that step) */
    int64_t whole_step;        /* the step whose batch whole is the fingerprint of */
    uint32_t whole;
    uint32_t tap;              /* zero3 / hsdp: the layers' gradients before their reduce-scatter */
    int busy;                  /* inside a recomputation: no fingerprint, no replay */
    int clobbered;             /* a recomputation used this rank's gradient buffers */
    double seconds;
} sdc_replay_state;

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
    int64_t window_step;       /* (-1 until the start's comparison) */
    int n_frozen;              /* frozen entries: their stored fingerprints are the start's */
    int64_t start_step;        /* the step of the start's comparison */
    int64_t compared;          /* the step of the last comparison that agreed, -1 */
    char (*hosts)[64];         /* (world) every rank's node */
    uint32_t *table;           /* (world x 2n) the gathered fingerprints and colors */
    /* figures (the counts: t->out.health; docs/health.md "Telemetry") */
    double hash_s;             /* seconds spent hashing */
    double comm_s;             /* seconds in the checks' collectives (with the wait for the
                                * slowest rank, which the step's next collective would wait) */
    sdc_flip flip;
    sdc_verdict v;
    sdc_replay_state rp;
} tsr_sdc;

/* sdc_state.c: the entries of this run (the trainer's sharding, LoRA, experts) */
void sdc_build(tsr_trainer *t, tsr_sdc *s);
/* The fingerprints (s->crc) of the entries kept at rest (rest = 1) and of the reduced gradients
 * (grads = 1), hashed on the rank's threads; the seconds spent added to s->hash_s. */
void sdc_hash_sets(tsr_trainer *t, tsr_sdc *s, int rest, int grads);
/* CRC32C of n floats, in chunks on the rank's threads (sdc_hash_sets' way) */
uint32_t sdc_crc_floats(const tsr_trainer *t, const float *p, size_t n);
/* An entry that is kept between the steps (checked at rest): every set but the gradients */
int sdc_at_rest(const sdc_entry *e);

/* sdc_report.c: rank 0's error lines, the metrics.jsonl event and the culprit file */
void sdc_report(tsr_trainer *t, tsr_sdc *s);
void sdc_write_culprit(tsr_trainer *t, tsr_sdc *s);

/* sdc_fault.c: TSR_FAULT's flip read and checked against the model; 0 or TSR_EXIT_USAGE */
int sdc_fault_parse(tsr_trainer *t, sdc_flip *f);
/* TSR_FAULT="matmul:STEP:WHO[:every]": WHO's (a rank or node=NAME) first matrix product in step
 * STEP gets a flipped bit (every: each of its products from STEP on). 0 or TSR_EXIT_USAGE. */
int sdc_fault_matmul(tsr_trainer *t);

/* sdc_replay.c: the replay's set-up at start (on in a mode it covers), and its release */
void sdc_replay_init(tsr_trainer *t, tsr_sdc *s);
void sdc_replay_free(tsr_trainer *t, tsr_sdc *s);

/* sdc_check.c: the checks (0, or TSR_EXIT_SDC after sdc_report); collective. The comparison of
 * the state after step t->step between the replicas (with_grads: the reduced gradients of this
 * step too), which stores the at-rest fingerprints for the next update's check; */
int sdc_compare(tsr_trainer *t, int with_grads);
/* the at-rest check of the stored fingerprints (the window closes; now_step: the step whose
 * update comes); */
int sdc_check_rest(tsr_trainer *t, int64_t now_step);
/* after a resume, the tensors a rank holds whole against the checkpoint's crc32c attributes; */
int sdc_check_load(tsr_trainer *t);
/* before a replay, the state it recomputes from compared between the replicas (a state that
 * differs is the fingerprints' verdict, not a computation's). */
int sdc_before_replay(tsr_trainer *t);

#endif

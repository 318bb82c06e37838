/* sdc.h — silent data corruption caught inside the job (docs/health.md): fingerprints (CRC32C)
 * of the training state compared between the ranks that hold the same bytes, and checked again
 * at rest where no replica exists; the verdict (tensor, step, ranks, nodes, the majority); the
 * response (run_dir/sdc-culprit.json, exit 87, the checkpoints that may hold the corruption set
 * aside); the test-only faults that exercise it (TSR_FAULT=flip:...). Its state is the trainer's
 * t->sdc (sdc_int.h). The trainer calls it at these points of a step and of its loop:
 *
 *   sdc_init          trainer_init, the state allocated and the device set: what each rank
 *                     hashes, which ranks hold the same bytes, the replay's buffers; the faults
 *                     checked
 *   sdc_start         the state loaded (resume, --init-from) or initialised: compared once
 *   sdc_fault         the injected faults, at their sites
 *   sdc_grads         after the reduction, on a fingerprint step: the reduced gradients hashed
 *   sdc_before_update before the step's update: the fingerprints stored at the last comparison
 *                     checked again (the state at rest since, a checkpoint's copy included)
 *   sdc_after_step    after the update, on a fingerprint step: the comparison
 *   sdc_before_save   every save compares first (sdc_agreed: the file says so)
 *   sdc_final         after a run's last save (the end, 85, 86): checked once more at rest
 *   sdc_stopped       the run stopped with 87, its save in flight committed: the response
 *
 * Every function that returns an int returns 0, or TSR_EXIT_SDC after rank 0 reported the
 * mismatch; the collective ones are called by every rank at the same point. */
#ifndef TSR_SDC_H
#define TSR_SDC_H

#include <stddef.h>
#include <stdint.h>

struct tsr_trainer;
struct tsr_config;

/* A run of this config compares fingerprints: health.fingerprint_interval not 0 (device = cuda
 * too: the device's state copied to the host and hashed there, docs/health.md "On the GPU").
 * Its resume takes the newest checkpoint whose fingerprints agreed (ckpt_resume's agreed). */
int sdc_configured(const struct tsr_config *cfg);
/* The steps between comparisons: health.fingerprint_interval, its "auto" (-1) 10 with device =
 * "cpu" and 0 with device = "cuda" (compared at start and at every save only: each check copies
 * the state over the bus, docs/health.md "On the GPU") */
int64_t sdc_interval(const struct tsr_config *cfg);

/* The host memory a rank's deterministic replay holds beside the training state (sdc_replay.c):
 * two batches' tokens, targets and segment starts (a replay recomputes into the rank's own
 * gradient buffers); 0 when health.replay_interval = 0 or the mode has no replay. The plan counts
 * it (plan/plan.h plan_view.sdc_bytes, filled by train_plan.c). Local; t's layout only. */
size_t sdc_plan_bytes(const struct tsr_trainer *t);

/* The fault sites of a step (sdc_fault) */
typedef enum {
    SDC_AT_REST = 0,   /* before step STEP + 1: weights and optimizer state, after step STEP */
    SDC_BEFORE_REDUCE, /* in step STEP: this rank's gradients before the reduction */
    SDC_AFTER_REDUCE,  /* in step STEP: the reduced gradients */
    SDC_LOADED,        /* resumed at step STEP: the weights as the load left them */
} sdc_when;

/* The entries (docs/health.md "What is compared") and the faults of TSR_FAULT: 0, or
 * TSR_EXIT_USAGE after rank 0 named a malformed flip. Local (the same on every rank). */
int sdc_init(struct tsr_trainer *t);
void sdc_free(struct tsr_trainer *t);
/* The fingerprint comparisons are on (health.fingerprint_interval not 0) */
int sdc_on(const struct tsr_trainer *t);
/* Once the state is loaded or initialised, before the first step: every rank's node gathered,
 * the state compared (replicas agree after a load's exchange), the frozen base's fingerprints
 * stored. Collective. */
int sdc_start(struct tsr_trainer *t);
/* The injected fault of TSR_FAULT=flip:SITE:... due at this point, if any (sdc_fault.c). */
void sdc_fault(struct tsr_trainer *t, sdc_when when);
/* The step's all-reduce of the flat gradients buf (ddp's, over its data group), done here as
 * a reduce-scatter and an all-gather when TSR_FAULT's flip of the reduction's data (sent,
 * received) is due in this step, its bit flipped in what the rank sends or receives: 1; else 0,
 * the caller reduces. Collective (every rank answers alike). */
int sdc_fault_reduce(struct tsr_trainer *t, float *buf);
/* Deterministic replay (sdc_replay.c). In a rank's pass over its microbatches: begin before the
 * first, first after the first one's backward (its loss given: on a replay step, its
 * fingerprint), whole after the last (the batch's loss sum: the fingerprint of what the rank hands
 * to the reduction, for a replay after the guard's outlier). Local. */
void sdc_replay_begin(struct tsr_trainer *t);
void sdc_replay_first(struct tsr_trainer *t, double loss);
void sdc_replay_whole(struct tsr_trainer *t, double loss);
/* A replay step, before the rank's own microbatches: the state compared, its right neighbour's
 * first microbatch recomputed (into the rank's gradient buffers). Collective. */
int sdc_replay_before(struct tsr_trainer *t, float scale);
/* A replay step, after the microbatches, before the reduction: the verdict. Collective; *redo = 1
 * on a rank whose gradients are not its microbatches' any more (its own first microbatch was
 * computed wrong once: transient; or a tie-break used its buffers): it computes them again. */
int sdc_replay(struct tsr_trainer *t, float scale, int *redo);
/* After the spike guard found an outlier (trigger: "outlier" or "non-finite value"), before its
 * response: every rank's batch recomputed by its left neighbour, the verdict (the data: rank 0
 * says so; a fault: sdc_report's). Collective; *redo = 1: the gradient buffers hold a
 * recomputation (an update applied after it needs the step's computed again). */
int sdc_replay_trip(struct tsr_trainer *t, float scale, const char *trigger, int *redo);
/* After the reduction of a step that compares: the reduced gradients' fingerprints. Local. */
void sdc_grads(struct tsr_trainer *t);
/* Before the step's first update. Collective. */
int sdc_before_update(struct tsr_trainer *t);
/* After the step's updates. Collective. */
int sdc_after_step(struct tsr_trainer *t);
/* Before a checkpoint of the current step is written. Collective. */
int sdc_before_save(struct tsr_trainer *t);
/* 1 when the state of the current step was compared and agreed (the checkpoint's
 * fingerprints_agreed), 0 when it was not compared (fingerprints off). Local. */
int sdc_agreed(const struct tsr_trainer *t);
/* After a run's last checkpoint. Collective. */
int sdc_final(struct tsr_trainer *t);
/* After the run stopped with TSR_EXIT_SDC and its save in flight was committed: the culprit file
 * (rank 0), the checkpoints that may hold the corruption set aside. Collective. */
void sdc_stopped(struct tsr_trainer *t);
/* At the end of a start (whatever its exit): how many comparisons and at-rest checks ran, what
 * they found and their time (the slowest rank's, and its share of the steps'), as a line (rank 0)
 * and a {"event": "health"} record of metrics.jsonl. Collective. */
void sdc_summary(struct tsr_trainer *t);

#endif

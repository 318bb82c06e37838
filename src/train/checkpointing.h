/* checkpointing.h — save, resume and stop requests for the trainer (docs/checkpoint-format.md,
 * docs/tessera-train.md "CHECKPOINTS AND RESUME", "STOP REQUESTS"). Collective: every rank calls
 * these at the same step boundary. Two files implement it, one concern each:
 * checkpointing_save.c (when to save, the asynchronous writer's life, the commit, the boundary
 * where a stop request is agreed) and checkpointing_resume.c (resume, --init-from, the config
 * checks, rollback); the signals themselves are watchdog/stop.h's; checkpointing_tensors.c lays
 * out the tensors the saves and the loads share. */
#ifndef TSR_CHECKPOINTING_H
#define TSR_CHECKPOINTING_H

#include "ckpt.h"
/* (--init-from's importer of weights-only sources: the trainer's uses.importer, train_state.h,
 * which the program hands trainer_init) */
#include "model/model_importer.h"
#include "train/train_state.h"
#include "watchdog/stop.h"

/* At a step boundary, one all-reduce: did any rank get a stop signal (*stop), and has every rank's
 * background writer finished? If so the save in flight is committed here (the CRCs agreed, the
 * rename, `latest`, keep_last retention). 0, or an exit code: a background write that failed on
 * any rank (a full disk, quota, an I/O error) is reported naming the file, and returns
 * TSR_EXIT_DATA with the previous checkpoint still `latest`. Collective. */
int checkpointing_boundary(tsr_trainer *t, int *stop);
/* A checkpoint of the current step (docs/checkpoint-format.md "Asynchronous save"). A save in
 * flight is committed first (one save in flight at a time: when it is still being written this
 * waits, and says how long). background (a periodic save) with save_async in effect: the
 * snapshot is taken and the file created, a thread of each rank writes it while training goes on,
 * and checkpointing_boundary or checkpointing_drain commits it later; else the save is written
 * and committed before this returns. Logs time and bytes (metrics.jsonl: blocking and background
 * write time). 0 or an exit code. Collective. */
int checkpointing_save(tsr_trainer *t, int background);
/* Before the state changes (the optimizer's update): waits until a background save's writer has
 * copied this rank's slices into the snapshot (it copies while the step's forward and backward
 * read the state; at once when done). device = cuda: no wait (the update changes the device's
 * state, not the host mirror the writer copies from). Local. */
void checkpointing_before_update(tsr_trainer *t);
/* Before the host mirror of the device's state is written (device = cuda: a pull for sampling on
 * the host): waits for a background save's copy of it, as checkpointing_before_update does for the
 * host's state. */
void checkpointing_before_pull(tsr_trainer *t);
/* Waits for the save in flight, if any, and commits it. 0 or an exit code. Collective. */
int checkpointing_drain(tsr_trainer *t);
/* The host memory of the largest snapshot a rank takes for a background save (rank 0's: its
 * part of the weights and both AdamW moments, the first sharding group's under zero3 / hsdp, the
 * adapters under LoRA): what the memory plan shows; 0 when save_async is false. */
uint64_t checkpointing_snapshot_bytes(const tsr_trainer *t);
/* The host memory a rank's save takes while it runs, beside the snapshot: the O_DIRECT buffers
 * (ckpt_io_buffer_bytes), and under zero3 / hsdp the layout exchange's (fsdp_exchange_floats) and,
 * without save_async, the parts of the three sets (with it they lie in the snapshot); under tensor
 * parallelism the global layout's part of each set and its exchange's buffers (model_tp.h). */
uint64_t checkpointing_io_bytes(const tsr_trainer *t);
/* save_async in effect (t->ck.async): allocates this rank's snapshot buffer and writes it once, so
 * that its memory is taken at start, not at the first save. Local. */
void checkpointing_snapshot_alloc(tsr_trainer *t);
/* Rank 0, once run_dir is open: warns when run_dir's filesystem has less room than one checkpoint
 * of this run (ckpt_room), which its first save would refuse (exit 2), maybe hours later. Nothing
 * for a run that saves only on a stop request (save_interval 0ba, save_final false). */
void checkpointing_room_warn(tsr_trainer *t);
/* Before anything is written into the run directory (trainer start-up): refuses what would fail
 * later, with TSR_EXIT_USAGE after tsr_error: a run_dir longer than CKPT_RUN_DIR_MAX (200)
 * characters; a --resume or --init-from checkpoint path longer than CKPT_MPIIO_PATH_MAX (244); a
 * resume (resume_path, else run_dir's `latest` / newest checkpoint whose metadata
 * reads) whose stored config has another model ("the model in the config differs from the
 * checkpoint's: n_layer 2 vs 4 (config vs checkpoint)"). TSR_EXIT_DATA when resume_path does not
 * resolve. 0 otherwise (also with no checkpoint). Local (no MPI), the same answer on every rank:
 * call it on rank 0 and broadcast the status (as checkpointing_resume does first), so that one
 * process, not every rank, opens the checkpoint. peeked (may be NULL): the metadata it read and
 * the file it read it from (path "" when none), for the load that follows (ckpt_peeked). */
int checkpointing_check_start(const tsr_trainer *t, const char *resume_path,
                              const char *init_from, ckpt_peeked *peeked);
/* At start: resume from resume_path if given, else from run_dir's latest valid checkpoint if any;
 * on a fresh run with init_from, load the weights only. Returns 0 (resumed or fresh) or an exit
 * code after reporting. */
int checkpointing_resume(tsr_trainer *t, const char *resume_path, const char *init_from);
/* Spike-guard rollback: loads the newest checkpoint of run_dir at or before max_step that loads
 * (weights, moments, step, data position; the guard's record stays the in-memory one; one that
 * fails verification is reported and an older one tried) and returns 0 with its path and data
 * batch; 1 when there is none; else an exit code after reporting. Collective. */
int checkpointing_rollback(tsr_trainer *t, int64_t max_step, char *path, size_t cap,
                           int64_t *data_batch);
/* After a rollback is committed: renames the checkpoints newer than the current step to
 * step-N.h5.rolledback (kept, invisible to resume and retention). Collective. */
void checkpointing_set_aside_after(tsr_trainer *t);

#endif

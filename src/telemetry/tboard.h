/* tboard.h — TensorBoard event files, written directly (no TensorFlow, no protobuf library).
 *
 * One file per process start: RUN_DIR/tb/events.out.tfevents.<unix-seconds>.<hostname> (".N"
 * appended if that name exists), so `tensorboard --logdir RUN_DIR/tb` shows a run and its resumes
 * as one run. Format (docs/tracking.md): a TFRecord stream of hand-encoded `Event` protobufs, the
 * first one {wall_time, file_version "brain.Event:2"}, then one per step {wall_time, step,
 * summary{value[]{tag, simple_value}}}. Each record is flushed once written, so a crash loses at
 * most the step being written. Rank 0 only: the caller decides who opens one.
 */
#ifndef TSR_TBOARD_H
#define TSR_TBOARD_H

#include <stdint.h>

typedef struct tsr_tboard tsr_tboard;

/* Creates RUN_DIR/tb if needed, opens a new event file there and writes its file_version record.
 * Returns 0, or TSR_EXIT_DATA after reporting (the path and the reason). */
int tboard_open(tsr_tboard **out, const char *run_dir);
/* Adds one scalar to the pending event. A non-finite value is skipped (TensorBoard would chart
 * NaN as a gap at best); the tag is truncated to 255 bytes. */
void tboard_scalar(tsr_tboard *tb, const char *tag, double value);
/* Writes the pending scalars as one Event of `step` and flushes; nothing when none are pending.
 * Returns 0, or -1 after a write error (reported once; the writer then stops writing). */
int tboard_write_step(tsr_tboard *tb, int64_t step);
/* Closes the file and frees tb (NULL is fine). Pending scalars not yet written are dropped. */
void tboard_close(tsr_tboard *tb);

#endif

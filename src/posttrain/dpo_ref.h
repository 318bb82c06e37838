/* dpo_ref.h — DPO's precomputed reference (dpo.reference = precomputed; docs/dpo.md).
 *
 * Before step 1 of a fresh run, a forward-only pass of the initial model over every training pair
 * (and the validation pairs an evaluation takes, with data.val) computes log p_ref(chosen) and
 * log p_ref(rejected) of each pair (dpo_reference_logps); they are stored in
 * run_dir/dpo-reference.bin and kept in the objective's state (tsr_dpo.ref), where dpo_compute and dpo_eval take them in
 * place of a reference forward. A resume reads them back (the model has moved on: they cannot be
 * computed again) after checking that they belong to this run's data.
 *
 * The file is a reference file (checkpoint/ckpt_ref.h; docs/checkpoint-format.md "Reference
 * files"), kind "dpo-logps": f64 values (train pairs, 2): chosen, rejected; then (validation
 * pairs, 2), one part; its record (dpo_ref.c dpo_ref_header from seq_len on) seq_len u32, train
 * pairs u64, validation pairs u64 (0: none), data.train's index.tsv CRC32C u32, data.val's u32
 * (0: none), data.train's path, data.val's path, the initial model (text: "init-from PATH" or
 * "seed N", with LoRA the base's checksum), each char[1024], '\0'-terminated. Files of format 1
 * (magic "TSRDPORF", version u32 1, the record, the values, a CRC32C of all before it: the
 * checksum) are still read; a resume from another run_dir copies the file beside its checkpoint
 * into run_dir as it is (its format and checksum kept).
 * Written by rank 0 to dpo-reference.bin.tmp, fsynced, renamed into place. A driver that runs
 * steps must call both below (trainer_open_run_dir does): dpo_compute stops with an internal
 * error when the values are missing, rather than take the moving policy as its reference. */
#ifndef TSR_DPO_REF_H
#define TSR_DPO_REF_H

#include "posttrain/dpo.h"

#define DPO_REF_FILE "dpo-reference.bin"

/* With ref->on (set by the table's references, which resolves dpo.reference = auto), on a resume
 * (the checkpoint read: run->out->start_load.what = "resume"): reads run_dir's stored reference
 * (else the one beside the checkpoint read, copied into run_dir by dpo_ref_build) and checks it
 * against this run: seq_len, data.train's and data.val's index checksum and pair
 * counts. 0, or TSR_EXIT_DATA after rank 0 named the file and what did not match. Writes nothing:
 * called before run_dir is opened. Collective; nothing without a precomputed reference. */
int dpo_ref_load(const tsr_run *run, tsr_dpo_ref *ref);

/* A fresh start: the reference pass over the pairs (the weights full on every rank, activations
 * allocated: the caller's), its time in the log, the file committed. After a resume whose file
 * came from beside another run's checkpoint: that file written into run_dir. 0 or TSR_EXIT_DATA
 * (the file could not be written). Collective; nothing without a precomputed reference. */
int dpo_ref_build(const tsr_run *run, tsr_dpo_ref *ref);

void dpo_ref_free(tsr_dpo_ref *ref);

#endif

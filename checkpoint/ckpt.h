/* ckpt.h — HDF5 checkpoints: one file per checkpoint, created collectively through MPI-IO, each
 * rank writing its own slices (checkpoint/ckpt_io.c).
 *
 * Every tensor is a dataset of its GLOBAL shape; each rank writes (and on load reads) the part it
 * owns, given as a range [lo, hi) of the tensor's row-major flattened elements (ZeRO shards of a
 * flat buffer cut tensors anywhere, so a range, not a box). Each dataset carries a "crc32c"
 * attribute: the CRC32C of the whole tensor's little-endian float32 bytes, assembled from the
 * ranks' slice CRCs (crc32c_combine), so it equals a plain CRC32C of the dataset read by h5py.
 *
 * Commit protocol (docs/checkpoint-format.md "How a save works"): write RUN_DIR/step-NNNNNNNN.h5.tmp, fsync, rename to
 * step-NNNNNNNN.h5, fsync the directory, then replace RUN_DIR/latest (a one-line text file naming
 * the checkpoint) by writing latest.tmp + rename; only then delete checkpoints beyond keep_last
 * (>= 2). A crash at any point leaves the previous checkpoint and `latest` valid.
 *
 * All functions are collective over MPI_COMM_WORLD (every rank calls them with the same names,
 * shapes and metadata) unless marked "local". The NO_MPI build has the same functions for a world
 * of one process (src/dist/dist.h), on serial HDF5, and writes and reads the same files. They return 0
 * or TSR_EXIT_DATA after tsr_error() named the file and the fault. Format:
 * docs/checkpoint-format.md.
 */
#ifndef TSR_CKPT_H
#define TSR_CKPT_H

#include <stddef.h>
#include <stdint.h>

#define TSR_CKPT_FORMAT "tessera-checkpoint"
#define TSR_CKPT_VERSION 3 /* 3: + data_sources; 2: fixed-length strings + meta_crc32c; 1, 2 still read */

typedef struct ckpt_tensor {
    const char *name;   /* dataset path inside the file, e.g. "model/wte" or "optim/m/wte" */
    int ndim;           /* 1..4 */
    int64_t shape[4];   /* global shape */
    uint64_t lo, hi;    /* this rank's flat element range, lo <= hi <= numel (may be empty) */
    float *data;        /* hi - lo elements: read from on save, written to on load */
} ckpt_tensor;

typedef struct ckpt_meta {
    int64_t step;            /* optimizer steps taken */
    int64_t tokens;          /* tokens seen */
    int64_t data_cursor;     /* global sample position of the next batch */
    int64_t world_size;      /* ranks that wrote it */
    int64_t global_batch;    /* resume refuses a different one */
    int64_t seed;
    char config[65536];      /* the effective config text */
    char program_version[64];
    /* Optional on read (files written before them lack them; docs/checkpoint-format.md) */
    int64_t optim_step;      /* AdamW updates applied (skipped ones do not count); -1 = absent */
    int64_t rollbacks;       /* spike-guard rollbacks so far in this run */
    int64_t updates_skipped; /* updates the spike guard skipped so far */
    char skipped_batches[4096]; /* "lo-hi,lo-hi,...": data batches [lo, hi) skipped by rollbacks */
    char mix_tokens[2048];   /* "name=tokens,...": tokens seen from each stream so far */
    char mix_plan[2048];     /* "start:count,count;...": the mix's phases in data batches */
    char guard_state[65536]; /* "streak first nonfinite|loss,norm;...": the spike guard's window */
    int64_t micro_batch;     /* micro_batch = auto: the microbatch in use; 0 = fixed by the config */
    int64_t fingerprints_agreed; /* 1: the ranks' fingerprints of the saved state were compared
                              * and agreed (docs/health.md); 0: not compared; -1: absent (a file
                              * written before the attribute) */
    /* Since version 3 (older files: ""): each data source's identity, a line each, "KEY crc32c:X
     * shards:N tokens:N PATH" (src/train/data_sources.c; docs/checkpoint-format.md) */
    char data_sources[24576];
} ckpt_meta;

typedef struct ckpt_stats {
    double seconds;          /* wall time of the whole save or load (commit included), from
                                the moment every rank has called it (a barrier: time a rank
                                spends arriving late is not the checkpoint's); an asynchronous
                                save: its start, the slowest writer and its commit, not the
                                training between them */
    uint64_t bytes;          /* tensor bytes written or read by all ranks */
    /* saves only (0 for a load): */
    double blocking;         /* this rank's seconds inside ckpt_save_start and ckpt_save_finish
                                (a synchronous save: = seconds) */
    double write;            /* the slowest rank's writer: its slices and fsync, seconds */
    double write_cpu;        /* the most CPU seconds a rank's writer thread used (its copies,
                                the CRC; not its I/O threads'); of it, each the most of any
                                rank: */
    double write_cpu_copy;   /* the copy into the snapshot (the stage), with the CRC32C */
    double write_cpu_slices; /* the slices' transfer: bounce copies, CRCs, pwrite of the ends */
    double write_cpu_fsync;  /* the fsync */
    double write_cpu_io;     /* the most CPU seconds a rank's I/O threads used (O_DIRECT) */
    uint64_t write_bounced;  /* the most bytes a rank copied into O_DIRECT bounce buffers */
    double waited;           /* of blocking, the longest any rank's ckpt_save_finish waited
                                for its writer to finish */
} ckpt_stats;

/* The root metadata of one checkpoint file as read and checked on one process (ckpt_peek_meta),
 * handed to the load that follows there (ckpt_load, ckpt_resume: `peeked`, used on rank 0, may be
 * NULL) so that it does not read the same attributes again: a load that comes to the same file,
 * unchanged since (device, inode, size and modification time all equal), takes meta from here;
 * any other file, or this one changed, is read as usual. */
typedef struct ckpt_peeked {
    char path[4200];     /* the file, as the peek named it ("" when none) */
    ckpt_meta meta;      /* its root attributes, checked (ck_meta_read_file) */
    uint64_t file_id[4]; /* device, inode, size in bytes, modification time in ns, before reading */
} ckpt_peeked;

/* An upper estimate of a checkpoint file's bytes, what a save checks there is room for: the n
 * tensors' fp32 values at their whole shapes (ndim and shape read; a 4 KiB alignment gap each),
 * 64 KiB of metadata and m's root attributes. */
uint64_t ckpt_file_bytes(const ckpt_meta *m, const ckpt_tensor *t, int n);
/* The host memory a rank's save or load takes for its O_DIRECT transfers while it runs (the bounce
 * buffers of ckpt_io.c, whether or not a slice needs them): what the memory plan counts. */
uint64_t ckpt_io_buffer_bytes(void);
/* 0 when run_dir's filesystem has need bytes free (or statvfs cannot tell), else -1 with "ckpt:
 * FS at MOUNT (run_dir) has N bytes free, the checkpoint needs M: free space there" in why. Local
 * (a save asks on rank 0). */
int ckpt_room(const char *run_dir, uint64_t need, char *why, size_t cap);

/* Writes and commits checkpoint `meta->step` in run_dir, then applies retention (keep_last >= 2).
 * The path of the committed file is written to path_out (may be NULL). */
int ckpt_save(const char *run_dir, const ckpt_meta *meta, const ckpt_tensor *tensors, int n,
              int keep_last, char *path_out, size_t path_cap, ckpt_stats *stats);

/* The asynchronous save (docs/checkpoint-format.md "Asynchronous save"): ckpt_save in two calls.
 * ckpt_save_start does steps 1 and 2 of a save (the checks, the .tmp on every rank, the file, its
 * root attributes and every dataset: all the collective work of creating it) in the caller's
 * thread and, with async, leaves this rank's slices to a writer thread that calls neither MPI nor
 * HDF5 (pwrite and O_DIRECT at the datasets' addresses, CRC32C on the way, fsync), and returns.
 * With a stage (async only; NULL: none), a buffer of stage_floats floats, the writer first copies
 * into it every slice whose data lies outside it (after the slices already inside it, which stay
 * where they are) and writes from there: the tensors' data must stay unchanged until
 * ckpt_save_wait_copied returns; the stage's until ckpt_save_finish. Without a stage the tensors'
 * data must stay unchanged until ckpt_save_finish. Without async the slices are written before
 * it returns, as ckpt_save does. 0 with *out, or an exit code after reporting (nothing in flight,
 * no .tmp left). Collective.
 * A stage with CKPT_STAGE_PAD_FLOATS floats more per tensor than the slices need lets the writer
 * place each copied slice where its whole blocks go to the disk straight from the stage (O_DIRECT,
 * no bounce copy: its CRC32C is computed in the copy into the stage); with less, the slices that
 * do not fit so are packed and go through bounce buffers (the same file either way). */
#define CKPT_STAGE_PAD_FLOATS 1024u
typedef struct ckpt_pending ckpt_pending;
int ckpt_save_start(const char *run_dir, const ckpt_meta *meta, const ckpt_tensor *tensors, int n,
                    int keep_last, int async, float *stage, size_t stage_floats,
                    ckpt_pending **out);
/* Waits until the writer has copied the slices into the stage (at once when there is none or it
 * has): the tensors' data may change after it. Returns the seconds it waited. Local. */
double ckpt_save_wait_copied(ckpt_pending *p);
/* 1 once this rank's writer has finished (written or failed): ckpt_save_finish will not wait for
 * it. Local, cheap (an atomic load). */
int ckpt_save_written(const ckpt_pending *p);
/* The step of the save in flight. Local. */
int64_t ckpt_save_step(const ckpt_pending *p);
/* Waits for this rank's writer, agrees on every rank's outcome, assembles the CRCs, closes the
 * file and commits it (rename, `latest`, keep_last retention), as ckpt_save's steps 4 to 6; frees
 * p. A write that failed on any rank (a full disk, quota, an I/O error) is reported by rank 0
 * naming the file, the rank, the tensor and the error, the .tmp removed: TSR_EXIT_DATA, the
 * previous checkpoint still `latest`. Collective. */
int ckpt_save_finish(ckpt_pending *p, char *path_out, size_t path_cap, ckpt_stats *stats);

/* What --resume / --init-from accept: a checkpoint file, a run directory (the checkpoint its
 * `latest` names) or a `latest` file. out = the checkpoint file. Returns 0, or TSR_EXIT_DATA after
 * reporting. Local (no MPI). */
int ckpt_resolve_path(const char *in, char *out, size_t cap);
/* Finds the checkpoint to resume from: `latest` if valid, else the newest valid step-*.h5, with a
 * warning naming what was wrong with each one skipped. Validity = opens, format/version attributes
 * right, every tensor's crc32c matches (each rank checks its slices of `tensors`, which gives the
 * layout wanted at THIS world size; data is read into the buffers as a side effect). Returns 0 and
 * fills meta and path_out; returns 1 when run_dir has no checkpoint at all (a fresh run); returns
 * TSR_EXIT_DATA when there are checkpoints but none is valid, after an error listing each file
 * tried and why. agreed (the run compares fingerprints, docs/health.md): the checkpoints whose
 * fingerprints_agreed is 1 are tried first, newest first, then the others; a warning names the
 * newer ones passed over. */
int ckpt_resume(const char *run_dir, ckpt_meta *meta, ckpt_tensor *tensors, int n, char *path_out,
                size_t path_cap, ckpt_stats *stats, const ckpt_peeked *peeked, int agreed);

/* The longest run directory (as given, relative or absolute) a checkpoint is written in: Open MPI
 * 4.1's MPI-IO aborts ("buffer overflow detected", SIGABRT) on a checkpoint path of 245+
 * characters (run_dir of 224+); 200 leaves room for longer step numbers. */
#define CKPT_RUN_DIR_MAX 200
/* The longest checkpoint path the trainer opens through MPI-IO (a load: --resume, --init-from, a
 * rollback): Open MPI 4.1 aborts on 245 characters and more, as on a save. */
#define CKPT_MPIIO_PATH_MAX 244
/* 0 when run_dir is short enough, else TSR_EXIT_USAGE with why naming its length and the limit
 * (ckpt_save refuses the same way, before any file exists). Local. */
int ckpt_check_run_dir(const char *run_dir, char *why, size_t cap);
/* 0 when a checkpoint file's path fits CKPT_MPIIO_PATH_MAX, else TSR_EXIT_USAGE with why naming
 * its length and the limit (every load checks it before MPI-IO sees the path). Local. */
int ckpt_check_load_path(const char *path, char *why, size_t cap);
/* The metadata of the checkpoint a resume of run_dir would try first: `latest`, else the newest
 * step-*.h5, skipping those whose metadata does not read (ck_meta_read_file: no tensor is read);
 * run_dir may also be a checkpoint file; agreed: in ckpt_resume's order (an agreed one first).
 * 0 with out filled; 1 when none (out->path empty). Local (no MPI). */
int ckpt_peek_meta(const char *run_dir, ckpt_peeked *out, int agreed);

/* Loads one named checkpoint file (no fallback): meta, and the tensors' slices (verified). A
 * tensor listed in `tensors` but absent from the file is an error naming it; with `only_prefix`
 * non-NULL only tensors whose name starts with it are loaded (e.g. "model/" for --init-from). */
int ckpt_load(const char *path, ckpt_meta *meta, ckpt_tensor *tensors, int n,
              const char *only_prefix, ckpt_stats *stats, const ckpt_peeked *peeked);

/* Rollbacks (checkpoint/ckpt_rollback.c). The newest committed step-*.h5 of run_dir whose step is
 * <= max_step: 0, its path and step, or 1 when there is none. Collective (rank 0 lists). */
int ckpt_newest_at_or_before(const char *run_dir, int64_t max_step, char *path_out, size_t cap,
                             int64_t *step_out);
/* Renames every committed checkpoint newer than step to step-N.h5.rolledback (kept for
 * inspection; neither resume nor retention sees it). Collective; failures are warnings. */
void ckpt_set_aside_after(const char *run_dir, int64_t step);
/* Renames every committed checkpoint of step `step` or later to step-N.h5.SUFFIX (kept for
 * inspection; neither resume nor retention sees it: the checkpoints that may hold a corruption,
 * docs/health.md) and points `latest` at the newest one left (or removes it when none is).
 * Collective; failures are warnings. */
void ckpt_set_aside_from(const char *run_dir, int64_t step, const char *suffix);

/* The crc32c attributes of the named tensors of checkpoint path (no tensor data is read):
 * have[i] = 1 and crc[i] where tensor names[i] exists with one, else have[i] = 0. 0, or -1 when
 * the file does not open. Local (no MPI). */
int ckpt_tensor_crcs(const char *path, const char *const *names, int n, uint32_t *crc, int *have);

/* CRC32C of A followed by B, from crc(A), crc(B) and B's length (local). */
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif

/* ckpt_h5.h — HDF5 helpers shared by the checkpoint writer, reader and `tessera ckpt` (internal).
 *
 * Attributes: integers are int64 little-endian (uint32 for "crc32c"), strings fixed-length UTF-8,
 * NUL-terminated (format version 2: their bytes sit in the object header, covered by the root
 * attribute meta_crc32c; version 1's variable-length strings lived in HDF5's global heap, which
 * HDF5 reads without any check: docs/checkpoint-format.md "Version 1 files").
 * Every function returns 0 or -1 (HDF5's own error stack is silenced: ck_h5_quiet()).
 */
#ifndef TSR_CKPT_H5_H
#define TSR_CKPT_H5_H

#include <hdf5.h>

#include "ckpt.h"
#include "ckpt_internal.h"

/* The "rng" root attribute: why no per-rank generator state is stored. */
#define CKPT_RNG_NOTE \
    "counter-based SplitMix64: state = (seed, counters); nothing per rank to store"

void ck_h5_quiet(void);

/* The file driver of ckpt_save / ckpt_load (the same file format either way):
 *   MPI build:    MPI-IO over MPI_COMM_WORLD (every rank opens the file together; collective
 *                 metadata), data transfers independent (each rank moves its own slices);
 *   NO_MPI build: serial HDF5's default (sec2) driver, one process.
 * Both with HDF5's data sieve buffer off: sec2 would otherwise hold up to 64 KiB of raw data
 * around a small write (the ends of a slice, ckpt_io.c) and write it back at H5Dclose, over the
 * blocks ckpt_io.c wrote with O_DIRECT meanwhile (MPI-IO has no sieve buffer). */
void ck_fapl_driver(hid_t fapl);
void ck_dxpl_independent(hid_t dxpl);
int ck_attr_write_i64(hid_t loc, const char *name, int64_t v);
int ck_attr_write_u32(hid_t loc, const char *name, uint32_t v);
/* Largest string attribute, its NUL included: an HDF5 object header message holds < 64 KiB. */
#define CK_STR_MAX 65000u
int ck_attr_write_str(hid_t loc, const char *name, const char *s); /* -1 above CK_STR_MAX */
int ck_attr_read_i64(hid_t loc, const char *name, int64_t *v);
int ck_attr_read_u32(hid_t loc, const char *name, uint32_t *v);
/* Reads a fixed-length string attribute; -1 when absent, not a fixed-length string (a
 * variable-length one is refused: ckpt_meta.c reads version 1's apart), or longer than cap - 1. */
int ck_attr_read_str(hid_t loc, const char *name, char *buf, size_t cap);

/* ---- root metadata (ckpt_meta.c) ---- */

/* What the root attributes hold besides ckpt_meta. */
typedef struct ck_meta_info {
    char format[64];
    int64_t version;
    char created[64];
    char rng[256];
} ck_meta_info;

/* Writes the root attributes of a checkpoint, meta_crc32c last (collective in a parallel file:
 * same values on every rank). -1 when HDF5 fails or a string is over CK_STR_MAX (why says). */
int ck_meta_write(hid_t file, const ckpt_meta *m, const char *created, char *why, size_t why_cap);
/* Reads and checks the root attributes of the file at `path` (local: its own read-only open with
 * HDF5's default driver; close any other handle on it first). Version 2: fixed-length strings,
 * meta_crc32c must match. Version 1: read in a child process, so a damaged global heap (HDF5
 * crashes or loops on one) rejects the file instead of killing the caller. Then
 * ck_meta_check. info may be NULL. Returns 0, or -1 with why naming the attribute and fault. */
int ck_meta_read_file(const char *path, ckpt_meta *m, ck_meta_info *info, char *why,
                      size_t why_cap);
/* The identities of docs/checkpoint-format.md: counters >= 0, world_size and global_batch >= 1,
 * optim_step <= step, skipped_batches well formed, and
 * data_cursor = (step + skipped batches) x global_batch. 0, or -1 with why. Local. */
int ck_meta_check(const ckpt_meta *m, char *why, size_t why_cap);

/* Selects a tensor's flat range [lo, hi) in its dataset's file space (H5Sselect_none if empty). */
int ck_select_range(hid_t filespace, int ndim, const int64_t *shape, uint64_t lo, uint64_t hi);

/* ---- moving a rank's slices (ckpt_io.c) ---- */

/* Transfers through HDF5 move at most CK_PIECE_BYTES at a time; those that bypass the page cache
 * (O_DIRECT) move CK_DIRECT_PIECE_BYTES, aligned to CK_DIRECT_ALIGN in the file and in memory. */
#define CK_PIECE_BYTES (8u << 20)
#define CK_DIRECT_PIECE_BYTES (16u << 20)
#define CK_DIRECT_ALIGN 4096u

/* What a writing ck_transfer_slices may be told and reports (ckpt_io.c); NULL: nothing. */
typedef struct ck_xfer {
    const uint32_t *crc;       /* in: crc[i] is slice i's CRC32C already, where have_crc[i] (the */
    const char *have_crc;      /* asynchronous save computed it in its copy into the stage): not
                                * computed again; NULL: every CRC computed on the way */
    double io_cpu;             /* out: the CPU seconds its I/O threads used */
    uint64_t bounced;          /* out: the bytes copied into a bounce buffer for O_DIRECT (a piece
                                * whose memory is not CK_DIRECT_ALIGN-aligned); aligned pieces
                                * are written straight from memory */
} ck_xfer;

/* Moves this rank's slices [t[i]->lo, t[i]->hi) of n tensors between memory and their datasets
 * ds[i] in the file `path` that HDF5 has open (writing: memory -> file, else file -> memory),
 * without waiting for any other rank, and computes each slice's CRC32C (slice_crc[i]) on the way
 * (writes: unless x gives it). off[i] is the dataset's address in the file (H5Dget_offset;
 * HADDR_UNDEF when unknown); dxpl the transfer properties for what goes through HDF5
 * (independent). ds NULL (writes only, every off[i] known): what would go through HDF5 goes with
 * pwrite at the datasets' addresses instead, so the call makes no HDF5 and no MPI call and may run
 * on a thread of its own (the asynchronous save, ckpt.c). How: ckpt_io.c. TSR_CKPT_DIRECT=0 in
 * the environment sends every byte the other way (no O_DIRECT). Local. Returns 0, or -1 when a
 * slice could not be moved (slice_ok[i] = 0 for those; *err, when err is not NULL, the errno of
 * the first failed pwrite, 0 when unknown). x (may be NULL): ck_xfer. */
int ck_transfer_slices(const char *path, int writing, int n, const ckpt_tensor *const *t,
                       const hid_t *ds, const haddr_t *off, hid_t dxpl, uint32_t *slice_crc,
                       int *slice_ok, int *err, ck_xfer *x);

/* Copies bytes from src to dst and advances crc over them (over dst's bytes when crc_of_dst, the
 * copy's target, else src's), in steps that stay in the core's cache: one pass over the memory
 * for both. Returns the CRC. */
uint32_t ck_copy_crc(void *dst, const void *src, size_t bytes, int crc_of_dst, uint32_t crc);

/* Reads a dataset's shape: its rank into *ndim (fails above 4) and dims into shape. */
int ck_dataset_shape(hid_t ds, int *ndim, int64_t *shape);

/* "(2, 3, 4)" */
void ck_shape_str(char *buf, size_t cap, int ndim, const int64_t *shape);

#endif

/* ---- collective helpers (the world of src/dist/dist.h: MPI_COMM_WORLD, or one process) ---- */

/* All ranks learn whether every rank is ok; when not, `why` on every rank becomes the reason of
 * the lowest failing rank (prefixed "rank R: " when that is not rank 0). Returns the global ok. */
int ck_agree(int ok, char *why, size_t why_cap);

/* The whole-tensor CRCs of n tensors from the ranks' slices, in one allgather: every rank gives
 * its range of t[i] (t[i]->lo, hi), the CRC of that slice and whether it transferred it
 * (slice_crc, slice_ok; NULL: 0 and ok, for checking the ranges only). For each tensor in order:
 * every rank transferred its slice, the non-empty slices tile [0, numel) exactly; the slice CRCs
 * are combined in order of lo into crc[i] (crc may be NULL). Returns 0, or -1 with why naming the
 * first tensor at fault (same on every rank). */
int ck_tensors_crc(int n, const ckpt_tensor *const *t, const uint32_t *slice_crc,
                   const int *slice_ok, uint32_t *crc, char *why, size_t why_cap);

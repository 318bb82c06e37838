/* ckpt_internal.h — checkpoint internals shared by the checkpoint sources and the unit tests.
 *
 * Pure logic only (no MPI, no HDF5): the flat-range -> hyperslab decomposition and the listing of
 * a run directory's checkpoints. HDF5 helpers live in ckpt_h5.h.
 */
#ifndef TSR_CKPT_INTERNAL_H
#define TSR_CKPT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MAX_NDIM 4
#define CKPT_MAX_BOXES (2 * CKPT_MAX_NDIM - 1)

/* One hyperslab block of an N-D dataset: start and count per dimension (unused dims are 0). */
typedef struct ckpt_box {
    uint64_t start[CKPT_MAX_NDIM], count[CKPT_MAX_NDIM];
} ckpt_box;

/* Decomposes the row-major flat element range [lo, hi) of a tensor of `shape` (ndim 1..4) into at
 * most 2*ndim-1 disjoint boxes whose union is exactly that range, listed in flat order: partial
 * leading rows, a block of full rows, partial trailing rows (recursively per dimension). Returns
 * the number of boxes (0 for an empty range), or -1 when the arguments are invalid
 * (ndim out of range, a dimension < 1, lo > hi or hi > numel). */
int flat_range_to_hyperslabs(int ndim, const int64_t *shape, uint64_t lo, uint64_t hi,
                             ckpt_box *boxes);

/* Number of elements of a shape, or 0 when a dimension is < 1 or ndim is out of 1..4. */
uint64_t ckpt_numel(int ndim, const int64_t *shape);

/* The values of x[0, n) that are not finite (NaN, +-Inf: the exponent bits all ones), and in
 * *first the index of the first of them (n when none). One read pass, vectorised (a bit test
 * OR-reduced per block of 4096; the block that has one is then searched). */
uint64_t ckpt_nonfinite(const float *x, uint64_t n, uint64_t *first);

/* Parses "step-NNNNNNNN.h5" (digits only, exact suffix): returns 1 and the step, else 0. */
int ckpt_parse_name(const char *name, int64_t *step);

/* Steps of the committed checkpoints step-*.h5 in run_dir, newest first. *steps is malloc'ed
 * (free it); returns the count, or -1 when the directory cannot be read (errno set). Local. */
int ckpt_list_steps(const char *run_dir, int64_t **steps);

/* Reads RUN_DIR/latest: 1 and the named file's basename in name (validated: step-*.h5), 0 when
 * there is no `latest`, -1 when it exists but does not name a checkpoint (reason in why). Local. */
int ckpt_read_latest(const char *run_dir, char *name, size_t cap, char *why, size_t why_cap);

/* Points RUN_DIR/latest at the checkpoint named base ("step-NNNNNNNN.h5"): latest.tmp written,
 * fsynced, renamed over latest, the directory fsynced. 0, or -1 with why (no latest.tmp left).
 * Local (rank 0). */
int ck_write_latest(const char *run_dir, const char *base, char *why, size_t why_cap);

#endif

/* ckpt_mpi.c — the two collectives under checkpoint saves and loads: agreeing on failure, and
 * assembling a tensor's CRC from the ranks' slice CRCs (crc32c_combine). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_h5.h"

int ck_agree(int ok, char *why, size_t why_cap) {
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int mine = ok ? world : rank, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == world) return 1;
    char buf[1024];
    if (rank == first) {
        if (first == 0)
            snprintf(buf, sizeof buf, "%s", why);
        else
            snprintf(buf, sizeof buf, "rank %d: %s", first, why);
    }
    MPI_Bcast(buf, (int)sizeof buf, MPI_CHAR, first, MPI_COMM_WORLD);
    buf[sizeof buf - 1] = '\0';
    snprintf(why, why_cap, "%s", buf);
    return 0;
}

typedef struct slice_info {
    uint64_t lo, hi;
    uint32_t crc, ok;
} slice_info;

static const slice_info *sort_base;
static int by_lo(const void *a, const void *b) {
    uint64_t x = sort_base[*(const int *)a].lo, y = sort_base[*(const int *)b].lo;
    return x < y ? -1 : x > y ? 1 : 0;
}

int ck_tensor_crc(const char *name, uint64_t numel, uint64_t lo, uint64_t hi, uint32_t slice_crc,
                  int slice_ok, uint32_t *crc, char *why, size_t why_cap) {
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    slice_info mine = {lo, hi, slice_crc, (uint32_t)(slice_ok != 0)};
    slice_info *all = malloc((size_t)world * sizeof *all);
    int *order = malloc((size_t)world * sizeof *order);
    if (!all || !order) {
        free(all);
        free(order);
        snprintf(why, why_cap, "%s: out of memory", name);
        return -1;
    }
    MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE,
                  MPI_COMM_WORLD);
    int rc = 0, m = 0;
    for (int r = 0; r < world && rc == 0; r++) {
        if (!all[r].ok) {
            snprintf(why, why_cap, "tensor %s: rank %d could not transfer its slice [%llu, %llu)",
                     name, r, (unsigned long long)all[r].lo, (unsigned long long)all[r].hi);
            rc = -1;
        } else if (all[r].hi > all[r].lo) {
            order[m++] = r;
        }
    }
    if (rc == 0) {
        sort_base = all;
        qsort(order, (size_t)m, sizeof *order, by_lo);
        uint64_t pos = 0;
        uint32_t acc = 0; /* CRC32C of the empty string */
        for (int k = 0; k < m && rc == 0; k++) {
            const slice_info *s = &all[order[k]];
            if (s->lo != pos) {
                snprintf(
                    why, why_cap,
                    "tensor %s: the ranks' ranges do not tile [0, %llu): rank %d starts at %llu, "
                    "expected %llu (%s)",
                    name, (unsigned long long)numel, order[k], (unsigned long long)s->lo,
                    (unsigned long long)pos, s->lo < pos ? "overlap" : "gap");
                rc = -1;
                break;
            }
            acc = crc32c_combine(acc, s->crc, (s->hi - s->lo) * sizeof(float));
            pos = s->hi;
        }
        if (rc == 0 && pos != numel) {
            snprintf(why, why_cap,
                     "tensor %s: the ranks' ranges cover %llu of its %llu elements (expected all)",
                     name, (unsigned long long)pos, (unsigned long long)numel);
            rc = -1;
        }
        *crc = acc;
    }
    free(all);
    free(order);
    return rc;
}

/* ckpt_mpi.c — the two collectives under checkpoint saves and loads: agreeing on failure, and
 * assembling the tensors' CRCs from the ranks' slice CRCs (crc32c_combine), all tensors in one
 * allgather. Through src/dist/dist.h: MPI_COMM_WORLD in the MPI build, a world of one with NO_MPI=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_h5.h"
#include "common.h"
#include "dist/dist.h"

int ck_agree(int ok, char *why, size_t why_cap) {
    int rank = dist_world_rank(), world = dist_world_size();
    int first = ok ? world : rank;
    dist_allreduce_min_int(&first, 1);
    if (first == world) return 1;
    char buf[1024] = "";
    if (rank == first) {
        if (first == 0)
            snprintf(buf, sizeof buf, "%s", why);
        else
            snprintf(buf, sizeof buf, "rank %d: %s", first, why);
    }
    dist_bcast(buf, sizeof buf, first);
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

/* One tensor: all[r] is rank r's slice (r < world); order has room for world ints. */
static int combine_one(const char *name, uint64_t numel, const slice_info *all, int world,
                       int *order, uint32_t *crc, char *why, size_t why_cap) {
    int m = 0;
    for (int r = 0; r < world; r++) {
        if (!all[r].ok) {
            snprintf(why, why_cap, "tensor %s: rank %d could not transfer its slice [%llu, %llu)",
                     name, r, (unsigned long long)all[r].lo, (unsigned long long)all[r].hi);
            return -1;
        }
        if (all[r].hi > all[r].lo) order[m++] = r;
    }
    sort_base = all;
    qsort(order, (size_t)m, sizeof *order, by_lo);
    uint64_t pos = 0;
    uint32_t acc = 0; /* CRC32C of the empty string */
    for (int k = 0; k < m; k++) {
        const slice_info *s = &all[order[k]];
        if (s->lo != pos) {
            snprintf(why, why_cap,
                     "tensor %s: the ranks' ranges do not tile [0, %llu): rank %d starts at %llu, "
                     "expected %llu (%s)",
                     name, (unsigned long long)numel, order[k], (unsigned long long)s->lo,
                     (unsigned long long)pos, s->lo < pos ? "overlap" : "gap");
            return -1;
        }
        acc = crc32c_combine(acc, s->crc, (s->hi - s->lo) * sizeof(float));
        pos = s->hi;
    }
    if (pos != numel) {
        snprintf(why, why_cap,
                 "tensor %s: the ranks' ranges cover %llu of its %llu elements (expected all)",
                 name, (unsigned long long)pos, (unsigned long long)numel);
        return -1;
    }
    *crc = acc;
    return 0;
}

int ck_tensors_crc(int n, const ckpt_tensor *const *t, const uint32_t *slice_crc,
                   const int *slice_ok, uint32_t *crc, char *why, size_t why_cap) {
    int world = dist_world_size();
    size_t cnt = (size_t)(n > 0 ? n : 1);
    slice_info *mine = tsr_calloc(cnt, sizeof *mine);
    slice_info *all = tsr_malloc((size_t)world * cnt * sizeof *all);
    slice_info *col = tsr_malloc((size_t)world * sizeof *col);
    int *order = tsr_malloc((size_t)world * sizeof *order);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        mine[i].lo = t[i]->lo;
        mine[i].hi = t[i]->hi;
        mine[i].crc = slice_crc ? slice_crc[i] : 0;
        mine[i].ok = slice_ok ? (uint32_t)(slice_ok[i] != 0) : 1;
    }
    dist_allgather(mine, all, cnt * sizeof *mine);
    for (int i = 0; i < n && rc == 0; i++) {
        for (int r = 0; r < world; r++) col[r] = all[(size_t)r * cnt + (size_t)i];
        uint32_t c = 0;
        rc = combine_one(t[i]->name, ckpt_numel(t[i]->ndim, t[i]->shape), col, world, order, &c,
                         why, why_cap);
        if (crc) crc[i] = c;
    }
    free(mine), free(all), free(col), free(order);
    return rc;
}

/* ckpt_ranges.c — which part of an N-D dataset a rank owns, and where the checkpoints of a run are.
 *
 * A rank's share of a tensor is a flat row-major range [lo, hi) (ZeRO shards cut flat buffers
 * anywhere). HDF5 selects N-D boxes, so a range becomes a union of at most 2*ndim-1 boxes.
 * Example, shape (4, 5), range [3, 17): row 0 cols 3..4, rows 1..2 full, row 3 cols 0..1.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "ckpt_internal.h"
#include "common.h"

uint64_t ckpt_numel(int ndim, const int64_t *shape) {
    if (ndim < 1 || ndim > CKPT_MAX_NDIM) return 0;
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1) return 0;
        n *= (uint64_t)shape[d];
    }
    return n;
}

/* Adds the boxes of [lo, hi) (0 <= lo < hi <= inner(k-1)) inside the block whose indices of dims
 * < k are fixed at prefix[]. stride[k] = elements per index of dim k. */
static void decompose(int ndim, const int64_t *shape, const uint64_t *stride, int k,
                      uint64_t *prefix, uint64_t lo, uint64_t hi, ckpt_box *boxes, int *nb) {
    uint64_t s = stride[k];
    uint64_t a = (lo + s - 1) / s, b = hi / s; /* full rows of dim k: [a, b) */
    if (a > b) {                               /* inside one row of dim k */
        uint64_t i = lo / s;
        prefix[k] = i;
        decompose(ndim, shape, stride, k + 1, prefix, lo - i * s, hi - i * s, boxes, nb);
        return;
    }
    if (lo < a * s) { /* partial leading row a-1 */
        prefix[k] = a - 1;
        decompose(ndim, shape, stride, k + 1, prefix, lo - (a - 1) * s, s, boxes, nb);
    }
    if (b > a) { /* full rows [a, b) */
        ckpt_box *bx = &boxes[(*nb)++];
        memset(bx, 0, sizeof *bx);
        for (int d = 0; d < k; d++) bx->start[d] = prefix[d], bx->count[d] = 1;
        bx->start[k] = a;
        bx->count[k] = b - a;
        for (int d = k + 1; d < ndim; d++) bx->start[d] = 0, bx->count[d] = (uint64_t)shape[d];
    }
    if (hi > b * s) { /* partial trailing row b */
        prefix[k] = b;
        decompose(ndim, shape, stride, k + 1, prefix, 0, hi - b * s, boxes, nb);
    }
}

int flat_range_to_hyperslabs(int ndim, const int64_t *shape, uint64_t lo, uint64_t hi,
                             ckpt_box *boxes) {
    uint64_t numel = ckpt_numel(ndim, shape);
    if (numel == 0 || lo > hi || hi > numel) return -1;
    if (lo == hi) return 0;
    uint64_t stride[CKPT_MAX_NDIM], prefix[CKPT_MAX_NDIM] = {0};
    stride[ndim - 1] = 1;
    for (int d = ndim - 2; d >= 0; d--) stride[d] = stride[d + 1] * (uint64_t)shape[d + 1];
    int nb = 0;
    decompose(ndim, shape, stride, 0, prefix, lo, hi, boxes, &nb);
    return nb;
}

int ckpt_parse_name(const char *name, int64_t *step) {
    if (strncmp(name, "step-", 5) != 0) return 0;
    const char *p = name + 5;
    int64_t v = 0;
    int nd = 0;
    for (; isdigit((unsigned char)*p); p++, nd++) {
        if (nd >= 18) return 0;
        v = v * 10 + (*p - '0');
    }
    if (nd == 0 || strcmp(p, ".h5") != 0) return 0;
    *step = v;
    return 1;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ckpt_list_steps(const char *run_dir, int64_t **steps) {
    *steps = NULL;
    DIR *d = opendir(run_dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (!ckpt_parse_name(e->d_name, &s)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *p = realloc(*steps, (size_t)cap * sizeof *p);
            if (!p) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                errno = ENOMEM;
                return -1;
            }
            *steps = p;
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n > 1) qsort(*steps, (size_t)n, sizeof **steps, cmp_desc);
    return n;
}

int ckpt_read_latest(const char *run_dir, char *name, size_t cap, char *why, size_t why_cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/latest", run_dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(why, why_cap, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char buf[256] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    int64_t step;
    if (!ckpt_parse_name(buf, &step) || n + 1 > cap) {
        snprintf(why, why_cap,
                 "%s does not name a checkpoint (expected \"step-NNNNNNNN.h5\", found \"%.64s\")",
                 path, buf);
        return -1;
    }
    memcpy(name, buf, n + 1);
    return 1;
}

int ckpt_resolve_path(const char *in, char *out, size_t cap) {
    struct stat sb;
    char dir[4096], name[256], why[1024] = "";
    const char *slash = strrchr(in, '/');
    int is_dir = stat(in, &sb) == 0 && S_ISDIR(sb.st_mode);
    int is_latest = !is_dir && strcmp(slash ? slash + 1 : in, "latest") == 0;
    if (!is_dir && !is_latest) return tsr_snprintf(out, cap, "%s", in) ? TSR_EXIT_DATA : 0;
    if (is_dir) snprintf(dir, sizeof dir, "%s", in);
    else snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - in) : 1, slash ? in : ".");
    int lr = ckpt_read_latest(dir, name, sizeof name, why, sizeof why);
    if (lr == 0)
        tsr_error("%s/latest: cannot be read (a run directory needs its `latest` file; or give a "
                  "step-NNNNNNNN.h5)", dir);
    else if (lr < 0)
        tsr_error("%s", why);
    if (lr != 1) return TSR_EXIT_DATA;
    return tsr_snprintf(out, cap, "%s/%s", dir, name) ? TSR_EXIT_DATA : 0;
}

uint64_t ckpt_nonfinite(const float *x, uint64_t n, uint64_t *first) {
    uint64_t count = 0;
    *first = n;
    for (uint64_t b = 0; b < n; b += 4096) {
        const uint64_t e = b + 4096 < n ? b + 4096 : n;
        uint32_t any = 0;
        for (uint64_t i = b; i < e; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            any |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (!any) continue;
        for (uint64_t i = b; i < e; i++) {
            uint32_t u;
            memcpy(&u, &x[i], sizeof u);
            if ((u & 0x7f800000u) != 0x7f800000u) continue;
            if (*first == n) *first = i;
            count++;
        }
    }
    return count;
}

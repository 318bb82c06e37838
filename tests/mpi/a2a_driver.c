/* a2a_driver.c — drives dist_group_alltoallv for tests/mpi/test_alltoallv.sh.
 *
 *   a2a_driver ROW BIG ELEM
 *
 * Every rank sends every rank (itself included) rows of ROW elements of ELEM bytes, as the expert
 * exchange does: rank s sends rank d ((7 s + 3 d) mod 5) rows, plus BIG rows from rank 0 to rank 1
 * (rank 0 to itself in a world of one), each block at its prefix-sum displacement. Byte i of the block from s to d holds
 * (131 s + 17 d + 7 i) mod 256; every rank checks every byte it received. Prints one line per rank
 * ("rank R: received N bytes from W ranks, M wrong"); exit 0 when nothing is wrong, 1 else (the
 * library's own exits on a failed exchange).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common.h"
#include "dist/dist.h"

static size_t rows(int s, int d, int n, size_t big) {
    return (size_t)((7 * s + 3 * d) % 5) + (s == 0 && d == 1 % n ? big : 0);
}

/* the block from s to d repeats these 256 bytes */
static void pattern(unsigned char *pat, int s, int d) {
    for (unsigned i = 0; i < 256; i++)
        pat[i] = (unsigned char)((131u * (unsigned)s + 17u * (unsigned)d + 7u * i) & 0xff);
}

/* bytes of zeroed memory, in huge pages where the kernel allows (the 2 GiB case faults in
 * 512 times fewer pages) */
static unsigned char *alloc_bytes(size_t bytes) {
    void *p = mmap(NULL, bytes + 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) tsr_die(TSR_EXIT_INTERNAL, "a2a_driver: cannot map %zu bytes", bytes + 1);
    madvise(p, bytes + 1, MADV_HUGEPAGE);
    return p;
}

int main(int argc, char **argv) {
    tsr_dist d;
    dist_init(&d, &argc, &argv);
    if (argc != 4) {
        fprintf(stderr, "usage: a2a_driver ROW BIG ELEM\n");
        dist_finalize();
        return 2;
    }
    const size_t row = strtoull(argv[1], NULL, 10), big = strtoull(argv[2], NULL, 10);
    const size_t elem = strtoull(argv[3], NULL, 10);
    tsr_group *g = dist_group_split(0, d.rank);
    const int n = dist_group_size(g), me = dist_group_rank(g);
    size_t *sc = tsr_malloc(4 * (size_t)n * sizeof *sc), *sd = sc + n, *rc = sd + n, *rd = rc + n;
    size_t st = 0, rt = 0;
    for (int p = 0; p < n; p++) {
        sc[p] = rows(me, p, n, big) * row, sd[p] = st, st += sc[p];
        rc[p] = rows(p, me, n, big) * row, rd[p] = rt, rt += rc[p];
    }
    unsigned char *send = alloc_bytes(st * elem), *recv = alloc_bytes(rt * elem);
    unsigned char pat[256];
    for (int p = 0; p < n; p++) {
        unsigned char *b = send + sd[p] * elem;
        const size_t len = sc[p] * elem;
        pattern(pat, me, p);
        for (size_t at = 0; at < len; at += 256) memcpy(b + at, pat, len - at < 256 ? len - at : 256);
    }
    dist_group_alltoallv(g, send, sc, sd, recv, rc, rd, elem);
    size_t wrong = 0;
    for (int p = 0; p < n; p++) {
        const unsigned char *b = recv + rd[p] * elem;
        const size_t len = rc[p] * elem;
        pattern(pat, p, me);
        for (size_t at = 0; at < len; at += 256) {
            const size_t k = len - at < 256 ? len - at : 256;
            if (memcmp(b + at, pat, k) == 0) continue;
            for (size_t i = 0; i < k; i++) wrong += b[at + i] != pat[i];
        }
    }
    printf("rank %d: received %zu bytes from %d ranks, %zu wrong\n", me, rt * elem, n, wrong);
    munmap(send, st * elem + 1), munmap(recv, rt * elem + 1), free(sc);
    dist_group_free(g);
    dist_finalize();
    return wrong != 0;
}

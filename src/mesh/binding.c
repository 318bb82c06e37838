/* binding.c — see binding.h. */
#include "mesh/binding.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* cpu's core as package * 1e6 + core_id (sysfs topology); -1 when unreadable */
static long core_of(int cpu) {
    long pkg = 0, core = -1;
    char p[160];
    snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
    FILE *f = fopen(p, "r");
    if (f && fscanf(f, "%ld", &core) != 1) core = -1;
    if (f) fclose(f);
    snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
    if ((f = fopen(p, "r"))) {
        if (fscanf(f, "%ld", &pkg) != 1) pkg = 0;
        fclose(f);
    }
    return core < 0 ? -1 : pkg * 1000000 + core;
}

/* cpu's NUMA node (the nodeN entry of its sysfs directory); -1 when none */
static int node_of(int cpu) {
    for (int k = 0; k < 64; k++) {
        char p[160];
        snprintf(p, sizeof p, "/sys/devices/system/cpu/cpu%d/node%d", cpu, k);
        FILE *f = fopen(p, "r"); /* (a directory: fopen for reading succeeds on Linux) */
        if (f) return fclose(f), k;
    }
    return -1;
}

int binding_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    long seen[CPU_SETSIZE];
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        long k = core_of(c);
        int dup = 0;
        for (int i = 0; i < n && k >= 0; i++) dup |= seen[i] == k;
        if (!dup) seen[n++] = k;
    }
    return n;
}

/* a set of small numbers as "0-3,8" */
static void ranges(char *buf, size_t n, const unsigned char *on, int count) {
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && o < n; i++) {
        if (!on[i] || (i > 0 && on[i - 1])) continue;
        int j = i;
        while (j + 1 < count && on[j + 1]) j++;
        o += (size_t)snprintf(buf + o, n - o, j > i ? "%s%d-%d" : "%s%d", o ? "," : "", i, j);
    }
    if (!buf[0]) snprintf(buf, n, "?");
}

void binding_cuda_visible(int index, char *buf, size_t n) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (!vis || !*vis) {
        snprintf(buf, n, "%d", index);
        return;
    }
    int count = 1;
    for (const char *p = vis; *p; p++) count += *p == ',';
    const char *p = vis;
    for (int k = index % count; k > 0; k--) p = strchr(p, ',') + 1;
    snprintf(buf, n, "%.*s", (int)strcspn(p, ","), p);
}

void binding_describe(char *buf, size_t n, int gpu) {
    static unsigned char cpus[CPU_SETSIZE], nodes[64];
    cpu_set_t set;
    memset(cpus, 0, sizeof cpus), memset(nodes, 0, sizeof nodes);
    int any_node = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE; c++) {
            if (!CPU_ISSET(c, &set)) continue;
            cpus[c] = 1;
            int k = node_of(c);
            if (k >= 0) nodes[k] = 1, any_node = 1;
        }
    char cl[256], nl[64], g[80] = "-";
    ranges(cl, sizeof cl, cpus, CPU_SETSIZE);
    ranges(nl, sizeof nl, nodes, 64);
    if (gpu >= 0) binding_cuda_visible(gpu, g, sizeof g);
    snprintf(buf, n, "cpus %s (%d core%s) | NUMA %s | GPU %s", cl, binding_cores(),
             binding_cores() == 1 ? "" : "s", any_node ? nl : "-", g);
}

void binding_print(const tsr_dist *d, int gpu) {
    enum { LINE = 192 };
    char mine[LINE + 64];
    snprintf(mine, 64, "%s", d->host);
    binding_describe(mine + 64, LINE, gpu);
    char *all = d->rank == 0 ? tsr_malloc((size_t)d->world * sizeof mine) : NULL;
    dist_gather(mine, all, sizeof mine, 0);
    if (d->rank != 0) return;
    for (int r = 0; r < d->world && r < 64; r++)
        printf("rank %d on %s: %s\n", r, all + (size_t)r * sizeof mine,
               all + (size_t)r * sizeof mine + 64);
    if (d->world > 64) printf("(ranks 64..%d: as above, not listed)\n", d->world - 1);
    fflush(stdout);
    free(all);
}

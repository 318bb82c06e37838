/* energy.c — see energy.h. NVML is declared here from NVIDIA's documentation of its C ABI (the
 * build machine has no nvml.h; healthcheck/gpu/hc_gpu_nvml.c does the same for the checker):
 *   nvmlInit_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByUUID, nvmlErrorString,
 *   nvmlDeviceGetTotalEnergyConsumption (unsigned long long millijoules since the driver loaded):
 *   https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html; NVML_SUCCESS is 0. */
#include "telemetry/energy.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mesh/binding.h"

typedef struct nvml_device_st *nvml_dev_t;
static struct {
    void *lib;
    nvml_dev_t dev;
    int (*energy)(nvml_dev_t, unsigned long long *);
} nv;

static void *nv_sym(const char *name) { return dlsym(nv.lib, name); }

/* The NVML handle of CUDA device `index` as CUDA_VISIBLE_DEVICES maps it (an index or a UUID;
 * unset: the same index). 0, or -1 with why. */
static int nvml_handle(int index, char *why, size_t n) {
    int (*by_index)(unsigned, nvml_dev_t *), (*by_uuid)(const char *, nvml_dev_t *);
    *(void **)&by_index = nv_sym("nvmlDeviceGetHandleByIndex_v2");
    *(void **)&by_uuid = nv_sym("nvmlDeviceGetHandleByUUID");
    char entry[128];
    binding_cuda_visible(index, entry, sizeof entry); /* an index or a GPU-/MIG- UUID */
    int rc = -1;
    if (!isdigit((unsigned char)entry[0]) && by_uuid) rc = by_uuid(entry, &nv.dev);
    else if (by_index) rc = by_index((unsigned)atoi(entry), &nv.dev);
    if (rc != 0) snprintf(why, n, "NVML has no handle for CUDA device %d (%.60s): error %d", index,
                          entry, rc);
    return rc ? -1 : 0;
}

static double nvml_joules(void) {
    unsigned long long mj = 0;
    return nv.energy && nv.energy(nv.dev, &mj) == 0 ? (double)mj / 1e3 : NAN;
}

static void gpu_open(tsr_energy *e, int index) {
    nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib) {
        snprintf(e->gpu_why, sizeof e->gpu_why, "libnvidia-ml.so.1 cannot be opened (no NVIDIA "
                 "driver on this node)");
        return;
    }
    int (*init)(void);
    *(void **)&init = nv_sym("nvmlInit_v2");
    *(void **)&nv.energy = nv_sym("nvmlDeviceGetTotalEnergyConsumption");
    if (!init || !nv.energy || init() != 0) {
        snprintf(e->gpu_why, sizeof e->gpu_why, "NVML did not start (nvmlInit_v2 or the energy "
                 "counter missing or failing)");
        return;
    }
    if (nvml_handle(index, e->gpu_why, sizeof e->gpu_why)) return;
    e->gpu_j0 = nvml_joules();
    if (isnan(e->gpu_j0))
        snprintf(e->gpu_why, sizeof e->gpu_why, "the GPU has no total energy counter (NVML: "
                 "Volta or newer)");
    else e->gpu_on = 1;
}

/* One top-level package entry: intel-rapl:N (one colon; intel-rapl:N:M are its sub-domains) */
static int rapl_package(const char *name) {
    const char *c = strchr(name, ':');
    return !strncmp(name, "intel-rapl:", 11) && c && !strchr(c + 1, ':');
}

static double read_number(const char *dir, const char *entry, const char *file) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s/%s", dir, entry, file);
    FILE *f = fopen(path, "r");
    double v = NAN;
    if (f && fscanf(f, "%lf", &v) != 1) v = NAN;
    if (f) fclose(f);
    return v;
}

static int by_name(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* the package entries' names, sorted (readdir's order is the filesystem's) */
static int rapl_names(DIR *d, char names[][64]) {
    int k = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && k < TSR_RAPL_MAX)
        if (rapl_package(de->d_name) && strlen(de->d_name) < 64) strcpy(names[k++], de->d_name);
    const char *p[TSR_RAPL_MAX];
    char sorted[TSR_RAPL_MAX][64];
    for (int i = 0; i < k; i++) p[i] = names[i];
    qsort(p, (size_t)k, sizeof *p, by_name);
    for (int i = 0; i < k; i++) strcpy(sorted[i], p[i]);
    memcpy(names, sorted, sizeof sorted[0] * (size_t)k);
    return k;
}

int energy_rapl_read(const char *root, double *j, double *range, char *why, size_t n) {
    DIR *d = opendir(root);
    if (!d) {
        snprintf(why, n, "%s: no powercap (RAPL) counters on this node", root);
        return -1;
    }
    char names[TSR_RAPL_MAX][64];
    int k = rapl_names(d, names);
    closedir(d);
    for (int i = 0; i < k; i++) {
        j[i] = read_number(root, names[i], "energy_uj") / 1e6;
        range[i] = read_number(root, names[i], "max_energy_range_uj") / 1e6;
        if (isnan(j[i]) || isnan(range[i])) {
            snprintf(why, n, "%s/%s/energy_uj: not readable (root only on kernels since 5.10)",
                     root, names[i]);
            return -1;
        }
    }
    if (!k) snprintf(why, n, "%s: no intel-rapl:N package counters", root);
    return k ? k : -1;
}

static const char *rapl_root(void) {
    const char *r = getenv("TSR_POWERCAP_ROOT");
    return r && *r ? r : "/sys/class/powercap";
}

void energy_start(tsr_energy *e, int gpu_index, int node_first) {
    memset(e, 0, sizeof *e);
    if (gpu_index >= 0) gpu_open(e, gpu_index);
    else snprintf(e->gpu_why, sizeof e->gpu_why, "no GPU in use (device = cpu)");
    if (!node_first) {
        snprintf(e->cpu_why, sizeof e->cpu_why, "read by the node's first rank");
        return;
    }
    e->n_pkg = energy_rapl_read(rapl_root(), e->pkg_last, e->pkg_range, e->cpu_why,
                                sizeof e->cpu_why);
    e->cpu_on = e->n_pkg > 0;
    for (int i = 0; i < e->n_pkg; i++) e->cpu_j0 += e->pkg_last[i];
}

void energy_read(tsr_energy *e, double *gpu, double *cpu) {
    *gpu = e->gpu_on ? nvml_joules() - e->gpu_j0 : NAN;
    *cpu = NAN;
    if (!e->cpu_on) return;
    double j[TSR_RAPL_MAX], range[TSR_RAPL_MAX], sum = 0;
    if (energy_rapl_read(rapl_root(), j, range, e->cpu_why, sizeof e->cpu_why) != e->n_pkg) return;
    /* a package counter that went down wrapped (once between reads: the trainer reads at least
     * every 10 s, and a package wraps after minutes at full power on the smallest ranges) */
    for (int i = 0; i < e->n_pkg; i++) {
        if (j[i] < e->pkg_last[i]) e->cpu_wraps += e->pkg_range[i];
        e->pkg_last[i] = j[i], sum += j[i];
    }
    *cpu = sum + e->cpu_wraps - e->cpu_j0;
}

/* ckpt_model.c — a checkpoint's model in one process (ckpt_model.h). */
#include "ckpt_model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_h5.h"
#include "common.h"
#include "crc32c.h"

/* The stored config text -> cfg: through a temporary file, since config_load reads files. */
int ckpt_config_from_text(const char *path, const char *text, const char *const *sets, int n_sets,
                       tsr_config *cfg) {
    char tmp[] = "/tmp/tessera-ckpt-config.XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) {
        tsr_error("%s: cannot stage its config text: mkstemp: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t n = strlen(text);
    int bad = write(fd, text, n) != (ssize_t)n;
    close(fd);
    int rc = bad ? TSR_EXIT_DATA : config_load(cfg, tmp, sets, n_sets);
    if (bad) tsr_error("%s: cannot stage its config text in %s", path, tmp);
    unlink(tmp);
    if (rc == TSR_EXIT_USAGE)
        tsr_error("%s: the config stored in the checkpoint (above) does not load%s", path,
                  n_sets ? " with the --set overrides given" : "");
    return rc;
}

/* dataset `name` (numel floats) into dst, its size and crc32c checked */
static int read_tensor(hid_t f, const char *path, const char *name, size_t numel, float *dst) {
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) {
        tsr_error("%s: no tensor %s (the model of its config has one)", path, name);
        return TSR_EXIT_DATA;
    }
    int ndim = 0, rc = 0;
    int64_t shape[4] = {0};
    uint32_t want = 0;
    if (ck_dataset_shape(ds, &ndim, shape) != 0 || ckpt_numel(ndim, shape) != numel) {
        tsr_error("%s: tensor %s has %llu elements, the model of its config needs %zu", path, name,
                  ndim ? (unsigned long long)ckpt_numel(ndim, shape) : 0ull, numel);
        rc = TSR_EXIT_DATA;
    } else if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
        tsr_error("%s: reading tensor %s failed (truncated file?)", path, name);
        rc = TSR_EXIT_DATA;
    } else if (ck_attr_read_u32(ds, "crc32c", &want) != 0 ||
               tsr_crc32c(0, dst, numel * sizeof(float)) != want) {
        tsr_error("%s: tensor %s: checksum mismatch or missing crc32c (the file is damaged; "
                  "`tessera ckpt verify` lists every tensor)", path, name);
        rc = TSR_EXIT_DATA;
    }
    H5Dclose(ds);
    return rc;
}

static hid_t open_file(const char *file) {
    ck_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) tsr_error("%s: cannot open it as HDF5 (missing, truncated or not HDF5)", file);
    return f;
}

/* every model/ tensor of file f into m->params */
static int read_model(hid_t f, const char *file, tsr_model *m) {
    int rc = 0;
    for (int i = 0; i < TSR_P_COUNT && !rc; i++) {
        const tsr_param_info *p = &m->params_info[i];
        char name[96];
        snprintf(name, sizeof name, "model/%s", p->name);
        if (p->numel) rc = read_tensor(f, file, name, p->numel, m->params + p->offset);
    }
    return rc;
}

int ckpt_lora_read(const char *file, const tsr_config *cfg, tsr_model *m, tsr_lora *lo) {
    unsigned mask;
    char why[400];
    if (config_lora_targets(&cfg->model, cfg->lora.targets, &mask, why, sizeof why) != 0) {
        tsr_error("%s: its lora.targets = \"%s\": %s", file, cfg->lora.targets, why);
        return TSR_EXIT_DATA;
    }
    lora_init(lo, m, (int)cfg->lora.rank, cfg->lora.alpha, cfg->lora.dropout, mask);
    m->lora = NULL; /* read only: the caller decides whether the model runs them */
    hid_t f = open_file(file);
    int rc = f < 0 ? TSR_EXIT_DATA : 0;
    for (int k = 0; k < 2 * TSR_LORA_COUNT && !rc; k++) {
        char name[TSR_LORA_NAME], ds[64];
        int64_t shape[3];
        size_t at, numel;
        if (!lora_tensor(lo, k, name, shape, &at, &numel)) continue;
        snprintf(ds, sizeof ds, "lora/%s", name);
        rc = read_tensor(f, file, ds, numel, lo->w + at);
    }
    if (f >= 0) H5Fclose(f);
    if (rc) lora_free(lo);
    return rc;
}

/* A LoRA checkpoint's model (ckpt_model_load): its base into m, checked, then the adapters of
 * file merged in. */
static int lora_model(const ckpt_model_importer *imp, const char *file, const tsr_config *cfg,
                      tsr_model *m) {
    char run_dir[1200], base[1200];
    const char *slash = strrchr(file, '/');
    snprintf(run_dir, sizeof run_dir, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
    if (config_lora_base_find(cfg, run_dir, base, sizeof base)) {
        tsr_error("%s: its adapters need that base", file);
        return TSR_EXIT_DATA;
    }
    int rc = 0;
    if (!base[0]) {
        model_init_weights(m, (uint64_t)cfg->seed);
    } else if (imp && imp->is_source(base)) {
        rc = imp->load(base, m);
    } else {
        char bf[1200];
        if (ckpt_resolve_path(base, bf, sizeof bf)) return TSR_EXIT_DATA;
        hid_t f = open_file(bf);
        rc = f < 0 ? TSR_EXIT_DATA : read_model(f, bf, m);
        if (f >= 0) H5Fclose(f);
    }
    if (rc) return rc;
    char got[32];
    snprintf(got, sizeof got, "crc32c:%08x", tsr_crc32c(0, m->params, m->n_params * sizeof(float)));
    if (cfg->lora.base_checksum[0] && strcmp(got, cfg->lora.base_checksum) != 0) {
        tsr_error("%s: its base %s has weights %s, but the adapters belong to a base with %s "
                  "(lora.base_checksum): the base changed since training", file,
                  base[0] ? base : "(the seed's weights)", got, cfg->lora.base_checksum);
        return TSR_EXIT_DATA;
    }
    tsr_lora lo;
    if ((rc = ckpt_lora_read(file, cfg, m, &lo))) return rc;
    lora_merge(&lo, lo.w, m);
    lora_free(&lo);
    return 0;
}

/* model_load of a directory the importer imp reads (a Hugging Face one). */
static int imported_model(const ckpt_model_importer *imp, const char *path,
                          const char *const *sets, int n_sets, int T, tsr_config *cfg,
                          tsr_model *m, char *resolved, size_t cap, int weights) {
    if (resolved && cap) snprintf(resolved, cap, "%s", path);
    TSR_CHECK(imp->config(path, sets, n_sets, cfg));
    model_init(m, &cfg->model, T > 0 ? T : (int)cfg->seq_len, &tsr_cpu_ops);
    model_alloc_params(m);
    int rc = weights ? imp->load(path, m) : 0;
    if (rc) model_free(m), memset(m, 0, sizeof *m);
    return rc;
}

/* ckpt_model_load and ckpt_model_layout: weights = 0 stops after the layout. */
static int model_load(const ckpt_model_importer *imp, const char *path, const char *const *sets,
                      int n_sets, int T, tsr_config *cfg, tsr_model *m, char *resolved,
                      size_t cap, int weights) {
    char file[1200];
    memset(m, 0, sizeof *m);
    if (imp && imp->is_adapter && imp->is_adapter(path)) {
        if (resolved && cap) snprintf(resolved, cap, "%s", path);
        return imp->adapter(path, sets, n_sets, T, cfg, m);
    }
    if (imp && imp->is_source(path))
        return imported_model(imp, path, sets, n_sets, T, cfg, m, resolved, cap, weights);
    if (ckpt_resolve_path(path, file, sizeof file)) return TSR_EXIT_DATA;
    if (resolved && cap) snprintf(resolved, cap, "%s", file);
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    char why[1024];
    if (ck_meta_read_file(file, meta, NULL, why, sizeof why) != 0) {
        tsr_error("%s: %s", file, why);
        free(meta);
        return TSR_EXIT_DATA;
    }
    hid_t f = open_file(file);
    if (f < 0) {
        free(meta);
        return TSR_EXIT_DATA;
    }
    int rc = ckpt_config_from_text(file, meta->config, sets, n_sets, cfg);
    if (!rc) {
        model_init(m, &cfg->model, T > 0 ? T : (int)cfg->seq_len, &tsr_cpu_ops);
        model_alloc_params(m);
        if (weights) rc = cfg->lora.rank > 0 ? lora_model(imp, file, cfg, m) : read_model(f, file, m);
        if (rc) model_free(m), memset(m, 0, sizeof *m);
    }
    free(meta);
    H5Fclose(f);
    return rc;
}

int ckpt_model_load(const ckpt_model_importer *imp, const char *path, const char *const *sets,
                    int n_sets, int T, tsr_config *cfg, tsr_model *m, char *resolved, size_t cap) {
    return model_load(imp, path, sets, n_sets, T, cfg, m, resolved, cap, 1);
}

int ckpt_model_layout(const ckpt_model_importer *imp, const char *path, const char *const *sets,
                      int n_sets, int T, tsr_config *cfg, tsr_model *m, char *resolved,
                      size_t cap) {
    return model_load(imp, path, sets, n_sets, T, cfg, m, resolved, cap, 0);
}

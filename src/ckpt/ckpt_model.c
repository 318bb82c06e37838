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

static int read_tensor(hid_t f, const char *path, const tsr_param_info *p, float *dst) {
    char name[96];
    snprintf(name, sizeof name, "model/%s", p->name);
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    if (ds < 0) {
        tsr_error("%s: no tensor %s (the model of its config has one)", path, name);
        return TSR_EXIT_DATA;
    }
    int ndim = 0, rc = 0;
    int64_t shape[4] = {0};
    uint32_t want = 0;
    if (ck_dataset_shape(ds, &ndim, shape) != 0 || ckpt_numel(ndim, shape) != p->numel) {
        tsr_error("%s: tensor %s has %llu elements, the model of its config needs %zu", path, name,
                  ndim ? (unsigned long long)ckpt_numel(ndim, shape) : 0ull, p->numel);
        rc = TSR_EXIT_DATA;
    } else if (H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0) {
        tsr_error("%s: reading tensor %s failed (truncated file?)", path, name);
        rc = TSR_EXIT_DATA;
    } else if (ck_attr_read_u32(ds, "crc32c", &want) != 0 ||
               tsr_crc32c(0, dst, p->numel * sizeof(float)) != want) {
        tsr_error("%s: tensor %s: checksum mismatch or missing crc32c (the file is damaged; "
                  "`tessera ckpt verify` lists every tensor)", path, name);
        rc = TSR_EXIT_DATA;
    }
    H5Dclose(ds);
    return rc;
}

int ckpt_model_load(const char *path, const char *const *sets, int n_sets, int T, tsr_config *cfg,
                    tsr_model *m, char *resolved, size_t cap) {
    char file[1200];
    memset(m, 0, sizeof *m);
    if (ckpt_resolve_path(path, file, sizeof file)) return TSR_EXIT_DATA;
    if (resolved && cap) snprintf(resolved, cap, "%s", file);
    ckpt_meta *meta = tsr_malloc(sizeof *meta);
    char why[1024];
    if (ck_meta_read_file(file, meta, NULL, why, sizeof why) != 0) {
        tsr_error("%s: %s", file, why);
        free(meta);
        return TSR_EXIT_DATA;
    }
    ck_h5_quiet();
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        tsr_error("%s: cannot open it as HDF5 (missing, truncated or not HDF5)", file);
        free(meta);
        return TSR_EXIT_DATA;
    }
    int rc = 0;
    if (!rc) rc = ckpt_config_from_text(file, meta->config, sets, n_sets, cfg);
    if (!rc) {
        model_init(m, &cfg->model, T > 0 ? T : (int)cfg->seq_len, &tsr_cpu_ops);
        model_alloc_params(m);
        for (int i = 0; i < TSR_P_COUNT && !rc; i++)
            if (m->params_info[i].numel)
                rc = read_tensor(f, file, &m->params_info[i], m->params + m->params_info[i].offset);
        if (rc) model_free(m), memset(m, 0, sizeof *m);
    }
    free(meta);
    H5Fclose(f);
    return rc;
}

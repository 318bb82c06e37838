/* hc_config.c — see hc_config.h. */
#include "hc_config.h"

#include <libconfig.h>
#include <stdarg.h>
#include <stddef.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

#define HC_EXIT_CANNOT_RUN 2

/* ---- the params group: a table of numeric keys ---- */
typedef struct param_key {
    const char *name;
    int is_int;
    double lo, hi;
    size_t offset;
} param_key;

static const param_key param_keys[] = {
    {"gemm_n", 1, 64, 16384, offsetof(hc_params, gemm_n)}, /* per mode: check_gemm_n */
    {"quick_burn_s", 0, 0.01, 600, offsetof(hc_params, quick_burn_s)},
    {"full_burn_s", 0, 0.01, 3600, offsetof(hc_params, full_burn_s)},
    {"membw_mib", 1, 1, 65536, offsetof(hc_params, membw_mib)},
    {"membw_reps", 1, 1, 1000, offsetof(hc_params, membw_reps)},
    {"allreduce_mib", 1, 1, 65536, offsetof(hc_params, allreduce_mib)}, /* GPU: 16 GiB per GPU */
    {"allreduce_iters", 1, 1, 100000, offsetof(hc_params, allreduce_iters)},
};
#define N_PARAM_KEYS ((int)(sizeof param_keys / sizeof param_keys[0]))

typedef struct load_ctx {
    const char *path;
    int errors;
} load_ctx;

static void cfg_err(load_ctx *c, const config_setting_t *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cfg_err(load_ctx *c, const config_setting_t *s, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tsr_error("%s:%d: %s", c->path, s ? (int)config_setting_source_line(s) : 0, msg);
    c->errors++;
}

/* Full dotted path of a setting, for messages: "devices.[0].sgemm.expected" */
static void setting_path(const config_setting_t *s, char *buf, size_t n) {
    char tmp[256] = "";
    buf[0] = '\0';
    for (; s && config_setting_parent(s); s = config_setting_parent(s)) {
        const char *name = config_setting_name(s);
        char part[96];
        if (name) snprintf(part, sizeof part, "%s", name);
        else snprintf(part, sizeof part, "[%d]", config_setting_index(s));
        snprintf(tmp, sizeof tmp, "%s%s%s", part, buf[0] ? "." : "", buf);
        snprintf(buf, n, "%s", tmp);
    }
}

/* A number (int or float) in [lo, hi]; integer-only when is_int. */
static int get_number(load_ctx *c, const config_setting_t *s, int is_int, double lo, double hi,
                      double *out) {
    char where[256];
    setting_path(s, where, sizeof where);
    int type = config_setting_type(s);
    double v;
    if (type == CONFIG_TYPE_INT) v = config_setting_get_int(s);
    else if (type == CONFIG_TYPE_INT64) v = (double)config_setting_get_int64(s);
    else if (type == CONFIG_TYPE_FLOAT && !is_int) v = config_setting_get_float(s);
    else {
        cfg_err(c, s, "%s: expected %s", where, is_int ? "an integer" : "a number");
        return 1;
    }
    if (!(v >= lo && v <= hi)) {
        cfg_err(c, s, "%s = %g: out of range [%g, %g]", where, v, lo, hi);
        return 1;
    }
    *out = v;
    return 0;
}

static const char *get_string(load_ctx *c, const config_setting_t *group, const char *key,
                              int required) {
    const config_setting_t *s = config_setting_get_member(group, key);
    char where[256];
    setting_path(group, where, sizeof where);
    if (!s) {
        if (required) cfg_err(c, group, "%s: missing key '%s'", where, key);
        return NULL;
    }
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        cfg_err(c, s, "%s.%s: expected a string", where, key);
        return NULL;
    }
    return config_setting_get_string(s);
}

static int check_index(const char *name) {
    for (int k = 0; k < HC_CHECK_COUNT; k++)
        if (!strcmp(hc_checks[k].name, name)) return k;
    return -1;
}

/* gemm_n keeps each burn exact: the CPU burn's fp32 inputs reach 63, so N * 63^2 < 2^24 needs
 * N <= 4096; the GPU burn picks its input range from N (healthcheck/gpu/hc_gpu_burn.c) and wants
 * N a multiple of 16 (tensor-core tiles) and at least 256 (a burn, not a launch-latency test). */
static void check_gemm_n(load_ctx *c, const config_setting_t *g, int gpu, int n) {
    char where[256];
    setting_path(g, where, sizeof where);
    const config_setting_t *s = config_setting_get_member(g, "gemm_n");
    if (!gpu && n > 4096)
        cfg_err(c, s, "%s.gemm_n = %d: at most 4096 in a cpu section (exact fp32 burn: N x 63^2 < 2^24)",
                where, n);
    if (gpu && (n < 256 || n % 16 != 0))
        cfg_err(c, s, "%s.gemm_n = %d: a gpu section needs a multiple of 16 in [256, 16384]", where, n);
}

static void load_params(load_ctx *c, const config_setting_t *g, hc_params *p) {
    char where[256];
    setting_path(g, where, sizeof where);
    unsigned seen = 0;
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        const char *name = config_setting_name(s);
        int k = 0;
        while (k < N_PARAM_KEYS && strcmp(param_keys[k].name, name)) k++;
        if (k == N_PARAM_KEYS) {
            cfg_err(c, s, "%s: unknown key '%s'", where, name);
            continue;
        }
        double v;
        if (get_number(c, s, param_keys[k].is_int, param_keys[k].lo, param_keys[k].hi, &v)) continue;
        char *dst = (char *)p + param_keys[k].offset;
        if (param_keys[k].is_int) *(int *)dst = (int)v;
        else *(double *)dst = v;
        seen |= 1u << k;
    }
    for (int k = 0; k < N_PARAM_KEYS; k++)
        if (!(seen & (1u << k))) cfg_err(c, g, "%s: missing key '%s'", where, param_keys[k].name);
}

/* sgemm = { expected = X; tolerance = T; }  or  sgemm_verify = { max = M; } */
static void load_check(load_ctx *c, const config_setting_t *g, int k, hc_limit *l) {
    char where[256];
    setting_path(g, where, sizeof where);
    int at_least = hc_checks[k].sense == HC_AT_LEAST;
    int have_exp = 0, have_tol = 0, have_max = 0;
    for (int i = 0; i < config_setting_length(g); i++) {
        const config_setting_t *s = config_setting_get_elem(g, (unsigned)i);
        const char *name = config_setting_name(s);
        if (at_least && !strcmp(name, "expected"))
            have_exp = !get_number(c, s, 0, 1e-9, 1e12, &l->expected);
        else if (at_least && !strcmp(name, "tolerance"))
            have_tol = !get_number(c, s, 0, 0.0, 0.999, &l->tolerance);
        else if (!at_least && !strcmp(name, "max"))
            have_max = !get_number(c, s, 0, 0.0, 1e15, &l->max);
        else
            cfg_err(c, s, "%s: unknown key '%s' (accepted: %s)", where, name,
                    at_least ? "expected, tolerance" : "max");
    }
    if (at_least && !have_exp) cfg_err(c, g, "%s: missing key 'expected' (%s)", where, hc_checks[k].unit);
    if (at_least && !have_tol) cfg_err(c, g, "%s: missing key 'tolerance' (fraction in [0, 1))", where);
    if (!at_least && !have_max) cfg_err(c, g, "%s: missing key 'max' (%s)", where, hc_checks[k].unit);
    l->set = 1;
}

static void load_section(load_ctx *c, const config_setting_t *sec, hc_thresholds *t) {
    char where[256];
    setting_path(sec, where, sizeof where);
    memset(t, 0, sizeof *t);
    if (!config_setting_is_group(sec)) {
        cfg_err(c, sec, "%s: expected a group { name = ...; mode = ...; ... }", where);
        return;
    }
    const char *name = get_string(c, sec, "name", 1), *mode = get_string(c, sec, "mode", 1);
    const char *match = get_string(c, sec, "match", 0);
    if (name) snprintf(t->section, sizeof t->section, "%s", name);
    if (match) snprintf(t->match, sizeof t->match, "%s", match);
    if (mode && strcmp(mode, "cpu") && strcmp(mode, "gpu"))
        cfg_err(c, config_setting_get_member(sec, "mode"), "%s.mode = \"%s\": accepted \"cpu\", \"gpu\"",
                where, mode);
    t->gpu = mode && !strcmp(mode, "gpu");
    int have_params = 0;
    for (int i = 0; i < config_setting_length(sec); i++) {
        const config_setting_t *s = config_setting_get_elem(sec, (unsigned)i);
        const char *key = config_setting_name(s);
        if (!strcmp(key, "name") || !strcmp(key, "mode") || !strcmp(key, "match")) continue;
        int is_group = config_setting_is_group(s);
        if (!strcmp(key, "params") && is_group) {
            load_params(c, s, &t->params);
            if (t->params.gemm_n) check_gemm_n(c, s, t->gpu, t->params.gemm_n);
            have_params = 1;
            continue;
        }
        int k = check_index(key);
        if (k >= 0 && is_group && hc_checks[k].gpu != t->gpu)
            cfg_err(c, s, "%s.%s: a %s-mode check, but this section has mode = \"%s\"", where, key,
                    hc_checks[k].gpu ? "gpu" : "cpu", t->gpu ? "gpu" : "cpu");
        else if (k >= 0 && is_group) load_check(c, s, k, &t->lim[k]);
        else if (k >= 0 || !strcmp(key, "params")) cfg_err(c, s, "%s.%s: expected a group { ... }", where, key);
        else cfg_err(c, s, "%s: unknown key '%s' (a check name, params, name, mode or match)", where, key);
    }
    if (!have_params) cfg_err(c, sec, "%s: missing group 'params'", where);
    for (int k = 0; k < HC_CHECK_COUNT; k++)
        if (!t->lim[k].set && hc_checks[k].gpu == t->gpu && !hc_checks[k].optional)
            cfg_err(c, sec, "%s (\"%s\"): missing check '%s'", where, t->section, hc_checks[k].name);
    if (t->lim[HC_GEMM_FP8].set != t->lim[HC_GEMM_FP8_VERIFY].set)
        cfg_err(c, sec, "%s (\"%s\"): gemm_fp8 and gemm_fp8_verify go together: give both or neither",
                where, t->section);
}

int hc_config_load(const char *path, int gpu, const char *device, hc_thresholds *out) {
    load_ctx c = {.path = path};
    config_t lc;
    config_init(&lc);
    if (!config_read_file(&lc, path)) {
        if (config_error_type(&lc) == CONFIG_ERR_FILE_IO)
            tsr_error("%s: cannot read healthcheck config", path);
        else if (!strcmp(config_error_text(&lc), "syntax error"))
            tsr_error("%s:%d: syntax error", path, config_error_line(&lc));
        else
            tsr_error("%s:%d: syntax error: %s", path, config_error_line(&lc), config_error_text(&lc));
        config_destroy(&lc);
        return HC_EXIT_CANNOT_RUN;
    }
    const config_setting_t *root = config_root_setting(&lc);
    int format = 0;
    for (int i = 0; i < config_setting_length(root); i++) {
        const config_setting_t *s = config_setting_get_elem(root, (unsigned)i);
        const char *key = config_setting_name(s);
        double v;
        if (!strcmp(key, "format")) {
            if (!get_number(&c, s, 1, 0, 1e9, &v)) format = (int)v;
        } else if (strcmp(key, "devices") != 0) {
            cfg_err(&c, s, "unknown top-level key '%s' (accepted: format, devices)", key);
        }
    }
    const config_setting_t *devs = config_setting_get_member(root, "devices");
    if (format != HC_CONFIG_FORMAT && !c.errors)
        cfg_err(&c, config_setting_get_member(root, "format"),
                "format = %d: this tessera-healthcheck reads format %d", format, HC_CONFIG_FORMAT);
    if (!devs || !config_setting_is_list(devs) || config_setting_length(devs) == 0) {
        cfg_err(&c, devs ? devs : root, "devices: missing or empty: expected ( { name = ...; }, ... )");
        config_destroy(&lc);
        return HC_EXIT_CANNOT_RUN;
    }
    int n = config_setting_length(devs), chosen = -1, fallback = -1;
    hc_thresholds *all = tsr_calloc((size_t)n, sizeof *all);
    for (int i = 0; i < n; i++) {
        const config_setting_t *sec = config_setting_get_elem(devs, (unsigned)i);
        load_section(&c, sec, &all[i]);
        for (int j = 0; j < i; j++)
            if (all[i].section[0] && !strcmp(all[i].section, all[j].section))
                cfg_err(&c, sec, "devices.[%d]: name \"%s\" also names devices.[%d]", i, all[i].section, j);
        if (all[i].gpu != gpu) continue;
        if (all[i].match[0] && chosen < 0 && device && strstr(device, all[i].match)) chosen = i;
        if (!all[i].match[0] && fallback < 0) fallback = i;
    }
    int rc = 0;
    if (c.errors) {
        rc = HC_EXIT_CANNOT_RUN;
    } else if (chosen < 0 && fallback < 0) {
        tsr_error("%s: no devices section with mode = \"%s\" matches \"%s\" and none has match = \"\" "
                  "(the mode's default)", path, gpu ? "gpu" : "cpu", device ? device : "?");
        rc = HC_EXIT_CANNOT_RUN;
    } else {
        *out = all[chosen >= 0 ? chosen : fallback];
        snprintf(out->source, sizeof out->source, "%s", path);
    }
    free(all);
    config_destroy(&lc);
    return rc;
}

int hc_config_default_path(char *buf, size_t n) {
    const char *env = getenv("TESSERA_HC_CONFIG");
    if (env && *env) {
        if (tsr_snprintf(buf, n, "%s", env)) return HC_EXIT_CANNOT_RUN;
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) {
        tsr_error("no --config given, TESSERA_HC_CONFIG unset, and /proc/self/exe unreadable");
        return HC_EXIT_CANNOT_RUN;
    }
    exe[k] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    static const char *const rel[] = {"../share/tessera/configs/healthcheck.cfg",
                                      "../configs/healthcheck.cfg", "../healthcheck/healthcheck.cfg"};
    for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
        if (tsr_snprintf(buf, n, "%s/%s", exe, rel[i])) continue;
        if (access(buf, R_OK) == 0) return 0;
    }
    tsr_error("no --config given and TESSERA_HC_CONFIG unset; none of %s/{%s, %s, %s} exists", exe,
              rel[0], rel[1], rel[2]);
    return HC_EXIT_CANNOT_RUN;
}

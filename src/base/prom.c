/* prom.c — see prom.h. The format: https://prometheus.io/docs/instrumenting/exposition_formats/ */
#include "prom.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "common.h"
#include "fsutil.h"

void prom_family(FILE *f, const char *name, const char *help) {
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
}

void prom_sample(FILE *f, const char *name, const char *labels, double v) {
    fprintf(f, "%s%s%s%s ", name, *labels ? "{" : "", labels, *labels ? "}" : "");
    if (isnan(v)) fprintf(f, "NaN\n");
    else if (isinf(v)) fprintf(f, "%sInf\n", v > 0 ? "+" : "-");
    else fprintf(f, "%.10g\n", v);
}

/* value escaped into buf at *o; -1 when it does not fit */
static int put_escaped(char *buf, size_t n, size_t *o, const char *v) {
    for (; *v; v++) {
        const char *e = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;
        size_t k = e ? 2 : 1;
        if (*o + k + 1 >= n) return -1;
        memcpy(buf + *o, e ? e : v, k);
        *o += k;
    }
    return 0;
}

int prom_labels(char *buf, size_t n, ...) {
    va_list ap;
    va_start(ap, n);
    size_t o = 0;
    int rc = 0;
    buf[0] = '\0';
    for (const char *k; !rc && (k = va_arg(ap, const char *)) != NULL;) {
        const char *v = va_arg(ap, const char *);
        int w = snprintf(buf + o, n - o, "%s%s=\"", o ? "," : "", k);
        if (w < 0 || (o += (size_t)w) >= n || put_escaped(buf, n, &o, v ? v : "") || o + 2 > n)
            rc = -1;
        else buf[o++] = '"', buf[o] = '\0';
    }
    va_end(ap);
    return rc;
}

int prom_write(const char *dir, const char *name, void (*fill)(FILE *f, const void *ctx),
               const void *ctx) {
    char path[4096], tmp[4200];
    if (tsr_snprintf(path, sizeof path, "%s/%s", dir, name)) {
        tsr_error("%s/%s: path too long", dir, name);
        return TSR_EXIT_DATA;
    }
    FILE *f = fs_open_beside(path, tmp, sizeof tmp);
    if (!f) return TSR_EXIT_DATA;
    fill(f, ctx);
    return fs_commit_beside(f, tmp, path);
}

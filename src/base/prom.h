/* prom.h — Prometheus's text exposition format (version 0.0.4), as node_exporter's textfile
 * collector reads it: a site's Prometheus picks up files in the collector's directory without a
 * daemon of ours (docs/site.md "Monitoring"). Used by tessera-train (metrics.prometheus_dir) and
 * tessera-healthcheck (--prometheus DIR). Every metric is a gauge. */
#ifndef TSR_PROM_H
#define TSR_PROM_H

#include <stddef.h>
#include <stdio.h>

/* A metric family's "# HELP" and "# TYPE NAME gauge" lines (help: no newline, no backslash). */
void prom_family(FILE *f, const char *name, const char *help);
/* One sample "NAME{LABELS} VALUE": labels as prom_labels wrote them ("" for none); a non-finite
 * value as NaN, +Inf or -Inf. */
void prom_sample(FILE *f, const char *name, const char *labels, double v);
/* Labels from KEY, VALUE pairs ending with NULL, values escaped (\\, \", \n): into buf as
 * key="value",key2="value2". 0, or -1 when they do not fit in n bytes. */
int prom_labels(char *buf, size_t n, ...) __attribute__((sentinel));
/* DIR/NAME, replaced atomically (fsutil.h fs_open_beside: a temp file "NAME.XXXXXX", which the
 * collector ignores, renamed over it) with what fill writes. 0, or TSR_EXIT_DATA after tsr_error. */
int prom_write(const char *dir, const char *name, void (*fill)(FILE *f, const void *ctx),
               const void *ctx);

#endif

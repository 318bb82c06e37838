/* config_load_int.h — internal to src/config/config_load.c and config_checks.c: the state of one
 * config_load (what each key's value came from) and what the two share. config_load.c reads the
 * file, the --set overrides and a model's own values, then calls config_checks.c's checks across
 * keys (one way). Include config/config.h elsewhere.
 */
#ifndef TSR_CONFIG_LOAD_INT_H
#define TSR_CONFIG_LOAD_INT_H

#include <stddef.h>

#include "config/config.h"
#include "config/config_table.h"

#define MAX_KEYS 256

typedef struct load_ctx {
    tsr_config *cfg;
    const char *path;                /* the config file, or NULL */
    char include_dir[1024];
    int errors;
    unsigned char given[MAX_KEYS];   /* set by the file or --set */
    unsigned char present[MAX_KEYS]; /* named by the file or --set, valid or not */
    const char *set_arg[MAX_KEYS];   /* the --set that gave it */
    int line[MAX_KEYS];              /* where: > 0 file line, -1 --set */
    const char *file[MAX_KEYS];      /* file of that line (libconfig's memory) */
    char *text_name, *text;          /* cached source text for the integer check */
    int mix_line;                    /* where data.mix was given (0 = not given) */
    const char *mix_file;
    const tsr_config_fill *fill;     /* config_load_filled: a model's own values, or NULL */
    int over;                        /* config_load_over: every key has base's value already */
} load_ctx;

static inline int key_index(const cfgtab_key *k) { return (int)(k - cfgtab_keys); }

/* "file:line: " of the key, "--set key=value: " for an override, "file: " for a default, into
 * buf (n bytes); returns buf */
const char *cfgload_where(const load_ctx *c, const char *name, char *buf, size_t n);
/* the checks across keys, each error counted in c->errors */
void cfgload_validate(load_ctx *c);
/* the rules those checks enforce, as docs/config.md lists them */
extern const char *const cfgload_cross_rules[];
extern const size_t cfgload_n_cross_rules;

#endif

/* config_mix.h — internal to src/config: the list-valued keys data.mix and data.curriculum
 * (config_mix.c) and icl_tasks (config_icl.c), which the scalar key table cannot hold. */
#ifndef TSR_CONFIG_MIX_H
#define TSR_CONFIG_MIX_H

#include <libconfig.h>
#include <stdio.h>

#include "config/config.h"

/* Parses the list setting s named full ("data.mix" or "data.curriculum") into cfg->data.
 * Returns the number of errors reported (0 = accepted). */
int cfgmix_parse(const config_setting_t *s, const char *full, const char *file, tsr_config *cfg);
/* Writes the lists inside the printed `data = { ... };` group (nothing when unused). */
void cfgmix_print(FILE *f, const tsr_config *cfg);
/* The docs/config.md section on the two lists. */
void cfgmix_doc(FILE *f);

/* icl_tasks (config_icl.c): parse (returns the errors reported), print (top level), docs. */
int cfgicl_parse(const config_setting_t *s, const char *file, tsr_config *cfg);
void cfgicl_print(FILE *f, const tsr_config *cfg);
void cfgicl_doc(FILE *f);

#endif

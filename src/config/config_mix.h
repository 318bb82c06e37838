/* config_mix.h — internal to src/config: the list-valued keys data.mix and data.curriculum
 * (config_mix.c), which the scalar key table cannot hold; icl_tasks is config_icl.h's. */
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

#endif

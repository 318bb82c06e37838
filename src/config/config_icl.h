/* config_icl.h — internal to src/config: the list-valued key icl_tasks (config_icl.c), which the
 * scalar key table cannot hold. */
#ifndef TSR_CONFIG_ICL_H
#define TSR_CONFIG_ICL_H

#include <libconfig.h>
#include <stdio.h>

#include "config/config.h"

/* icl_tasks (config_icl.c): parse (returns the errors reported), print (top level), docs. */
int cfgicl_parse(const config_setting_t *s, const char *file, tsr_config *cfg);
void cfgicl_print(FILE *f, const tsr_config *cfg);
void cfgicl_doc(FILE *f);

#endif

/* fuzz_config.c — the config loader and the --set parser (src/config/): a libconfig file, then
 * "key=value" overrides, as tessera-train --config F --set K=V ... loads them.
 * Input: the config file's text [FUZZ_SEP one --set argument per line]. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config/config.h"
#include "fuzz_common.h"

#define MAX_SETS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_part part[2];
    int np = fuzz_split(data, size, part, 2);
    const char *path = fuzz_write("run.cfg", part[0].p, part[0].n);
    char *sets_text = NULL;
    const char *sets[MAX_SETS];
    int n_sets = 0;
    if (np == 2) {
        sets_text = malloc(part[1].n + 1);
        memcpy(sets_text, part[1].p, part[1].n);
        sets_text[part[1].n] = '\0';
        for (char *s = sets_text; s && n_sets < MAX_SETS;) {
            char *nl = strchr(s, '\n');
            if (nl) *nl++ = '\0';
            sets[n_sets++] = s;
            s = nl;
        }
    }
    tsr_config *cfg = malloc(sizeof *cfg);
    if (config_load(cfg, path, sets, n_sets) == 0) {
        /* what a loaded config is used for next: the world-size checks and the effective-config
         * printout (which must load back: config_print's contract) */
        config_check_world(cfg, 2);
        FILE *f = fopen(fuzz_path("effective.cfg"), "w");
        if (f) {
            config_print(f, cfg);
            fclose(f);
            tsr_config *again = malloc(sizeof *again);
            if (config_load(again, fuzz_path("effective.cfg"), NULL, 0) != 0) {
                tsr_log_mute(0);
                config_load(again, fuzz_path("effective.cfg"), NULL, 0);
                abort(); /* the printout of a valid config does not load back */
            }
            free(again);
        }
    }
    free(cfg);
    free(sets_text);
    return 0;
}

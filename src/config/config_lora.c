/* config_lora.c — where a LoRA run's frozen base is (config.h, docs/lora.md "Where the base is"):
 * recorded absolute and relative to the run directory, found again by either. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "config/config.h"

/* to's path relative to the directory from (both absolute, no "." or ".." components). */
static void relative_path(const char *from, const char *to, char *out, size_t cap) {
    size_t i = 0, common = 0;
    while (from[i] && from[i] == to[i]) {
        if (from[i] == '/') common = i;
        i++;
    }
    if (!from[i] && (to[i] == '/' || !to[i])) common = i; /* from is a prefix directory of to */
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = from + common; *p; p++) /* one ".." per component left in from */
        if (*p == '/' && p[1] && used + 4 < cap) used += (size_t)snprintf(out + used, cap - used, "../");
    snprintf(out + used, cap - used, "%s", to[common] == '/' ? to + common + 1 : to + common);
    if (!out[0]) snprintf(out, cap, ".");
}

int config_lora_base_record(tsr_config *cfg, const char *path, const char *run_dir) {
    char abs_base[PATH_MAX], abs_run[PATH_MAX], rel[PATH_MAX];
    if (!realpath(path, abs_base) || !realpath(run_dir, abs_run)) {
        tsr_error("lora.base: %s: %s (the base's path must resolve to be recorded)", path,
                  strerror(errno));
        return TSR_EXIT_USAGE;
    }
    relative_path(abs_run, abs_base, rel, sizeof rel);
    if (tsr_snprintf(cfg->lora.base, sizeof cfg->lora.base, "%s", abs_base) ||
        tsr_snprintf(cfg->lora.base_relative, sizeof cfg->lora.base_relative, "%s", rel)) {
        tsr_error("lora.base: the base's path %s is longer than lora.base holds (%zu)", abs_base,
                  sizeof cfg->lora.base - 1);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

int config_lora_base_find(const tsr_config *cfg, const char *run_dir, char *out, size_t cap) {
    const char *base = cfg->lora.base, *rel = cfg->lora.base_relative;
    struct stat st;
    char there[4200] = "";
    snprintf(out, cap, "%s", base);
    if (!base[0] || stat(base, &st) == 0) return 0;
    if (rel[0] && run_dir && run_dir[0]) {
        snprintf(there, sizeof there, "%s/%s", run_dir, rel);
        if (stat(there, &st) == 0) {
            snprintf(out, cap, "%s", there);
            return 0;
        }
    }
    tsr_error("the LoRA base model (lora.base) is not found: looked for %s%s%s%s: give it with "
              "--set lora.base=PATH (a checkpoint, run directory or Hugging Face directory; its "
              "weights must have lora.base_checksum = %s)", base, there[0] ? " and " : "", there,
              there[0] ? " (lora.base_relative from the run directory)" : "",
              cfg->lora.base_checksum[0] ? cfg->lora.base_checksum : "(none recorded)");
    return TSR_EXIT_DATA;
}

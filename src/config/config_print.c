/* config_print.c — the effective config: every key of the table in libconfig syntax, with the
 * list-valued keys (data.mix, data.curriculum, icl_tasks) in their places; config_save writes it
 * aside and renames it into place. Above config_table.c, config_mix.c and config_icl.c, so those
 * do not include each other. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "config/config.h"
#include "config/config_icl.h"
#include "config/config_mix.h"
#include "config/config_table.h"

/* The subgroups of group name[0, glen) (optim.muon: "  muon = { ... };"), each once, in table
 * order from key index i; optim.muon only under optim.name = muon. */
static void print_subgroups(FILE *f, const tsr_config *cfg, int i, const char *name, size_t glen) {
    char val[4200];
    for (int j = i; j < cfgtab_n_keys; j++) {
        const char *key = cfgtab_keys[j].name, *sub = key + glen + 1, *dot = strchr(sub, '.');
        if (strncmp(key, name, glen + 1) != 0 || !dot) continue;
        size_t slen = (size_t)(dot - sub) + 1; /* "muon." */
        int seen = 0;
        for (int k = i; k < j; k++)
            if (strncmp(cfgtab_keys[k].name, key, glen + 1 + slen) == 0) seen = 1;
        /* optim.muon only with optim.name = muon: its keys are refused without it */
        if (seen || (!strncmp(key, "optim.muon.", 11) && cfg->optim.name != TSR_OPTIM_MUON))
            continue;
        fprintf(f, "  %.*s = {\n", (int)slen - 1, sub);
        for (int k = j; k < cfgtab_n_keys; k++) {
            if (strncmp(cfgtab_keys[k].name, key, glen + 1 + slen) != 0) continue;
            cfgtab_format(&cfgtab_keys[k], cfg, val, sizeof val);
            fprintf(f, "    %s = %s;\n", cfgtab_keys[k].name + glen + 1 + slen, val);
        }
        fprintf(f, "  };\n");
    }
}

void config_print(FILE *f, const tsr_config *cfg) {
    char val[4200], src[1024];
    snprintf(src, sizeof src, "%s", cfg->source[0] ? cfg->source : "(defaults and --set only)");
    for (char *p = src; *p; p++)
        if (*p == '\n' || *p == '\r') *p = '?';
    fprintf(f, "# tessera effective config; source: %s\n", src);
    /* top-level keys, then each group in table order */
    for (int i = 0; i < cfgtab_n_keys; i++) {
        if (strchr(cfgtab_keys[i].name, '.')) continue;
        cfgtab_format(&cfgtab_keys[i], cfg, val, sizeof val);
        fprintf(f, "%s = %s;\n", cfgtab_keys[i].name, val);
    }
    cfgicl_print(f, cfg);
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const char *name = cfgtab_keys[i].name, *dot = strchr(name, '.');
        size_t glen = dot ? (size_t)(dot - name) : 0;
        int seen = 0;
        for (int j = 0; dot && j < i; j++)
            if (strncmp(cfgtab_keys[j].name, name, glen + 1) == 0) seen = 1;
        if (!dot || seen) continue;
        fprintf(f, "%.*s = {\n", (int)glen, name);
        for (int j = i; j < cfgtab_n_keys; j++) {
            if (strncmp(cfgtab_keys[j].name, name, glen + 1) != 0) continue;
            if (cfg->data.n_streams && !strcmp(cfgtab_keys[j].name, "data.train")) continue;
            if (strchr(cfgtab_keys[j].name + glen + 1, '.')) continue; /* a subgroup: below */
            cfgtab_format(&cfgtab_keys[j], cfg, val, sizeof val);
            fprintf(f, "  %s = %s;\n", cfgtab_keys[j].name + glen + 1, val);
        }
        print_subgroups(f, cfg, i, name, glen);
        if (glen == 4 && !strncmp(name, "data", 4)) cfgmix_print(f, cfg);
        fprintf(f, "};\n");
    }
}

int config_save(const char *path, const tsr_config *cfg) {
    char tmp[4096], dir[4096];
    if (tsr_snprintf(tmp, sizeof tmp, "%s.tmp", path) != 0) {
        tsr_error("%s: cannot write config: path too long", path);
        return TSR_EXIT_DATA;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        tsr_error("%s: cannot write config: fopen: %s", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    config_print(f, cfg);
    int bad = fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0;
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (!bad && rename(tmp, path) != 0) bad = 1, err = errno;
    if (bad) {
        tsr_error("%s: cannot write config: %s", tmp, strerror(err));
        remove(tmp);
        return TSR_EXIT_DATA;
    }
    /* Make the rename durable: fsync the directory. */
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = '\0';
    else if (slash) *slash = '\0';
    else strcpy(dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        if (fsync(fd) != 0 && errno != EINVAL)
            tsr_warn("%s: fsync of directory failed: %s", dir, strerror(errno));
        close(fd);
    }
    return 0;
}

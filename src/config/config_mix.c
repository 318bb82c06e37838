/* config_mix.c — data.mix and data.curriculum: the two list-valued keys, outside the key table.
 *
 *   data = {
 *     mix = (
 *       { name = "web";    path = "data/web/train";    proportion = 0.9; },
 *       { name = "domain"; path = "data/domain/train"; proportion = 0.1; }
 *     );
 *     curriculum = (
 *       { at = "90%"; scale = { domain = 3.0; }; }     # or proportion = { web = 0.5; domain = 0.5; };
 *     );
 *   };
 *
 * A stream gives exactly one of proportion, repeat (times its own size per epoch) or choose
 * (samples per epoch); proportions cannot be combined with repeat/choose (as in MosaicML
 * Streaming). A phase starts at a duration or a percent of max_duration and gives either new
 * weights (`proportion`, in the unit of the streams' own weights) or multipliers (`scale`) for the
 * streams it names; the others keep their base weight. The semantics: docs/data-mixing.md.
 */
#include <libconfig.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "config/config_mix.h"
#include "config/config_table.h"

static const char *const kind_names[] = {"proportion", "repeat", "choose"};

static int number_of(const config_setting_t *s, double *out) {
    int t = config_setting_type(s);
    if (t == CONFIG_TYPE_FLOAT) *out = config_setting_get_float(s);
    else if (t == CONFIG_TYPE_INT || t == CONFIG_TYPE_INT64) *out = (double)config_setting_get_int64(s);
    else return -1;
    return isfinite(*out) ? 0 : -1;
}

static int good_name(const char *s) {
    if (!s || !*s || strlen(s) >= 64 || !(isalpha((unsigned char)*s) || *s == '_')) return 0;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '-')) return 0;
    return 1;
}

static int line_of(const config_setting_t *s) { return config_setting_source_line(s); }

static int parse_stream(const config_setting_t *e, const char *file, int idx, tsr_stream_config *st) {
    int errors = 0, n = config_setting_length(e), have_kind = 0;
    memset(st, 0, sizeof *st);
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(e, (unsigned)i);
        const char *key = config_setting_name(s);
        int line = line_of(s);
        if (!strcmp(key, "name") || !strcmp(key, "path")) {
            const char *v = config_setting_get_string(s);
            char *dst = key[0] == 'n' ? st->name : st->path;
            size_t cap = key[0] == 'n' ? sizeof st->name : sizeof st->path;
            if (!v || (key[0] == 'n' && !good_name(v)) || !*v || strlen(v) >= cap) {
                tsr_error("%s:%d: data.mix[%d].%s: expected %s", file, line, idx, key,
                          key[0] == 'n' ? "a name of letters, digits, '_' or '-' (starting with a "
                                          "letter or '_', at most 63 characters), in quotes"
                                        : "a dataset directory, in quotes");
                errors++;
                continue;
            }
            snprintf(dst, cap, "%s", v);
            continue;
        }
        int k = -1;
        for (int j = 0; j < 3; j++)
            if (!strcmp(key, kind_names[j])) k = j;
        if (k < 0) {
            tsr_error("%s:%d: data.mix[%d]: unknown key '%s' (a stream has name, path and one of "
                      "proportion | repeat | choose)", file, line, idx, key);
            errors++;
            continue;
        }
        double v;
        if (have_kind) {
            tsr_error("%s:%d: data.mix[%d]: '%s' and '%s' both given: a stream has exactly one of "
                      "proportion | repeat | choose", file, line, idx, kind_names[st->kind], key);
            errors++;
        } else if (number_of(s, &v) || !(v > 0) ||
                   (k == TSR_MIX_CHOOSE && (v != floor(v) || v > 9007199254740992.0))) {
            tsr_error("%s:%d: data.mix[%d].%s: expected a %s > 0", file, line, idx, key,
                      k == TSR_MIX_CHOOSE ? "whole number of samples" : "number");
            errors++;
        } else {
            st->kind = (tsr_mix_kind)k;
            st->value = v;
        }
        have_kind = 1;
    }
    int line = line_of(e);
    if (!errors && (!st->name[0] || !st->path[0] || !have_kind)) {
        tsr_error("%s:%d: data.mix[%d]: missing %s (e.g. { name = \"web\"; path = \"data/web/train\"; "
                  "proportion = 0.9; })", file, line, idx,
                  !st->name[0] ? "name" : !st->path[0] ? "path" : "proportion | repeat | choose");
        errors++;
    }
    return errors;
}

/* The index of the stream called name among the first n, or -1. */
static int stream_index(const tsr_stream_config *streams, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(streams[k].name, name)) return k;
    return -1;
}

static int parse_phase(const config_setting_t *e, const char *file, int idx, tsr_data_config *d,
                       tsr_phase_config *ph) {
    int errors = 0, n = config_setting_length(e), have_at = 0, have_w = 0;
    memset(ph, 0, sizeof *ph);
    ph->at_percent = -1;
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(e, (unsigned)i);
        const char *key = config_setting_name(s);
        int line = line_of(s);
        if (!strcmp(key, "at")) {
            const char *v = config_setting_get_string(s);
            size_t len = v ? strlen(v) : 0;
            char *end = NULL;
            double p = len > 1 && v[len - 1] == '%' ? strtod(v, &end) : -1;
            have_at = 1;
            if (end == v + len - 1 && p >= 0 && p <= 100) {
                ph->at_percent = p;
            } else if (!v || duration_parse(v, &ph->at) != 0) {
                tsr_error("%s:%d: data.curriculum[%d].at: expected a duration (\"900ba\", \"9e9tok\", "
                          "\"0.5ep\") or a percent of max_duration (\"90%%\"), in quotes",
                          file, line, idx);
                errors++;
            }
            continue;
        }
        if (strcmp(key, "proportion") && strcmp(key, "scale")) {
            tsr_error("%s:%d: data.curriculum[%d]: unknown key '%s' (a phase has at and one of "
                      "proportion | scale)", file, line, idx, key);
            errors++;
            continue;
        }
        if (have_w) {
            tsr_error("%s:%d: data.curriculum[%d]: proportion and scale both given: choose one",
                      file, line, idx);
            errors++;
            continue;
        }
        have_w = 1;
        ph->kind = key[0] == 'p' ? TSR_PHASE_PROPORTION : TSR_PHASE_SCALE;
        if (config_setting_type(s) != CONFIG_TYPE_GROUP || config_setting_length(s) == 0) {
            tsr_error("%s:%d: data.curriculum[%d].%s: expected a group of stream weights, e.g. "
                      "%s = { %s = %s; };", file, line, idx, key, key,
                      d->n_streams ? d->streams[d->n_streams - 1].name : "domain",
                      key[0] == 'p' ? "0.3" : "3.0");
            errors++;
            continue;
        }
        for (int j = 0; j < config_setting_length(s); j++) {
            const config_setting_t *w = config_setting_get_elem(s, (unsigned)j);
            int k = stream_index(d->streams, d->n_streams, config_setting_name(w));
            double v;
            if (k < 0) {
                tsr_error("%s:%d: data.curriculum[%d].%s.%s: no stream of that name in data.mix",
                          file, line_of(w), idx, key, config_setting_name(w));
                errors++;
            } else if (number_of(w, &v) || v < 0 || (ph->kind == TSR_PHASE_PROPORTION &&
                                                     d->streams[k].kind == TSR_MIX_CHOOSE &&
                                                     v != floor(v))) {
                tsr_error("%s:%d: data.curriculum[%d].%s.%s: expected a number >= 0", file,
                          line_of(w), idx, key, config_setting_name(w));
                errors++;
            } else {
                ph->w[k] = v;
                ph->named[k] = 1;
            }
        }
    }
    if (!errors && (!have_at || !have_w)) {
        tsr_error("%s:%d: data.curriculum[%d]: missing %s (e.g. { at = \"90%%\"; scale = { %s = 3.0; }; })",
                  file, line_of(e), idx, !have_at ? "at" : "proportion | scale",
                  d->n_streams ? d->streams[d->n_streams - 1].name : "domain");
        errors++;
    }
    return errors;
}

int cfgmix_parse(const config_setting_t *s, const char *full, const char *file, tsr_config *cfg) {
    tsr_data_config *d = &cfg->data;
    int is_mix = !strcmp(full, "data.mix"), errors = 0;
    int max = is_mix ? TSR_MAX_STREAMS : TSR_MAX_PHASES;
    int n = config_setting_length(s);
    int t = config_setting_type(s);
    if ((t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY) || n < 1 || n > max) {
        tsr_error("%s:%d: %s: expected a list of 1 to %d groups in parentheses, e.g. %s", file,
                  line_of(s), full, max,
                  is_mix ? "mix = ( { name = \"web\"; path = \"data/web/train\"; proportion = 0.9; }, "
                           "{ ... } );"
                         : "curriculum = ( { at = \"90%\"; scale = { domain = 3.0; }; } );");
        return 1;
    }
    if (!is_mix && d->n_streams == 0) {
        tsr_error("%s:%d: data.curriculum needs data.mix, written before it", file, line_of(s));
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_GROUP) {
            tsr_error("%s:%d: %s[%d]: expected a group { ... }", file, line_of(e), full, i);
            errors++;
            continue;
        }
        if (!is_mix) {
            errors += parse_phase(e, file, i, d, &d->phases[i]);
            continue;
        }
        tsr_stream_config *st = &d->streams[i];
        int k, bad = parse_stream(e, file, i, st);
        if (!bad && (k = stream_index(d->streams, i, st->name)) >= 0) {
            tsr_error("%s:%d: data.mix[%d].name: '%s' is the name of data.mix[%d] already: expected a "
                      "name of its own", file, line_of(e), i, st->name, k);
            bad = 1;
        }
        errors += bad;
    }
    if (errors) return errors;
    if (is_mix) {
        d->n_streams = n;
        for (int i = 0; i < n; i++) {
            if ((d->streams[i].kind == TSR_MIX_PROPORTION) != (d->streams[0].kind == TSR_MIX_PROPORTION)) {
                tsr_error("%s: data.mix: stream '%s' gives %s but stream '%s' gives %s: either every "
                          "stream gives a proportion or none does (repeat / choose)", file,
                          d->streams[i].name, kind_names[d->streams[i].kind], d->streams[0].name,
                          kind_names[d->streams[0].kind]);
                errors++;
            }
        }
    } else {
        d->n_phases = n;
    }
    return errors;
}

static void print_weights(FILE *f, const tsr_data_config *d, const tsr_phase_config *ph) {
    char v[64];
    fprintf(f, "%s = {", ph->kind == TSR_PHASE_PROPORTION ? "proportion" : "scale");
    for (int k = 0; k < d->n_streams; k++) {
        if (!ph->named[k]) continue;
        cfgtab_format_double(v, sizeof v, ph->w[k]);
        fprintf(f, " %s = %s;", d->streams[k].name, v);
    }
    fprintf(f, " };");
}

void cfgmix_print(FILE *f, const tsr_config *cfg) {
    const tsr_data_config *d = &cfg->data;
    char v[64];
    if (d->n_streams) {
        fprintf(f, "  mix = (\n");
        for (int k = 0; k < d->n_streams; k++) {
            const tsr_stream_config *s = &d->streams[k];
            cfgtab_format_double(v, sizeof v, s->value);
            fprintf(f, "    { name = ");
            cfgtab_print_string(f, s->name);
            fprintf(f, "; path = ");
            cfgtab_print_string(f, s->path);
            fprintf(f, "; %s = %s; }%s\n", kind_names[s->kind], v, k + 1 < d->n_streams ? "," : "");
        }
        fprintf(f, "  );\n");
    }
    if (d->n_phases) {
        fprintf(f, "  curriculum = (\n");
        for (int i = 0; i < d->n_phases; i++) {
            const tsr_phase_config *ph = &d->phases[i];
            if (ph->at_percent >= 0) {
                cfgtab_format_double(v, sizeof v, ph->at_percent);
                fprintf(f, "    { at = \"%s%%\"; ", v);
            } else {
                duration_format(v, sizeof v, ph->at);
                fprintf(f, "    { at = \"%s\"; ", v);
            }
            print_weights(f, d, ph);
            fprintf(f, " }%s\n", i + 1 < d->n_phases ? "," : "");
        }
        fprintf(f, "  );\n");
    }
}

void cfgmix_doc(FILE *f) {
    fprintf(f,
        "\n### `data.mix` and `data.curriculum` (lists)\n\n"
        "Instead of `data.train`, a list of streams, each `{ name; path; proportion | repeat | "
        "choose; }`:\n\n"
        "```\n"
        "data = {\n"
        "  mix = (\n"
        "    { name = \"web\";    path = \"data/web/train\";    proportion = 0.9; },\n"
        "    { name = \"domain\"; path = \"data/domain/train\"; proportion = 0.1; }\n"
        "  );\n"
        "  curriculum = (                          # optional; phases in increasing `at`\n"
        "    { at = \"90%%\"; scale = { domain = 3.0; }; }   # last 10%% of the run: domain x3\n"
        "  );\n"
        "};\n"
        "```\n\n"
        "- `proportion` (> 0, normalised over the streams), or `repeat` (this many times the "
        "stream's own samples per epoch) / `choose` (this many samples per epoch); proportions "
        "are not combined with repeat / choose.\n"
        "- A phase starts `at` a duration or a percent of `max_duration` and gives either "
        "`proportion = { name = w; ... }` (new weights, in the streams' unit) or "
        "`scale = { name = x; ... }` (multipliers); unnamed streams keep their base weight; a "
        "weight of 0 turns a stream off.\n"
        "- Every global batch holds each stream's share exactly (largest-remainder rounding); "
        "details and the epoch definition in docs/data-mixing.md. Not settable with `--set`.\n");
}

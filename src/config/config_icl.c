/* config_icl.c — icl_tasks: the in-context-learning tasks `tessera eval` and the trainer's
 * evaluations score (docs/eval.md).
 *
 *   icl_tasks = (
 *     { label = "colors"; type = "multiple_choice"; path = "eval/tasks/colors.jsonl"; fewshot = 2; },
 *     { label = "facts"; type = "language_modeling"; path = "eval/tasks/facts.jsonl"; }
 *   );
 *
 * Optional per task: fewshot (0), continuation_delimiter (" "), example_delimiter ("\n").
 */
#include <libconfig.h>

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "config/config_icl.h"
#include "config/config_table.h"

static const char *const type_names[TSR_ICL_COUNT] = {"multiple_choice", "language_modeling", "schema",
                                                      "generation_task_with_answers"};

const char *config_icl_type_name(int type) { return type >= 0 && type < TSR_ICL_COUNT ? type_names[type] : "?"; }

static int parse_task(const config_setting_t *e, const char *file, int idx, tsr_icl_task_config *t) {
    int errors = 0, have_type = 0;
    memset(t, 0, sizeof *t);
    snprintf(t->continuation_delimiter, sizeof t->continuation_delimiter, " ");
    snprintf(t->example_delimiter, sizeof t->example_delimiter, "\n");
    for (int i = 0; i < config_setting_length(e); i++) {
        const config_setting_t *s = config_setting_get_elem(e, (unsigned)i);
        const char *key = config_setting_name(s), *v = config_setting_get_string(s);
        int line = config_setting_source_line(s);
        if (!strcmp(key, "fewshot")) {
            int ty = config_setting_type(s);
            long long n = ty == CONFIG_TYPE_INT || ty == CONFIG_TYPE_INT64 ? config_setting_get_int64(s) : -1;
            if (n < 0 || n > 64) {
                tsr_error("%s:%d: icl_tasks[%d].fewshot: expected an integer in [0, 64]", file, line, idx);
                errors++;
            }
            t->fewshot = (int)n;
            continue;
        }
        char *dst = NULL;
        size_t cap = 0;
        if (!strcmp(key, "label")) dst = t->label, cap = sizeof t->label;
        else if (!strcmp(key, "path")) dst = t->path, cap = sizeof t->path;
        else if (!strcmp(key, "continuation_delimiter"))
            dst = t->continuation_delimiter, cap = sizeof t->continuation_delimiter;
        else if (!strcmp(key, "example_delimiter"))
            dst = t->example_delimiter, cap = sizeof t->example_delimiter;
        if (!strcmp(key, "type")) {
            int k = -1;
            for (int j = 0; v && j < TSR_ICL_COUNT; j++)
                if (!strcmp(v, type_names[j])) k = j;
            if (k < 0) {
                tsr_error("%s:%d: icl_tasks[%d].type: expected one of multiple_choice | "
                          "language_modeling | schema | generation_task_with_answers", file, line,
                          idx);
                errors++;
            }
            t->type = (tsr_icl_type)(k < 0 ? 0 : k);
            have_type = 1;
        } else if (!dst) {
            tsr_error("%s:%d: icl_tasks[%d]: unknown key '%s' (a task has label, type, path and "
                      "optionally fewshot, continuation_delimiter, example_delimiter)", file, line,
                      idx, key);
            errors++;
        } else if (!v || strlen(v) >= cap || (dst != t->continuation_delimiter &&
                                               dst != t->example_delimiter && !*v)) {
            tsr_error("%s:%d: icl_tasks[%d].%s: expected a string of at most %zu bytes", file, line,
                      idx, key, cap - 1);
            errors++;
        } else {
            snprintf(dst, cap, "%s", v);
        }
    }
    if (!errors && (!t->label[0] || !t->path[0] || !have_type)) {
        tsr_error("%s:%d: icl_tasks[%d]: missing %s (e.g. { label = \"colors\"; type = "
                  "\"multiple_choice\"; path = \"eval/tasks/colors.jsonl\"; })", file,
                  config_setting_source_line(e), idx,
                  !t->label[0] ? "label" : !t->path[0] ? "path" : "type");
        errors++;
    }
    for (const char *p = t->label; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') {
            tsr_error("%s: icl_tasks[%d].label \"%s\": letters, digits, '_', '-', '.' only", file,
                      idx, t->label);
            errors++;
            break;
        }
    return errors;
}

int cfgicl_parse(const config_setting_t *s, const char *file, tsr_config *cfg) {
    int n = config_setting_length(s), t = config_setting_type(s), errors = 0;
    if ((t != CONFIG_TYPE_LIST && t != CONFIG_TYPE_ARRAY) || n < 1 || n > TSR_MAX_ICL_TASKS) {
        tsr_error("%s:%d: icl_tasks: expected a list of 1 to %d groups in parentheses, e.g. "
                  "icl_tasks = ( { label = \"colors\"; type = \"multiple_choice\"; path = "
                  "\"eval/tasks/colors.jsonl\"; } );", file, config_setting_source_line(s),
                  TSR_MAX_ICL_TASKS);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        if (config_setting_type(e) != CONFIG_TYPE_GROUP) {
            tsr_error("%s:%d: icl_tasks[%d]: expected a group { ... }", file,
                      config_setting_source_line(e), i);
            errors++;
            continue;
        }
        errors += parse_task(e, file, i, &cfg->icl[i]);
        for (int j = 0; j < i && !errors; j++)
            if (!strcmp(cfg->icl[i].label, cfg->icl[j].label)) {
                tsr_error("%s: icl_tasks: two tasks labelled '%s'", file, cfg->icl[i].label);
                errors++;
            }
    }
    if (!errors) cfg->n_icl = n;
    return errors;
}

void cfgicl_print(FILE *f, const tsr_config *cfg) {
    if (!cfg->n_icl) return;
    fprintf(f, "icl_tasks = (\n");
    for (int i = 0; i < cfg->n_icl; i++) {
        const tsr_icl_task_config *t = &cfg->icl[i];
        fprintf(f, "  { label = ");
        cfgtab_print_string(f, t->label);
        fprintf(f, "; type = \"%s\"; path = ", type_names[t->type]);
        cfgtab_print_string(f, t->path);
        fprintf(f, "; fewshot = %d; continuation_delimiter = ", t->fewshot);
        cfgtab_print_string(f, t->continuation_delimiter);
        fprintf(f, "; example_delimiter = ");
        cfgtab_print_string(f, t->example_delimiter);
        fprintf(f, "; }%s\n", i + 1 < cfg->n_icl ? "," : "");
    }
    fprintf(f, ");\n");
}

void cfgicl_doc(FILE *f) {
    fprintf(f,
        "\n### `icl_tasks` (list)\n\n"
        "In-context-learning tasks scored by `tessera eval` and, in a training recipe, at every "
        "evaluation of tessera-train (docs/eval.md), in LLM Foundry's JSONL schemas:\n\n"
        "```\n"
        "icl_tasks = (\n"
        "  { label = \"colors\"; type = \"multiple_choice\"; path = \"eval/tasks/colors.jsonl\"; fewshot = 2; },\n"
        "  { label = \"facts\"; type = \"language_modeling\"; path = \"eval/tasks/facts.jsonl\"; }\n"
        ");\n"
        "```\n\n"
        "- `type`: `multiple_choice` (`{query, choices, gold}`), `language_modeling` (`{context, "
        "continuation}`), `schema` (`{context_options, continuation, gold}`) or "
        "`generation_task_with_answers` (`{context, answer, aliases}`: a greedy completion of "
        "the context, cut at the example delimiter, right when it equals the answer or an alias "
        "after normalisation; the trainer scores it with full weights on the CPU only: not "
        "under zero3 / hsdp, device = cuda or expert parallelism);\n"
        "- optional: `fewshot` (examples of the same file put before each one, 0..64; default 0), "
        "`continuation_delimiter` (default `\" \"`), `example_delimiter` (default `\"\\n\"`).\n"
        "Not settable with `--set`.\n");
}

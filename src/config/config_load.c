/* config_load.c — config_load: defaults, then the libconfig file, then --set overrides, then checks
 * across keys; config_check_world; docs/config.md. The keys themselves are in config_table.c.
 *
 * Every error is printed with tsr_error() naming file:line (or "--set ..."), the key, the value
 * and what is accepted; config_load reports every error it finds in the file before returning
 * TSR_EXIT_USAGE, so one edit-run cycle fixes them all.
 */
#include <libconfig.h>

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "cuda/cuda_shapes.h" /* the head sizes the GPU's attention has kernels for */
#include "config/config_icl.h"
#include "config/config_mix.h"
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

static int key_index(const cfgtab_key *k) { return (int)(k - cfgtab_keys); }

/* ---- libconfig 1.5 integers ----
 * libconfig 1.5 stores an integer literal without an L suffix in 32 bits, silently wrapping
 * 3000000000 to -1294967296. We re-read such a literal from the source text and refuse a value that
 * changed. */

static char *read_text(const char *name) {
    FILE *f = fopen(name, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (cap >= (64u << 20)) { /* not a config file */
            free(buf);
            buf = NULL;
            break;
        }
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

static const char *source_text(load_ctx *c, const char *file) {
    if (c->text_name && strcmp(c->text_name, file) == 0) return c->text;
    free(c->text_name);
    free(c->text);
    c->text_name = strdup(file);
    /* an @include'd file's name is relative to the include directory, the config's own */
    if (strcmp(file, c->path) != 0 && file[0] != '/' && c->include_dir[0]) {
        char joined[2100];
        snprintf(joined, sizeof joined, "%s/%s", c->include_dir, file);
        c->text = read_text(joined);
    }
    if (!c->text) c->text = read_text(file);
    return c->text;
}

static int is_name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '-' || ch == '*';
}

/* Nonzero when the literal of setting `name` at file:line does not read as `stored`; the literal
 * goes to lit. Zero also when the literal cannot be found (nothing to compare). */
static int int_literal_changed(load_ctx *c, const char *file, int line, const char *name,
                               int64_t stored, char *lit, size_t n) {
    const char *t = source_text(c, file);
    if (!t || line < 1) return 0;
    for (int l = 1; l < line && t; l++) {
        t = strchr(t, '\n');
        if (t) t++;
    }
    if (!t) return 0;
    size_t nl = strlen(name);
    const char *eol = strchr(t, '\n');
    for (const char *p = t; (p = strstr(p, name)) != NULL && (!eol || p < eol); p++) {
        if ((p > t && is_name_char(p[-1])) || is_name_char(p[nl])) continue;
        const char *q = p + nl;
        while (*q == ' ' || *q == '\t') q++;
        if (*q != '=' && *q != ':') continue;
        q++;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        size_t len = strspn(q, "+-0123456789abcdefABCDEFxX");
        if (len == 0 || len >= n) return 0;
        memcpy(lit, q, len);
        lit[len] = '\0';
        int hex = strstr(lit, "0x") || strstr(lit, "0X");
        errno = 0;
        char *end;
        long long v = hex ? (long long)strtoull(lit, &end, 16) : strtoll(lit, &end, 10);
        return errno == ERANGE || *end != '\0' || v != stored;
    }
    return 0;
}

/* ---- walking the file ---- */

static void setting_value(const config_setting_t *s, cfgtab_value *v) {
    memset(v, 0, sizeof *v);
    switch (config_setting_type(s)) {
    case CONFIG_TYPE_INT:
    case CONFIG_TYPE_INT64: v->kind = CFGV_INT, v->i = config_setting_get_int64(s); break;
    case CONFIG_TYPE_FLOAT: v->kind = CFGV_FLOAT, v->f = config_setting_get_float(s); break;
    case CONFIG_TYPE_BOOL: v->kind = CFGV_BOOL, v->i = config_setting_get_bool(s); break;
    case CONFIG_TYPE_STRING: v->kind = CFGV_STRING, v->s = config_setting_get_string(s); break;
    case CONFIG_TYPE_GROUP: v->kind = CFGV_GROUP; break;
    default: v->kind = CFGV_LIST; break;
    }
}

static void unknown_key(const char *prefix, const char *name) {
    const char *near = cfgtab_suggest(name);
    if (near)
        tsr_error("%sunknown key '%s' (did you mean '%s'?)", prefix, name, near);
    else
        tsr_error("%sunknown key '%s' (the keys are listed in docs/config.md)", prefix, name);
}

static void walk(load_ctx *c, const config_setting_t *grp, const char *group) {
    int n = config_setting_length(grp);
    for (int i = 0; i < n; i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        const char *name = config_setting_name(s);
        const char *file = config_setting_source_file(s) ? config_setting_source_file(s) : c->path;
        int line = config_setting_source_line(s);
        char full[256], at[1200], val[4200], why[256];
        snprintf(full, sizeof full, "%s%s%s", group ? group : "", group ? "." : "", name ? name : "?");
        snprintf(at, sizeof at, "%s:%d: ", file, line);
        cfgtab_value v;
        setting_value(s, &v);
        const cfgtab_key *k = cfgtab_find(full);
        if (!k && !strcmp(full, "icl_tasks")) {
            c->errors += cfgicl_parse(s, file, c->cfg);
            continue;
        }
        if (!k && (!strcmp(full, "data.mix") || !strcmp(full, "data.curriculum"))) {
            /* a curriculum after a refused mix would only repeat that error */
            if (full[5] == 'c' && c->mix_line && c->cfg->data.n_streams == 0) continue;
            c->errors += cfgmix_parse(s, full, file, c->cfg);
            if (!strcmp(full, "data.mix")) c->mix_line = line, c->mix_file = file;
            continue;
        }
        if (!k) {
            if (cfgtab_is_group(full)) { /* a group, or a group in one (optim.muon) */
                if (v.kind == CFGV_GROUP) {
                    walk(c, s, full);
                } else {
                    cfgtab_format_value(&v, val, sizeof val);
                    tsr_error("%s%s = %s: expected a group, e.g. %s = { ... };", at, full, val, full);
                    c->errors++;
                }
            } else {
                unknown_key(at, full);
                c->errors++;
            }
            continue;
        }
        char lit[64];
        c->present[key_index(k)] = 1;
        if (config_setting_type(s) == CONFIG_TYPE_INT &&
            int_literal_changed(c, file, line, name, v.i, lit, sizeof lit)) {
            tsr_error("%s%s = %s: libconfig reads an integer beyond 32 bits only with an L suffix: "
                      "write %sL", at, full, lit, lit);
            c->errors++;
            continue;
        }
        const char *err = cfgtab_assign(k, c->cfg, &v, why, sizeof why);
        if (err) {
            cfgtab_format_value(&v, val, sizeof val);
            tsr_error("%s%s = %s: %s", at, full, val, err);
            c->errors++;
            continue;
        }
        c->given[key_index(k)] = 1;
        c->line[key_index(k)] = line;
        c->file[key_index(k)] = file;
    }
}

static int read_file(load_ctx *c, config_t *lc) {
    const char *path = c->path;
    FILE *f = fopen(path, "r");
    struct stat st;
    if (!f || (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))) {
        int err = f ? EISDIR : errno;
        if (f) fclose(f);
        tsr_error("%s: cannot read config: %s", path, strerror(err));
        return TSR_EXIT_USAGE;
    }
    fclose(f);
    snprintf(c->include_dir, sizeof c->include_dir, "%s", path);
    char *slash = strrchr(c->include_dir, '/');
    if (slash) *slash = '\0';
    else snprintf(c->include_dir, sizeof c->include_dir, ".");
    config_set_include_dir(lc, c->include_dir);
    if (!config_read_file(lc, path)) {
        const char *file = config_error_file(lc) ? config_error_file(lc) : path;
        const char *text = config_error_text(lc) ? config_error_text(lc) : "unknown error";
        if (config_error_type(lc) == CONFIG_ERR_FILE_IO)
            tsr_error("%s: cannot read config: %s", file, text);
        else if (strcmp(text, "syntax error") == 0)
            tsr_error("%s:%d: syntax error", file, config_error_line(lc));
        else
            tsr_error("%s:%d: syntax error: %s", file, config_error_line(lc), text);
        return TSR_EXIT_USAGE;
    }
    walk(c, config_root_setting(lc), NULL);
    return 0;
}

/* ---- --set ---- */

static void apply_set(load_ctx *c, const char *arg) {
    const char *eq = strchr(arg, '=');
    char key[256], why[256];
    if (!eq) {
        tsr_error("--set %s (expected key=value)", arg);
        c->errors++;
        return;
    }
    snprintf(key, sizeof key, "%.*s", (int)(eq - arg), arg);
    const cfgtab_key *k = cfgtab_find(key);
    if (!k && (!strcmp(key, "data.mix") || !strcmp(key, "data.curriculum") || !strcmp(key, "icl_tasks"))) {
        tsr_error("--set %.500s: %s is a list: write it in the config file (docs/config.md)", arg, key);
        c->errors++;
        return;
    }
    if (!k) {
        char at[600];
        snprintf(at, sizeof at, "--set %.500s: ", arg);
        if (cfgtab_is_group(key))
            tsr_error("%s'%s' is a group: set its keys one by one, e.g. --set %s.<key>=value", at,
                      key, key);
        else
            unknown_key(at, key);
        c->errors++;
        return;
    }
    cfgtab_value v = {.kind = CFGV_TEXT, .s = eq + 1};
    c->present[key_index(k)] = 1;
    const char *err = cfgtab_assign(k, c->cfg, &v, why, sizeof why);
    if (err) {
        tsr_error("--set %s: %s", arg, err);
        c->errors++;
        return;
    }
    c->given[key_index(k)] = 1;
    c->line[key_index(k)] = -1;
    c->file[key_index(k)] = NULL;
    c->set_arg[key_index(k)] = arg;
}

int config_check_set(const char *key, const char *value, char *why, size_t n) {
    const cfgtab_key *k = cfgtab_find(key);
    if (!k) {
        snprintf(why, n, "no such key");
        return -1;
    }
    tsr_config *scratch = tsr_calloc(1, sizeof *scratch);
    cfgtab_value v = {.kind = CFGV_TEXT, .s = value};
    const char *err = cfgtab_assign(k, scratch, &v, why, n);
    if (err && err != why) snprintf(why, n, "%s", err);
    free(scratch);
    return err ? -1 : 0;
}

static void check_required(load_ctx *c) {
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const cfgtab_key *k = &cfgtab_keys[i];
        if (k->def || c->present[i]) continue; /* invalid values were reported already */
        if (!strcmp(k->name, "data.train") && c->mix_line) continue; /* data.mix replaces it */
        char tbuf[128], ex[512];
        const char *type = cfgtab_type_name(k, tbuf, sizeof tbuf), *dot = strchr(k->name, '.');
        if (!c->path)
            snprintf(ex, sizeof ex, "--set %s=%s", k->name, k->example);
        else if (dot)
            snprintf(ex, sizeof ex, "%.*s = { %s = %s; };", (int)(dot - k->name), k->name, dot + 1,
                     k->example);
        else
            snprintf(ex, sizeof ex, "%s = %s;", k->name, k->example);
        tsr_error("%s%smissing required key '%s' (%s, e.g. %s)", c->path ? c->path : "",
                  c->path ? ": " : "", k->name, type, ex);
        c->errors++;
    }
}

/* ---- checks across keys ---- */

/* Listed in docs/config.md; keep in step with validate(). */
static const char *const cross_rules[] = {
    "`model.d_model` is a multiple of `model.n_head` (and `n_head <= d_model`).",
    "`global_batch` is a multiple of `micro_batch`; at launch with W ranks, `global_batch` is a "
    "multiple of W and `global_batch / W` a multiple of `micro_batch` (`\"auto\"` picks a divisor).",
    "With `model.pos = \"learned\"`, `model.max_seq_len` is 0 or >= `seq_len`.",
    "`model.expansion_ratio x model.d_model` (the MLP width) is a whole number.",
    "`model.vocab_size` rounded up to a multiple of `model.vocab_multiple` fits in 31 bits.",
    "`eval_interval` other than `0ba` needs `data.val` or `icl_tasks`.",
    "With `model.attn_mask = \"document\"`, `model.eot_token` is below `model.vocab_size`.",
    "With `model.activation_checkpointing` other than `none`, "
    "`model.activation_checkpointing_layers` is -1 (all) or 1 .. `model.n_layer`; "
    "`model.activation_checkpointing_range` is `\"A-B\"` with 0 <= A <= B < `model.n_layer`, given "
    "only with `activation_checkpointing_layers` = -1.",
    "With `parallel.sharding = \"hsdp\"`, `parallel.replica_group` (0: the ranks of one node) "
    "divides the rank count (checked at start, when the rank count is known).",
    "`device = \"cuda\"` needs a build with the CUDA backend (checked at start), and a head size "
    "(`model.head_dim`, else `d_model / n_head`) of " TCU_ATTENTION_HEAD_SIZES ": the sizes the "
    "GPU's attention kernels are built for.",
    "`parallel.expert` above 1 needs a MoE model (`model.moe_experts` a multiple of it), and "
    "divides the rank count (checked at start).",
    "`objective = \"dpo\"` needs an even `micro_batch` (not `\"auto\"`) and no `data.mix`; "
    "`global_batch / W` is even (checked at start); "
    "`dpo.reference = \"base\"` needs `lora.rank` > 0.",
    "`objective = \"grpo\"` needs a `micro_batch` in prompts (not `\"auto\"`), no `data.mix` and "
    "`parallel.expert = 1`; `reward.kind = \"command\"` needs `reward.command`, `\"regex\"` "
    "`reward.regex`; `grpo.overlong_buffer` is at most `grpo.max_new_tokens`; `grpo.reference = "
    "\"base\"` needs `lora.rank` > 0; `grpo.reference_checksum` is \"\" or `crc32c:` and 8 "
    "lowercase hex digits.",
    "With `lora.rank` above 0: `lora.targets` names each of q, k, v, o, gate, up, down at most "
    "once (gate and up with `model.mlp = \"swiglu\"`; no MLP target in a MoE model), with "
    "`parallel.expert = 1`. "
    "`lora.base_checksum` is \"\" or "
    "`crc32c:` and 8 lowercase hex digits.",
    "Exactly one of `data.train` and `data.mix`; `data.curriculum` needs `data.mix`, its phases "
    "in increasing `at`.",
    "`data.cache_limit` is a size: `500M`, `20G`, `1.5T` (powers of 1024) or `0`.",
    "`optim.muon.*` keys only with `optim.name = \"muon\"`; Muon not with `lora.rank` > 0.",
    "`precision.fp8` other than `none` needs `device = \"cuda\"` (the CPU is the fp32 oracle) and "
    "a GPU of compute capability 8.9 or newer (checked at start); `rowwise` is not built yet. "
    "`model.activation_compression = \"fp8\"` needs `device = \"cuda\"`.",
};

/* "file:line: " of the key, "--set key=value: " for an override, "file: " for a default. */
static const char *where(const load_ctx *c, const char *name, char *buf, size_t n) {
    const cfgtab_key *k = cfgtab_find(name);
    int i = k ? key_index(k) : 0;
    if (k && c->given[i] && c->line[i] == -2) /* filled from a model's files */
        snprintf(buf, n, "%s: ", c->file[i]);
    else if (k && c->given[i] && c->line[i] > 0)
        snprintf(buf, n, "%s:%d: ", c->file[i] ? c->file[i] : c->path, c->line[i]);
    else if (k && c->given[i])
        snprintf(buf, n, "--set %.500s: ", c->set_arg[i]);
    else
        snprintf(buf, n, "%s%s", c->path ? c->path : "", c->path ? ": " : "");
    return buf;
}

/* The model's and the batch's sizes against each other. */
static void validate_shapes(load_ctx *c) {
    const tsr_config *g = c->cfg;
    const tsr_model_config *m = &g->model;
    char at[1200];
    tsr_model_dims dims;
    const char *dkey;
    char dwhy[400];
    if (config_model_dims(m, &dims, &dkey, dwhy, sizeof dwhy) != 0) {
        tsr_error("%s%s", where(c, dkey, at, sizeof at), dwhy);
        c->errors++;
    } else if (g->device == TSR_DEVICE_CUDA && !tcu_attention_head_size_ok(dims.hs)) {
        /* here, not at the GPU's start: --plan on a login node says so before the job queues */
        char how[96];
        if (m->head_dim > 0) snprintf(how, sizeof how, "model.head_dim = %d", dims.hs);
        else snprintf(how, sizeof how, "model.d_model / model.n_head = %d / %d = %d", m->d_model,
                      m->n_head, dims.hs);
        tsr_error("%sdevice = \"cuda\": head size %s has no attention kernel on the GPU: it must "
                  "be " TCU_ATTENTION_HEAD_SIZES " (change model.head_dim or model.n_head, or use "
                  "device = \"cpu\")", where(c, m->head_dim > 0 ? "model.head_dim" : "model.n_head",
                  at, sizeof at), how);
        c->errors++;
    }
    if (g->micro_batch > 0 && g->global_batch % g->micro_batch != 0) { /* 0 = auto */
        tsr_error("%sglobal_batch = %lld is not divisible by micro_batch = %lld: choose a "
                  "global_batch that is a multiple of micro_batch (times the number of ranks)",
                  where(c, "global_batch", at, sizeof at), (long long)g->global_batch,
                  (long long)g->micro_batch);
        c->errors++;
    }
    if (m->pos == TSR_POS_LEARNED && m->max_seq_len > 0 && m->max_seq_len < g->seq_len) {
        tsr_error("%smodel.max_seq_len = %d is smaller than seq_len = %lld: with model.pos = "
                  "\"learned\" the position table needs max_seq_len >= seq_len (or 0 = seq_len)",
                  where(c, "model.max_seq_len", at, sizeof at), m->max_seq_len,
                  (long long)g->seq_len);
        c->errors++;
    }
    int64_t vp = ((int64_t)m->vocab_size + m->vocab_multiple - 1) / m->vocab_multiple * m->vocab_multiple;
    if (vp > INT_MAX) {
        tsr_error("%smodel.vocab_size = %d rounded up to a multiple of model.vocab_multiple = %d is "
                  "%lld, more than %d rows: lower vocab_multiple",
                  where(c, "model.vocab_size", at, sizeof at), m->vocab_size, m->vocab_multiple,
                  (long long)vp, INT_MAX);
        c->errors++;
    }
}

/* objective = grpo (docs/rl.md): what it needs, and what does not run with it yet */
static void validate_grpo(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->objective != TSR_OBJ_GRPO) return;
    struct { int bad; const char *key, *why; } rules[] = {
        {g->micro_batch == 0, "micro_batch", "objective = \"grpo\" counts micro_batch in prompts "
         "(each with its grpo.group_size completions): give a number, \"auto\" is not supported"},
        {g->data.n_streams > 0, "objective", "objective = \"grpo\": data.mix is not supported "
         "with it (data.train holds the prompts)"},
        {g->expert > 1, "parallel.expert", "objective = \"grpo\" with expert parallelism is not "
         "supported yet: set parallel.expert = 1"},
        {g->context > 1, "parallel.context", "objective = \"grpo\" with context parallelism is "
         "not supported yet (its rollouts are generated whole on each rank): set "
         "parallel.context = 1"},
        {g->reward.kind == TSR_REWARD_COMMAND && !g->reward.command[0], "reward.command",
         "reward.kind = \"command\" needs the program to run: set reward.command"},
        {g->reward.kind == TSR_REWARD_REGEX && !g->reward.regex[0], "reward.regex",
         "reward.kind = \"regex\" needs reward.regex"},
        {g->grpo.overlong_buffer > g->grpo.max_new_tokens, "grpo.overlong_buffer",
         "grpo.overlong_buffer is longer than grpo.max_new_tokens"},
        {g->device == TSR_DEVICE_CUDA && g->grpo.kl_coef > 0 && g->lora.rank == 0,
         "grpo.kl_coef", "objective = \"grpo\" on device = \"cuda\": a KL term to the initial "
         "weights is not supported there yet (LoRA's base reference is): set grpo.kl_coef = 0 "
         "or use LoRA"},
        {g->grpo.reference == TSR_GRPO_REF_BASE && g->lora.rank == 0, "grpo.reference",
         "grpo.reference = \"base\" needs LoRA (lora.rank > 0): the base is the model with the "
         "adapters off; full finetuning takes \"initial\" (or \"auto\")"},
    };
    for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
        if (rules[k].bad) {
            tsr_error("%s%s (docs/rl.md)", where(c, rules[k].key, at, sizeof at), rules[k].why);
            c->errors++;
        }
}

/* LoRA (docs/lora.md): the targets against the model, and what does not run with it yet. */
static void validate_lora(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200], why[400];
    unsigned mask;
    const char *sums[3][2] = {{"lora.base_checksum", g->lora.base_checksum},
                              {"dpo.reference_checksum", g->dpo.reference_checksum},
                              {"grpo.reference_checksum", g->grpo.reference_checksum}};
    for (int k = 0; k < 3; k++) {
        const char *cs = sums[k][1];
        if (cs[0] && (strncmp(cs, "crc32c:", 7) != 0 || strlen(cs) != 15 ||
                      strspn(cs + 7, "0123456789abcdef") != 8)) {
            tsr_error("%s%s = \"%s\": expected \"crc32c:\" and 8 lowercase hex digits, as the "
                      "trainer writes it (or \"\")", where(c, sums[k][0], at, sizeof at),
                      sums[k][0], cs);
            c->errors++;
        }
    }
    if (g->objective == TSR_OBJ_DPO && g->lora.rank == 0 && g->dpo.reference == TSR_DPO_REF_BASE) {
        tsr_error("%sdpo.reference = \"base\" needs LoRA (lora.rank > 0): the base is the model "
                  "with the adapters off; full finetuning takes dpo.reference = \"precomputed\" "
                  "(or \"auto\"; docs/dpo.md)", where(c, "dpo.reference", at, sizeof at));
        c->errors++;
    }
    if (g->objective == TSR_OBJ_DPO && (g->micro_batch == 0 || g->micro_batch % 2 != 0)) {
        tsr_error("%smicro_batch = %lld: objective = \"dpo\" runs whole pairs (chosen, rejected) "
                  "in a microbatch: give an even micro_batch (\"auto\" is not supported with dpo)",
                  where(c, "micro_batch", at, sizeof at), (long long)g->micro_batch);
        c->errors++;
    }
    if (g->objective == TSR_OBJ_DPO && g->data.n_streams > 0) {
        tsr_error("%sobjective = \"dpo\": data.mix is not supported with it yet",
                  where(c, "objective", at, sizeof at));
        c->errors++;
    }
    if (g->lora.rank == 0) return;
    if (config_lora_targets(&g->model, g->lora.targets, &mask, why, sizeof why) != 0) {
        tsr_error("%slora.targets = \"%s\": %s", where(c, "lora.targets", at, sizeof at),
                  g->lora.targets, why);
        c->errors++;
    }
    if (g->expert > 1) {
        tsr_error("%slora.rank = %lld: LoRA with expert parallelism is not supported yet; set "
                  "parallel.expert = 1", where(c, "lora.rank", at, sizeof at),
                  (long long)g->lora.rank);
        c->errors++;
    }
}

/* optim.decay: the final decay of optim.schedule = "wsd" (docs/training.md): a fraction or a
 * duration. */
static void validate_schedule(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    int md = key_index(cfgtab_find("max_duration"));
    c->cfg->max_duration_set = c->given[md] && c->line[md] == -1;
    /* (another schedule ignores it: every effective config, config.cfg and a checkpoint's,
     * names every key) */
    if (g->optim.schedule != TSR_SCHED_WSD) return;
    if (decay_to_steps(g->optim.decay, 1, 1, 1, 1) < 0) {
        tsr_error("%soptim.decay = \"%s\": expected a fraction of max_duration in (0, 1] (\"0.2\") "
                  "or a duration (\"200ba\", \"1e9tok\", \"0.5ep\")",
                  where(c, "optim.decay", at, sizeof at), g->optim.decay);
        c->errors++;
    }
}

/* optim.name = muon (docs/training.md "Muon"): its keys only with it, and not with LoRA (the
 * references orthogonalise full weight matrices, not adapters). */
static void validate_muon(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->optim.name != TSR_OPTIM_MUON) {
        for (int i = 0; i < cfgtab_n_keys; i++) {
            if (!c->given[i] || strncmp(cfgtab_keys[i].name, "optim.muon.", 11) != 0) continue;
            tsr_error("%s%s is a Muon setting, but optim.name = \"adamw\": set optim.name = "
                      "\"muon\" to use Muon, or remove %s", where(c, cfgtab_keys[i].name, at,
                      sizeof at), cfgtab_keys[i].name, cfgtab_keys[i].name);
            c->errors++;
        }
        return;
    }
    if (g->lora.rank > 0) {
        tsr_error("%soptim.name = \"muon\" with lora.rank = %lld: Muon orthogonalises whole "
                  "weight matrices, and LoRA trains low-rank adapters beside frozen ones (no "
                  "reference implementation applies Muon to them; docs/training.md): finetune "
                  "the adapters with optim.name = \"adamw\", or train the full model with Muon",
                  where(c, "optim.name", at, sizeof at), (long long)g->lora.rank);
        c->errors++;
    }
}

/* A GPU-only setting on device = "cpu": the error naming the key and its value (what the CPU is
 * and what the key needs), counted; 1 when refused. */
static int refuse_on_cpu(load_ctx *c, const char *key, const char *value, const char *off) {
    char at[1200];
    if (c->cfg->device != TSR_DEVICE_CPU) return 0;
    tsr_error("%s%s = \"%s\" with device = \"cpu\": the CPU is the fp32 oracle and trains in fp32 "
              "only; %s needs device = \"cuda\" (or set %s = \"%s\")",
              where(c, key, at, sizeof at), key, value, key, key, off);
    c->errors++;
    return 1;
}

/* precision.fp8 (docs/cuda.md "FP8") and model.activation_compression: a GPU's, never the
 * CPU's; what is not built yet refused */
static void validate_fp8(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (g->model.activation_compression == TSR_ACTCOMP_FP8)
        refuse_on_cpu(c, "model.activation_compression", "fp8", "none");
    if (g->precision.fp8 == TSR_FP8_NONE) return;
    const char *mode = g->precision.fp8 == TSR_FP8_ROWWISE ? "rowwise" : "tensorwise";
    if (refuse_on_cpu(c, "precision.fp8", mode, "none")) return;
    if (g->precision.fp8 == TSR_FP8_ROWWISE) {
        tsr_error("%sprecision.fp8 = \"rowwise\" is not built yet (docs/cuda.md \"FP8\"): use "
                  "\"tensorwise\" or \"none\"", where(c, "precision.fp8", at, sizeof at));
        c->errors++;
    }
}

/* Options that need another key: evaluations, the document mask, activation checkpointing. */
static void validate_options(load_ctx *c) {
    const tsr_config *g = c->cfg;
    const tsr_model_config *m = &g->model;
    char at[1200];
    if (g->eval_interval.value > 0 && g->data.val[0] == '\0' && g->n_icl == 0) {
        char d[96];
        duration_format(d, sizeof d, g->eval_interval);
        tsr_error("%seval_interval = \"%s\" but there is nothing to evaluate: set data.val = "
                  "\"<dataset dir>\", give icl_tasks, or set eval_interval = \"0ba\"",
                  where(c, "eval_interval", at, sizeof at), d);
        c->errors++;
    }
    if (m->attn_mask == TSR_MASK_DOCUMENT && (m->eot_token < 0 || m->eot_token >= m->vocab_size)) {
        /* the same rule as model_config_check, here with the key's file:line */
        tsr_error("%smodel.eot_token = %d is not a token id of model.vocab_size = %d: with "
                  "model.attn_mask = \"document\" it must be in [0, %d) (the tokenizer's "
                  "<|endoftext|> id; GPT-2's is 50256)", where(c, "model.eot_token", at, sizeof at),
                  m->eot_token, m->vocab_size, m->vocab_size);
        c->errors++;
    }
    if (g->expert > 1 && m->moe_experts == 0) {
        tsr_error("%sparallel.expert = %lld: expert parallelism needs a mixture-of-experts model "
                  "(model.moe_experts > 0), and this one is dense: set parallel.expert = 1",
                  where(c, "parallel.expert", at, sizeof at), (long long)g->expert);
        c->errors++;
    } else if (g->expert > 1 && m->moe_experts % g->expert != 0) {
        tsr_error("%sparallel.expert = %lld: expert parallelism splits the experts over that many "
                  "ranks, so model.moe_experts (%d) must be a multiple of it; or set "
                  "parallel.expert = 1", where(c, "parallel.expert", at, sizeof at),
                  (long long)g->expert, m->moe_experts);
        c->errors++;
    }
    int ck_lo, ck_n;
    const char *ck_key;
    char ck_why[400];
    if (config_actckpt_layers(m, &ck_lo, &ck_n, &ck_key, ck_why, sizeof ck_why) != 0) {
        tsr_error("%s%s", where(c, ck_key, at, sizeof at), ck_why);
        c->errors++;
    }
    validate_lora(c);
    validate_muon(c);
    validate_schedule(c);
    validate_grpo(c);
    validate_fp8(c);
}

/* The data lists: data.mix or data.train, curriculum order, the cache limit. */
static void validate_data(load_ctx *c) {
    const tsr_config *g = c->cfg;
    char at[1200];
    if (c->mix_line && c->present[key_index(cfgtab_find("data.train"))]) {
        tsr_error("%s:%d: data.mix and data.train are both given: train on one dataset with "
                  "data.train, or on several with data.mix", c->mix_file, c->mix_line);
        c->errors++;
    }
    for (int i = 0; i < g->data.n_phases; i++) {
        const tsr_phase_config *ph = &g->data.phases[i], *prev = i ? ph - 1 : NULL;
        int comparable = prev && (ph->at_percent >= 0) == (prev->at_percent >= 0) &&
                         (ph->at_percent >= 0 || ph->at.unit == prev->at.unit);
        double a = ph->at_percent >= 0 ? ph->at_percent : ph->at.value;
        double b = prev ? (prev->at_percent >= 0 ? prev->at_percent : prev->at.value) : -1;
        if (comparable && a <= b) {
            tsr_error("%s: data.curriculum[%d] starts at or before data.curriculum[%d]: list the "
                      "phases in increasing `at`", c->mix_file, i, i - 1);
            c->errors++;
        }
    }
    if (size_parse(g->data.cache_limit, &c->cfg->data.cache_limit_bytes) != 0) {
        tsr_error("%sdata.cache_limit = \"%s\": expected a size such as \"500M\", \"20G\", "
                  "\"1.5T\" (powers of 1024) or \"0\" (no limit)",
                  where(c, "data.cache_limit", at, sizeof at), g->data.cache_limit);
        c->errors++;
    }
}

/* The cross-key rules (cross_rules above), each error with the key's file:line. */
static void validate(load_ctx *c) {
    validate_shapes(c);
    validate_options(c);
    validate_data(c);
}

/* ---- values a model's own files state (config_load_filled) ---- */

/* A size the model config derives when it is 0 (model.n_kv_head 0 = n_head ...): its resolved
 * value in *v, or 0 when key is not one of them or the config does not resolve. */
static int resolved_size(const tsr_model_config *m, const char *key, long *v) {
    tsr_model_dims d;
    const char *bad;
    char why[256];
    if (config_model_dims(m, &d, &bad, why, sizeof why) != 0) return 0;
    if (!strcmp(key, "model.n_kv_head")) *v = d.KVH;
    else if (!strcmp(key, "model.head_dim")) *v = d.hs;
    else if (!strcmp(key, "model.intermediate_size")) *v = d.F;
    else if (!strcmp(key, "model.moe_intermediate_size")) *v = d.FE;
    else return 0;
    return 1;
}

/* Does the recipe's value of k (in c->cfg) equal the fill's (in mine, the recipe's config with
 * every fill value assigned)? Floats within 1e-6 relative (a float32 written to JSON); derived
 * sizes resolved. */
static int same_value(const load_ctx *c, const cfgtab_key *k, const tsr_config *mine) {
    long a, b;
    if (resolved_size(&c->cfg->model, k->name, &a) && resolved_size(&mine->model, k->name, &b))
        return a == b;
    if (k->type == CFGK_FLOAT) {
        double x = *(const double *)((const char *)c->cfg + k->offset);
        double y = *(const double *)((const char *)mine + k->offset);
        return fabs(x - y) <= 1e-6 * fabs(y);
    }
    return memcmp((const char *)c->cfg + k->offset, (const char *)mine + k->offset, k->size) == 0;
}

/* A disagreement of the recipe's key k with fill entry e, appended to list. */
static void add_disagreement(const load_ctx *c, const cfgtab_key *k, const char *from,
                             const char *value, char *list, size_t cap) {
    char val[256], at[1200];
    size_t used = strlen(list);
    cfgtab_format(k, c->cfg, val, sizeof val);
    if (used + 1 < cap)
        snprintf(list + used, cap - used, "\n  %s%s = %s, but %s: --set %s=%s",
                 where(c, k->name, at, sizeof at), k->name, val, from, k->name, value);
}

/* The fill's values for the keys the recipe left out; every hard one it sets otherwise is listed
 * in one error (compared once all are filled, so that sizes resolve against the final model). */
static void apply_fill(load_ctx *c) {
    const tsr_config_fill *f = c->fill;
    tsr_config *mine = tsr_malloc(sizeof *mine); /* the recipe with every fill value */
    char why[256], *list = tsr_calloc(1, 16384);
    int differ = 0;
    *mine = *c->cfg;
    for (int j = 0; j < f->n; j++) {
        const cfgtab_key *k = cfgtab_find(f->kv[j].key);
        cfgtab_value v = {.kind = CFGV_TEXT, .s = f->kv[j].value};
        const char *err = k ? cfgtab_assign(k, mine, &v, why, sizeof why) : "no such key";
        if (err) { /* a value no model has: the source's fault */
            tsr_error("%s: %s gives %s = %s: %s", f->source, f->kv[j].from, f->kv[j].key,
                      f->kv[j].value, err);
            c->errors++;
        } else if (!c->given[key_index(k)]) {
            int i = key_index(k);
            cfgtab_assign(k, c->cfg, &v, why, sizeof why);
            c->present[i] = 1;
            c->line[i] = -2;
            c->file[i] = f->source;
        }
    }
    for (int j = 0; j < f->n && !c->errors; j++) {
        const cfgtab_key *k = cfgtab_find(f->kv[j].key);
        if (f->kv[j].soft || c->line[key_index(k)] == -2 || !c->given[key_index(k)]) continue;
        if (!same_value(c, k, mine)) {
            differ++;
            add_disagreement(c, k, f->kv[j].from, f->kv[j].value, list, 16384);
        }
    }
    for (int i = 0; i < cfgtab_n_keys; i++)
        if (c->line[i] == -2) c->given[i] = 1;
    if (differ) {
        tsr_error("%s describes the model, and the recipe sets %d key%s otherwise (leave the "
                  "model.* keys out of the recipe to take them from it, or start from weights of "
                  "the recipe's shape):%s", f->source, differ, differ > 1 ? "s" : "", list);
        c->errors++;
    }
    free(list);
    free(mine);
}

/* ---- public ---- */

/* config_load and its two variants: fill (a model's values) or base (the start instead of the
 * defaults) may be given. */
static int load(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                const tsr_config_fill *fill, const tsr_config *base) {
    load_ctx c;
    config_t lc;
    memset(&c, 0, sizeof c);
    if (cfgtab_n_keys > MAX_KEYS) tsr_die(TSR_EXIT_INTERNAL, "config: raise MAX_KEYS to %d", cfgtab_n_keys);
    if (base) *cfg = *base;
    else cfgtab_defaults(cfg);
    c.cfg = cfg;
    c.path = path;
    c.fill = fill;
    c.over = base != NULL;
    if (c.over) memset(c.present, 1, sizeof c.present);
    if (path && tsr_snprintf(cfg->source, sizeof cfg->source, "%s", path) != 0) {
        tsr_error("%.200s...: cannot read config: path longer than %zu bytes", path,
                  sizeof cfg->source - 1);
        return TSR_EXIT_USAGE;
    }
    config_init(&lc);
    int rc = path ? read_file(&c, &lc) : 0;
    if (rc == 0) {
        for (int i = 0; i < n_sets; i++) apply_set(&c, sets[i]);
        if (fill && c.errors == 0) apply_fill(&c);
        check_required(&c);
        if (c.errors == 0) validate(&c);
        rc = c.errors ? TSR_EXIT_USAGE : 0;
    }
    config_destroy(&lc);
    free(c.text_name);
    free(c.text);
    return rc;
}

int config_load(tsr_config *cfg, const char *path, const char *const *sets, int n_sets) {
    return load(cfg, path, sets, n_sets, NULL, NULL);
}

int config_load_filled(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                       const tsr_config_fill *fill) {
    return load(cfg, path, sets, n_sets, fill, NULL);
}

/* A key under one of the prefixes fixed[] with another value than base's: reported. */
static int pinned_differs(const cfgtab_key *k, const tsr_config *cfg, const tsr_config *base,
                          const char *path, const char *base_name, const char *const *fixed,
                          int n_fixed) {
    int pinned = 0;
    for (int j = 0; j < n_fixed; j++) pinned |= !strncmp(k->name, fixed[j], strlen(fixed[j]));
    char mine[256], theirs[256];
    cfgtab_format(k, cfg, mine, sizeof mine);
    cfgtab_format(k, base, theirs, sizeof theirs);
    if (!pinned || !strcmp(mine, theirs)) return 0;
    tsr_error("%s: %s = %s, but it comes from %s, which has %s: leave it out", path ? path : "--set",
              k->name, mine, base_name, theirs);
    return 1;
}

int config_load_over(tsr_config *cfg, const char *path, const char *const *sets, int n_sets,
                     const tsr_config *base, const char *base_name, const char *const *fixed,
                     int n_fixed) {
    int rc = load(cfg, path, sets, n_sets, NULL, base), bad = 0;
    for (int i = 0; !rc && i < cfgtab_n_keys; i++)
        bad += pinned_differs(&cfgtab_keys[i], cfg, base, path, base_name, fixed, n_fixed);
    return rc ? rc : bad ? TSR_EXIT_USAGE : 0;
}

/* The mixture-of-experts keys (docs/moe.md) into d (E, K, FE, S, LM; all 0 in a dense model, where
 * the structural MoE keys must keep their defaults). d->F is resolved already. */
static int moe_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                    size_t cap) {
    if (m->moe_experts == 0) {
        const struct { int set; const char *name; } dense[] = {
            {m->moe_intermediate_size != 0, "model.moe_intermediate_size"},
            {m->moe_shared_size != 0, "model.moe_shared_size"},
            {m->moe_every != 1, "model.moe_every"},
            {m->moe_z_loss_coef != 0, "model.moe_z_loss_coef"},
        };
        for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
            if (dense[i].set) {
                *key = dense[i].name;
                snprintf(why, cap, "%s is set, but model.moe_experts = 0 (a dense model): set "
                         "model.moe_experts to make the model a mixture of experts, or leave %s "
                         "out", dense[i].name, dense[i].name);
                return -1;
            }
        return 0;
    }
    if (m->moe_experts < 2) {
        *key = "model.moe_experts";
        snprintf(why, cap, "model.moe_experts = %d: a mixture needs at least 2 experts (0 = "
                 "a dense model)", m->moe_experts);
        return -1;
    }
    if (m->moe_top_k > m->moe_experts) {
        *key = "model.moe_top_k";
        snprintf(why, cap, "model.moe_top_k = %d is more than model.moe_experts = %d: each "
                 "token goes to top_k distinct experts", m->moe_top_k, m->moe_experts);
        return -1;
    }
    if (m->moe_every > m->n_layer) {
        *key = "model.moe_every";
        snprintf(why, cap, "model.moe_every = %d with model.n_layer = %d leaves no MoE layer "
                 "(layer l is MoE when l + 1 is a multiple of moe_every)", m->moe_every,
                 m->n_layer);
        return -1;
    }
    if (m->moe_intermediate_size > INT_MAX / 2 || m->moe_shared_size > INT_MAX / 2) {
        *key = m->moe_shared_size > INT_MAX / 2 ? "model.moe_shared_size"
                                                : "model.moe_intermediate_size";
        snprintf(why, cap, "%s is larger than %d (SwiGLU's fused gate and up projection is "
                 "twice as wide)", *key, INT_MAX / 2);
        return -1;
    }
    d->E = m->moe_experts;
    d->K = m->moe_top_k;
    d->FE = m->moe_intermediate_size > 0 ? m->moe_intermediate_size : d->F;
    d->S = m->moe_shared_size;
    d->LM = m->n_layer / m->moe_every;
    return 0;
}

/* the heads of config_model_dims: query and key/value heads, the head size and what it must
 * divide or be */
static int head_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                     size_t cap) {
    d->NH = m->n_head;
    d->KVH = m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
    *key = "model.n_head";
    if (m->head_dim > 0) {
        d->hs = m->head_dim;
    } else if (m->n_head > m->d_model) {
        snprintf(why, cap, "model.n_head = %d is larger than model.d_model = %d: the head size "
                 "d_model / n_head must be >= 1 (or set model.head_dim)", m->n_head, m->d_model);
        return -1;
    } else if (m->d_model % m->n_head != 0) {
        *key = "model.d_model";
        snprintf(why, cap, "model.d_model = %d is not divisible by model.n_head = %d: choose a "
                 "d_model that is a multiple of n_head (head size = d_model / n_head), or set "
                 "model.head_dim", m->d_model, m->n_head);
        return -1;
    } else {
        d->hs = m->d_model / m->n_head;
    }
    if (d->NH % d->KVH != 0 || d->KVH > d->NH) {
        *key = "model.n_kv_head";
        snprintf(why, cap, "model.n_kv_head = %d with model.n_head = %d: it must divide n_head "
                 "(and so be at most n_head): every key/value head serves the same number of "
                 "query heads, n_head / n_kv_head", m->n_kv_head, m->n_head);
        return -1;
    }
    if (((int64_t)d->NH + 2 * (int64_t)d->KVH) * d->hs > INT_MAX / 8) {
        *key = "model.head_dim";
        snprintf(why, cap, "model.head_dim = %d with %d heads and %d key/value heads makes a qkv "
                 "projection wider than %d", d->hs, d->NH, d->KVH, INT_MAX / 8);
        return -1;
    }
    if (m->pos == TSR_POS_ROPE && d->hs % 2 != 0) {
        *key = m->head_dim > 0 ? "model.head_dim" : "model.n_head";
        snprintf(why, cap, "with model.pos = \"rope\" the head size must be even (RoPE turns "
                 "pairs of dimensions); it is %d", d->hs);
        return -1;
    }
    return 0;
}

/* the dense MLP's width of config_model_dims: model.intermediate_size, else expansion_ratio x
 * d_model, a whole number */
static int mlp_width(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                     size_t cap) {
    if (m->intermediate_size > INT_MAX / 2) {
        *key = "model.intermediate_size";
        snprintf(why, cap, "model.intermediate_size = %d is larger than %d (SwiGLU's fused gate "
                 "and up projection is twice as wide)", m->intermediate_size, INT_MAX / 2);
        return -1;
    }
    if (m->intermediate_size > 0) {
        d->F = m->intermediate_size;
        return 0;
    }
    double hidden = m->expansion_ratio * m->d_model;
    if (hidden != floor(hidden) || hidden < 1 || hidden > INT_MAX / 2) {
        char r[64], h[64];
        cfgtab_format_double(r, sizeof r, m->expansion_ratio);
        cfgtab_format_double(h, sizeof h, hidden);
        *key = "model.expansion_ratio";
        snprintf(why, cap, "model.expansion_ratio = %s with model.d_model = %d gives an MLP "
                 "width of %s: choose values whose product is a whole number in [1, %d] (or "
                 "set model.intermediate_size)", r, m->d_model, h, INT_MAX / 2);
        return -1;
    }
    d->F = (int)hidden;
    return 0;
}

/* the norm's and RoPE scaling's settings that config_model_dims refuses together */
static int norm_rope_check(const tsr_model_config *m, const char **key, char *why, size_t cap) {
    if (m->norm == TSR_NORM_LAYERNORM && m->norm_eps != 1e-5) {
        char e[64];
        cfgtab_format_double(e, sizeof e, m->norm_eps);
        *key = "model.norm_eps";
        snprintf(why, cap, "model.norm_eps = %s with model.norm = \"layernorm\": LayerNorm's "
                 "eps is fixed at 1e-5 (norm_eps is RMSNorm's)", e);
        return -1;
    }
    if (m->pos == TSR_POS_ROPE && m->rope_scaling == TSR_ROPE_SCALING_LLAMA3 &&
        m->rope_high_freq_factor <= m->rope_low_freq_factor) {
        *key = "model.rope_high_freq_factor";
        snprintf(why, cap, "model.rope_high_freq_factor = %g is not above "
                 "model.rope_low_freq_factor = %g: Llama 3's scaling interpolates between the "
                 "two (its published values: 4 and 1)", m->rope_high_freq_factor,
                 m->rope_low_freq_factor);
        return -1;
    }
    return 0;
}

int config_model_dims(const tsr_model_config *m, tsr_model_dims *d, const char **key, char *why,
                      size_t cap) {
    memset(d, 0, sizeof *d);
    if (head_dims(m, d, key, why, cap) != 0) return -1;
    if (mlp_width(m, d, key, why, cap) != 0) return -1;
    if (moe_dims(m, d, key, why, cap) != 0) return -1;
    return norm_rope_check(m, key, why, cap);
}

static const char *const lora_target_names[TSR_LORA_COUNT] = {"q", "k", "v", "o", "gate",
                                                              "up", "down"};

const char *config_lora_target_name(int t) {
    return t >= 0 && t < TSR_LORA_COUNT ? lora_target_names[t] : "?";
}

int config_lora_targets(const tsr_model_config *m, const char *s, unsigned *mask, char *why,
                        size_t cap) {
    *mask = 0;
    const unsigned mlp = 1u << TSR_LORA_GATE | 1u << TSR_LORA_UP | 1u << TSR_LORA_DOWN;
    if (strcmp(s, "all-linear") == 0) { /* PEFT's name: every projection this model can adapt */
        *mask = (1u << TSR_LORA_COUNT) - 1;
        if (m->moe_experts > 0) *mask &= ~mlp;
        else if (m->mlp != TSR_MLP_SWIGLU) *mask &= ~(1u << TSR_LORA_GATE | 1u << TSR_LORA_UP);
        return 0;
    }
    const char *p = s;
    for (;;) {
        size_t n = strcspn(p, ",");
        while (n > 0 && *p == ' ') p++, n--;
        while (n > 0 && p[n - 1] == ' ') n--;
        int t = -1;
        for (int k = 0; k < TSR_LORA_COUNT && t < 0; k++)
            if (strlen(lora_target_names[k]) == n && strncmp(p, lora_target_names[k], n) == 0) t = k;
        if (t < 0) {
            snprintf(why, cap, "\"%.*s\" is not a target: expected \"all-linear\" or a "
                     "comma-separated list of q, k, v, o, gate, up, down",
                     (int)(n < 64 ? n : 64), p);
            return -1;
        }
        if (*mask & (1u << t)) {
            snprintf(why, cap, "\"%s\" is named twice", lora_target_names[t]);
            return -1;
        }
        *mask |= 1u << t;
        p += strcspn(p, ",");
        if (!*p) break;
        p++;
    }
    if (m->moe_experts > 0 && (*mask & mlp)) {
        snprintf(why, cap, "gate, up and down are not targets in a mixture-of-experts model yet "
                 "(the experts take no adapters): name attention targets (q, k, v, o) only");
        return -1;
    }
    if (m->mlp != TSR_MLP_SWIGLU && (*mask & (1u << TSR_LORA_GATE | 1u << TSR_LORA_UP))) {
        snprintf(why, cap, "gate and up need model.mlp = \"swiglu\" (a GELU MLP takes an adapter "
                 "on down only so far)");
        return -1;
    }
    return 0;
}

int config_actckpt_layers(const tsr_model_config *m, int *lo, int *n, const char **key, char *why,
                          size_t cap) {
    int ck = m->activation_checkpointing_layers, L = m->n_layer;
    const char *r = m->activation_checkpointing_range;
    *lo = 0, *n = 0;
    *key = "model.activation_checkpointing_layers";
    if (m->activation_checkpointing == TSR_ACTCKPT_NONE) return 0;
    if (r[0]) {
        long a, b;
        int used = 0;
        *key = "model.activation_checkpointing_range";
        if (ck != -1) {
            snprintf(why, cap, "model.activation_checkpointing_range = \"%s\" and "
                     "model.activation_checkpointing_layers = %d are both given: choose the first "
                     "N layers or a range", r, ck);
            return -1;
        }
        if (sscanf(r, "%ld-%ld%n", &a, &b, &used) != 2 || r[used] != '\0' || a < 0 || b < a ||
            b >= L || !isdigit((unsigned char)r[0])) {
            snprintf(why, cap, "model.activation_checkpointing_range = \"%s\" with model.n_layer "
                     "= %d: expected \"A-B\", layers A to B inclusive, 0 <= A <= B <= %d", r, L,
                     L - 1);
            return -1;
        }
        *lo = (int)a, *n = (int)(b - a + 1);
        return 0;
    }
    if (ck == 0 || ck < -1 || ck > L) {
        snprintf(why, cap, "model.activation_checkpointing_layers = %d with model.n_layer = %d: "
                 "checkpoint the first 1 .. %d layers, or -1 = all (or set "
                 "model.activation_checkpointing = \"none\")", ck, L, L);
        return -1;
    }
    *n = ck < 0 ? L : ck;
    return 0;
}

/* parallel.context = N: N divides the world and 2N the sequence (its 2N zig-zag chunks) */
static int check_context(const tsr_config *cfg, int world) {
    const long long N = cfg->context, T = cfg->seq_len;
    if (N > 1 && world % N != 0) {
        tsr_error("parallel.context = %lld does not divide the %d ranks: the ranks form a data x "
                  "context mesh of groups of %lld consecutive ranks; choose a divisor of %d",
                  N, world, N, world);
        return TSR_EXIT_USAGE;
    }
    if (N > 1 && T % (2 * N) != 0) {
        const long long lo = T / (2 * N) * 2 * N, hi = lo + 2 * N;
        if (lo > 0)
            tsr_error("seq_len = %lld is not divisible by 2 x parallel.context = %lld (each of the "
                      "%lld ranks of a context group holds 2 of the sequence's %lld chunks): the "
                      "nearest valid values are %lld and %lld", T, 2 * N, N, 2 * N, lo, hi);
        else
            tsr_error("seq_len = %lld is not divisible by 2 x parallel.context = %lld (each of the "
                      "%lld ranks of a context group holds 2 of the sequence's %lld chunks): the "
                      "nearest valid value is %lld", T, 2 * N, N, 2 * N, hi);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

int config_check_world(const tsr_config *cfg, int world) {
    if (world < 1) {
        tsr_error("world size %d: expected at least 1 rank", world);
        return TSR_EXIT_USAGE;
    }
    if (check_context(cfg, world)) return TSR_EXIT_USAGE;
    /* the batch is split over the data ranks: the world, or world / N under context parallelism
     * (a context group shares its sequences) */
    const int N = cfg->context > 1 ? (int)cfg->context : 1, D = world / N;
    char ranks[96];
    if (N > 1) snprintf(ranks, sizeof ranks, "%d data ranks (%d ranks / parallel.context = %d)", D,
                        world, N);
    else snprintf(ranks, sizeof ranks, "%d ranks", world);
    long long gb = cfg->global_batch, mb = cfg->micro_batch;
    if (gb % D != 0) {
        tsr_error("global_batch = %lld is not divisible by the %s: choose a global_batch that "
                  "is a multiple of %d (and of %d x micro_batch)", gb, ranks, D, D);
        return TSR_EXIT_USAGE;
    }
    if (mb > 0 && (gb / D) % mb != 0) { /* mb 0 = auto: a divisor is chosen at run time */
        tsr_error("per-rank batch %lld (global_batch %lld / %s) is not divisible by "
                  "micro_batch = %lld", gb / D, gb, ranks, mb);
        return TSR_EXIT_USAGE;
    }
    if (cfg->objective == TSR_OBJ_DPO && (gb / D) % 2 != 0) {
        tsr_error("per-rank batch %lld (global_batch %lld / %s) is odd: objective = \"dpo\" "
                  "gives each rank whole pairs; choose a global_batch that is a multiple of %d",
                  gb / D, gb, ranks, 2 * D);
        return TSR_EXIT_USAGE;
    }
    if (cfg->expert > 1 && world % cfg->expert != 0) {
        tsr_error("parallel.expert = %lld does not divide the %d ranks: expert parallelism splits "
                  "the ranks into groups of that many, each holding every expert once; choose a "
                  "divisor of %d", (long long)cfg->expert, world, world);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

/* ---- docs/config.md ---- */

static void md_cell(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', f);
        fputc(*s == '\n' ? ' ' : *s, f);
    }
}

static void md_table(FILE *f, const char *group, size_t glen) {
    static const char *const type_word[] = {"integer", "number", "boolean", "string", "enum", "duration"};
    _Static_assert(sizeof type_word / sizeof *type_word == CFGK_TYPE_COUNT, "type_word vs cfgtab_type");
    tsr_config def;
    cfgtab_defaults(&def);
    fprintf(f, "| key | type | default | accepted | description |\n|---|---|---|---|---|\n");
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const cfgtab_key *k = &cfgtab_keys[i];
        const char *dot = strchr(k->name, '.');
        if (group ? !(dot && (size_t)(dot - k->name) == glen && !strncmp(k->name, group, glen)) : dot != NULL)
            continue;
        char val[4200], acc[256];
        fprintf(f, "| `%s` | %s | ", k->name, type_word[k->type]);
        if (k->def) {
            cfgtab_format(k, &def, val, sizeof val);
            fputc('`', f);
            md_cell(f, val);
            fputc('`', f);
        } else {
            fprintf(f, "**required**, e.g. `");
            md_cell(f, k->example);
            fputc('`', f);
        }
        fprintf(f, " | ");
        md_cell(f, cfgtab_accepted(k, acc, sizeof acc));
        fprintf(f, " | ");
        md_cell(f, k->doc);
        fprintf(f, " |\n");
    }
}

void config_doc_markdown(FILE *f) {
    fprintf(f,
        "# Configuration keys\n\n"
        "<!-- Generated by `tessera config-doc` from the key table in src/config/config_table.c.\n"
        "     Do not edit; regenerate with: build/tessera config-doc > docs/config.md -->\n\n"
        "A run is one [libconfig](https://hyperrealm.github.io/libconfig/) file (`configs/*.cfg`)\n"
        "plus `--set key=value` overrides, applied in order after the file. Every key is typed,\n"
        "ranged and checked before any work starts: an unknown key, a wrong type, a value out of\n"
        "range or a missing required key stops the run with exit code 1, naming the file, line, key,\n"
        "value and what is accepted. The trainer writes the effective config (every key, in the syntax\n"
        "below, loadable as a config file) into the run directory as `config.cfg`; `--dry-run` prints it.\n\n"
        "## Syntax\n\n"
        "```\n"
        "# a comment\n"
        "seq_len = 1024;              # integer; beyond 32 bits write an L suffix: 3000000000L\n"
        "max_duration = \"10e9tok\";    # durations and enum values are strings\n"
        "model = {                    # a dotted key model.n_layer is written inside its group\n"
        "  n_layer = 12;\n"
        "  pos = \"learned\";\n"
        "  bias = true;\n"
        "};\n"
        "optim = { lr = 6e-4; };      # number keys take 6e-4, 0.0006 or 1; integer keys refuse 1.0\n"
        "```\n\n"
        "On the command line: `--set model.n_layer=24 --set optim.lr=3e-4 --set data.train=data/x`;\n"
        "strings, enum values and durations bare or in double quotes, booleans `true` / `false`.\n\n"
        "## Durations\n\n"
        "`<number><unit>` with no space, number >= 0 (decimal, exponent allowed):\n\n"
        "- `ba`: optimizer steps, a whole number: `100ba`;\n"
        "- `tok`: tokens; steps = ceil(tokens / (global_batch x seq_len)): `2e9tok`;\n"
        "- `ep`: epochs of data.train; steps = ceil(epochs x samples per epoch / global_batch):\n"
        "  `1ep`, `0.5ep`.\n\n"
        "An interval of `0ba` means never.\n\n"
        "## Keys\n\n### Top level\n\n");
    md_table(f, NULL, 0);
    int mix_done = 0;
    for (int i = 0; i < cfgtab_n_keys; i++) {
        const char *name = cfgtab_keys[i].name, *dot = strchr(name, '.');
        int seen = 0;
        for (int j = 0; dot && j < i; j++)
            if (strncmp(cfgtab_keys[j].name, name, (size_t)(dot - name) + 1) == 0) seen = 1;
        if (!dot || seen) continue;
        fprintf(f, "\n### `%.*s = { ... };`\n\n", (int)(dot - name), name);
        md_table(f, name, (size_t)(dot - name));
        if (!mix_done && !strncmp(name, "data.", 5)) cfgmix_doc(f), mix_done = 1;
    }
    cfgicl_doc(f);
    fprintf(f, "\n## Checks across keys\n\n");
    for (size_t i = 0; i < sizeof cross_rules / sizeof *cross_rules; i++)
        fprintf(f, "- %s\n", cross_rules[i]);
}

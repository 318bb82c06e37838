/* hf_export.c — a tessera model -> a transformers directory (hf.h, docs/hf.md).
 *
 *   OUT/model.safetensors   the weights (F32 or BF16), names and layouts of hf_map.c; above the
 *                           shard limit instead model-0000k-of-0000n.safetensors (tensors in
 *                           transformers' state-dict order, a new file when the next tensor would
 *                           pass the limit, as save_pretrained splits) + model.safetensors.index.json
 *   OUT/config.json         GPT2Config, MptConfig, LlamaConfig, ..., MixtralConfig, Qwen3MoeConfig
 *                           keys (hf_config.c)
 *   OUT/generation_config.json  bos/eos ids; a byte copy of the one beside a tokenizer.json if any
 *   OUT/vocab.json          GPT-2-format tokenizer only: a byte copy of encoder.json (or of the
 *                           vocab.json of a directory exported so: tokenizer_find_files)
 *   OUT/merges.txt          ... of vocab.bpe (merges.txt)
 *   OUT/tokenizer_config.json  GPT2Tokenizer, model_max_length, <|endoftext|> as bos/eos/unk
 *   OUT/tokenizer.json      Hugging Face tokenizer.json (Llama 3, Qwen, ...) only: a byte copy, with
 *                           the tokenizer_config.json found beside it (byte copy) when there is one
 * Each file is written atomically; files already in OUT with other names are left alone, except
 * that a sharded export removes a model.safetensors and a single-file one an index (transformers
 * would load the stale one).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"
#include "progress.h"
#include "hf/hf.h"
#include "hf/hf_family.h"
#include "hf/hf_gptoss.h"
#include "chat/chat_config.h"
#include "tokenizer/hf_tok.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_eos.h"
#include "chat/gen_chat.h"

typedef struct tok_files {
    int present;          /* tokenizer files to copy */
    int hf;               /* 1: a tokenizer.json (file `json`, and `config` when non-empty) */
    char vocab_file[4200], merges_file[4200]; /* GPT-2 format: encoder.json or vocab.json; vocab.bpe
                                               * or merges.txt (tokenizer_find_files) */
    char json[4096], config[4096];
    char jinja[4200];     /* the chat_template.jinja beside config (transformers reads it in its
                           * place: chat_config.h), or "" */
    char gen[4096];       /* generation_config.json beside the tokenizer.json, or "" */
    long eot;             /* end of sequence: the id of <|endoftext|> or of the config's eos_token; -1 */
    long bos;             /* beginning of sequence: eot for GPT-2, the config's bos_token; -1 */
    long turn;            /* the chat template's end of turn when it is another token than eot
                           * (Llama 3's <|eot_id|> beside <|end_of_text|>); -1 */
    uint32_t vocab;
    char note[600];       /* why none are written */
    char extra[400];      /* the special ids beyond the model's rows, said when written, or "" */
} tok_files;

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* The id that ends an assistant turn of the chat template beside the tokenizer (what `tessera
 * generate --chat` stops at: gen_chat_end_of_turn) when it is not eot, else -1. */
static long end_of_turn(const char *spec, const tsr_tokenizer *tok, long eot) {
    gen_chat gc;
    jinja_budget budget = {0};
    tsr_log_mute(1); /* a template that does not load is the copied files' business, not ours */
    int rc = gen_chat_open(&gc, spec, tok, 0, NULL, &budget);
    tsr_log_mute(0);
    uint32_t id = rc ? UINT32_MAX : gen_chat_end_of_turn(&gc, tok, NULL, "Hello");
    gen_chat_free(&gc);
    return id == UINT32_MAX || (long)id == eot ? -1 : (long)id;
}

/* A tokenizer.json's files: the JSON itself (spec, or spec/tokenizer.json for a directory) and the
 * tokenizer_config.json beside it if any; the end-of-sequence id is that config's eos_token (else
 * <|endoftext|>, else none), so config.json's eos_token_id is the one transformers' tokenizer has. */
static int resolve_hf(const char *spec, const tsr_tokenizer *tok, tok_files *t) {
    struct stat st;
    int isdir = stat(spec, &st) == 0 && S_ISDIR(st.st_mode);
    int have_cfg = chat_config_find(spec, t->config, sizeof t->config);
    if (have_cfg < 0 ||
        tsr_snprintf(t->json, sizeof t->json, isdir ? "%s/tokenizer.json" : "%s", spec)) {
        tsr_error("export: the tokenizer path \"%.200s...\" is too long", spec);
        return TSR_EXIT_USAGE;
    }
    chat_config cc;
    jinja_error e;
    if (!have_cfg) t->config[0] = 0;
    if (!have_cfg || chat_config_template_file(t->config, t->jinja, sizeof t->jinja) != 1)
        t->jinja[0] = 0;
    if (have_cfg && chat_config_load(t->config, &cc, &e)) {
        tsr_error("export: %s", e.msg);
        return TSR_EXIT_DATA;
    }
    const char *eos = have_cfg ? chat_config_token(&cc, "eos_token") : NULL;
    uint32_t id = tokenizer_eos_id(tok, eos, TOKENIZER_EOS_CONFIG);
    t->eot = id == UINT32_MAX ? -1 : (long)id;
    const char *bos = have_cfg ? chat_config_token(&cc, "bos_token") : NULL;
    id = bos ? tokenizer_special_id(tok, bos) : UINT32_MAX;
    t->bos = id == UINT32_MAX ? -1 : (long)id;
    if (have_cfg) chat_config_free(&cc);
    t->turn = end_of_turn(spec, tok, t->eot);
    /* generation_config.json beside tokenizer.json: the original model's (eos lists, sampling) */
    const char *slash = strrchr(t->json, '/');
    int dir_len = slash ? (int)(slash - t->json) : 1;
    snprintf(t->gen, sizeof t->gen, "%.*s/generation_config.json", dir_len, slash ? t->json : ".");
    if (stat(t->gen, &st) != 0 || !S_ISREG(st.st_mode)) t->gen[0] = 0;
    t->hf = 1;
    return t->gen[0] ? fs_fits(t->gen, GEN_CONFIG_MAX) : 0; /* refused before a file is written */
}

/* A GPT-2-format tokenizer's files: those of the directory dir ("gpt2"'s, or the spec). */
static void resolve_gpt2(const char *dir, tok_files *t) {
    tokenizer_files f;
    tokenizer_find_files(dir, &f); /* (the tokenizer was just loaded from them) */
    snprintf(t->vocab_file, sizeof t->vocab_file, "%s", f.vocab);
    snprintf(t->merges_file, sizeof t->merges_file, "%s", f.merges);
}

/* A tokenizer with more ids than the model has rows (N > V): each id of [V, N) must be a special
 * token, which text never encodes to, so the model never saw it and cannot produce it (Gemma 3's
 * <image_soft_token>: the published 262,145 ids over 262,144 rows; tessera-train refuses data
 * holding an id >= V); said in t->extra. An ordinary token there means another model's tokenizer
 * (exit 1). */
static int tokenizer_fits(const char *spec, const tsr_tokenizer *tok, const tsr_model *m,
                          tok_files *t) {
    const uint32_t V = (uint32_t)m->V, N = t->vocab;
    char a[96], b[96];
    for (uint32_t id = V; id < N; id++)
        if (!tokenizer_special_of(tok, id)) {
            tsr_error("export: the tokenizer \"%s\" has %u tokens, the model's vocabulary only %d "
                      "(model.vocab_size), and its id %u%s is an ordinary token (text encodes to "
                      "it): it is not this model's tokenizer; give the right one with --tokenizer, "
                      "or --tokenizer none", spec, N, m->V, id, tokenizer_id_label(tok, id, a, sizeof a));
            return TSR_EXIT_USAGE;
        }
    if (N > V)
        snprintf(t->extra, sizeof t->extra, "; %u id%s beyond the model's %u rows, %u%s%s%s, "
                 "special tokens the model cannot produce (its data never held them), kept as "
                 "the tokenizer has them", N - V, N - V > 1 ? "s" : "", V, V,
                 tokenizer_id_label(tok, V, a, sizeof a), N - V > 1 ? " .. " : "",
                 N - V > 1 ? tokenizer_id_label(tok, N - 1, b, sizeof b) : "");
    return 0;
}

/* spec: "gpt2", a directory holding a tokenizer (tokenizer_find_files: GPT-2's encoder.json +
 * vocab.bpe or vocab.json + merges.txt, or a tokenizer.json), a Hugging Face tokenizer.json, a
 * tessera tokenizer file, "" or "none". */
static int resolve_tokenizer(const char *spec, const tsr_model *m, tok_files *t) {
    memset(t, 0, sizeof *t);
    t->eot = t->bos = t->turn = -1;
    if (!spec || !*spec || !strcmp(spec, "none")) {
        snprintf(t->note, sizeof t->note, "the checkpoint's config has no data.tokenizer%s",
                 spec && *spec ? " (--tokenizer none)" : "");
        return 0;
    }
    struct stat st;
    char dir[4096];
    if (!strcmp(spec, "gpt2")) {
        int rc = tokenizer_gpt2_dir(dir, sizeof dir);
        if (rc) {
            tsr_error("export: the tokenizer \"gpt2\" (above) cannot be read; give another with "
                      "--tokenizer DIR, or export without tokenizer files: --tokenizer none");
            return rc;
        }
    } else if (stat(spec, &st) == 0 && !S_ISDIR(st.st_mode) && !has_suffix(spec, ".json")) {
        snprintf(t->note, sizeof t->note, "data.tokenizer = \"%.400s\" is a tessera tokenizer file, "
                 "which transformers cannot load (GPT-2-format vocab.json + merges.txt are written "
                 "for \"gpt2\" or a directory of GPT-2's files)", spec);
        return 0;
    } else {
        snprintf(dir, sizeof dir, "%s", spec);
    }
    tsr_tokenizer *tok = NULL;
    int rc = tokenizer_open(&tok, spec);
    if (rc) {
        tsr_error("export: the tokenizer \"%s\" (above) cannot be read; give another with "
                  "--tokenizer DIR, or export without tokenizer files: --tokenizer none", spec);
        return rc;
    }
    t->vocab = tokenizer_vocab_size(tok);
    uint32_t eot = tokenizer_eos_id(tok, NULL, TOKENIZER_EOS_CONFIG); /* GPT-2: <|endoftext|> */
    t->eot = t->bos = eot == UINT32_MAX ? -1 : (long)eot;
    if (tokenizer_is_hf(tok)) rc = resolve_hf(spec, tok, t);
    else resolve_gpt2(dir, t);
    if (!rc) rc = tokenizer_fits(spec, tok, m, t);
    tokenizer_free(tok);
    if (rc) return rc;
    t->present = 1;
    return 0;
}

/* Removes path if it exists (a stale file of an earlier export: another layout, a chat template
 * this export's tokenizer does not have), saying so. */
static void remove_stale(const char *path) {
    if (unlink(path) == 0) printf("removed %s (left by an earlier export)\n", path);
}

/* from's bytes into to; max_bytes: the bound its reader holds the file to (the tokenizer's files
 * were read through it already; generation_config.json is checked in resolve_hf) */
static int copy_file(const char *from, const char *to, size_t max_bytes) {
    char *data;
    size_t n;
    int rc = fs_read_all(from, max_bytes, &data, &n);
    if (!rc) rc = hf_write_file(to, data, n);
    free(data);
    return rc;
}

static int write_tokenizer(const char *out_dir, const tok_files *t, const tsr_model *m) {
    char to[4300];
    snprintf(to, sizeof to, "%s/chat_template.jinja", out_dir);
    if (t->hf && t->jinja[0]) TSR_CHECK(copy_file(t->jinja, to, CHAT_TEMPLATE_MAX));
    else remove_stale(to); /* transformers would read it in place of the written config's template */
    if (t->hf) {
        snprintf(to, sizeof to, "%s/tokenizer.json", out_dir);
        TSR_CHECK(copy_file(t->json, to, HF_TOKJSON_MAX));
        if (!t->config[0]) return 0;
        snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
        return copy_file(t->config, to, CHAT_CONFIG_MAX);
    }
    snprintf(to, sizeof to, "%s/vocab.json", out_dir);
    TSR_CHECK(copy_file(t->vocab_file, to, GPT2_FILE_MAX));
    snprintf(to, sizeof to, "%s/merges.txt", out_dir);
    TSR_CHECK(copy_file(t->merges_file, to, GPT2_FILE_MAX));
    char text[1024];
    const char *eot = "\"<|endoftext|>\"";
    int k = snprintf(text, sizeof text,
                     "{\n  \"tokenizer_class\": \"GPT2Tokenizer\",\n  \"model_max_length\": %d,\n"
                     "  \"add_prefix_space\": false,\n  \"add_bos_token\": false,\n"
                     "  \"errors\": \"replace\",\n  \"bos_token\": %s,\n  \"eos_token\": %s,\n"
                     "  \"unk_token\": %s\n}\n",
                     m->maxT, t->eot >= 0 ? eot : "null", t->eot >= 0 ? eot : "null",
                     t->eot >= 0 ? eot : "null");
    snprintf(to, sizeof to, "%s/tokenizer_config.json", out_dir);
    return hf_write_file(to, text, (size_t)k);
}

/* generation_config.json: the tokenizer's own when it has one, else its bos/eos ids. */
static int write_generation_config(const char *out_dir, const tok_files *t) {
    char path[4300], text[256];
    snprintf(path, sizeof path, "%s/generation_config.json", out_dir);
    if (t->present && t->gen[0]) return copy_file(t->gen, path, GEN_CONFIG_MAX);
    int k = snprintf(text, sizeof text, "{\n  \"_from_model_config\": true");
    if (t->present && t->bos >= 0) k += snprintf(text + k, sizeof text - (size_t)k, ",\n  \"bos_token_id\": %ld", t->bos);
    if (t->present && t->eot >= 0 && t->turn >= 0) /* every token that ends a turn */
        k += snprintf(text + k, sizeof text - (size_t)k, ",\n  \"eos_token_id\": [%ld, %ld]", t->eot, t->turn);
    else if (t->present && t->eot >= 0)
        k += snprintf(text + k, sizeof text - (size_t)k, ",\n  \"eos_token_id\": %ld", t->eot);
    k += snprintf(text + k, sizeof text - (size_t)k, "\n}\n");
    return hf_write_file(path, text, (size_t)k);
}

/* The shard limit: o->max_shard, else $TSR_HF_MAX_SHARD (bytes, for tests), else 5 GB. */
static int shard_limit(const hf_export_opts *o, uint64_t *max) {
    const char *e = getenv("TSR_HF_MAX_SHARD");
    *max = o->max_shard ? o->max_shard : HF_MAX_SHARD_DEFAULT;
    if (o->max_shard || !e || !*e) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(e, &end, 10);
    if (errno || *end || v == 0 || e[0] == '-') {
        tsr_error("export: TSR_HF_MAX_SHARD = \"%s\": expected a positive number of bytes", e);
        return TSR_EXIT_USAGE;
    }
    *max = v;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* model.safetensors.index.json: total bytes and which file holds each tensor, names sorted (as
 * transformers writes it: json.dumps(..., indent=2, sort_keys=True)). */
static int write_index(const char *path, const st_tensor *st, const int *shard, int n, int nshards,
                       uint64_t total) {
    const st_tensor **p = tsr_malloc((size_t)n * sizeof *p);
    for (int k = 0; k < n; k++) p[k] = &st[k];
    qsort(p, (size_t)n, sizeof *p, by_name);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) tsr_die(TSR_EXIT_INTERNAL, "open_memstream: %s", strerror(errno));
    fprintf(f, "{\n  \"metadata\": {\n    \"total_size\": %" PRIu64 "\n  },\n  \"weight_map\": {\n", total);
    for (int k = 0; k < n; k++)
        fprintf(f, "    \"%s\": \"model-%05d-of-%05d.safetensors\"%s\n", p[k]->name,
                shard[p[k] - st] + 1, nshards, k + 1 < n ? "," : "");
    fprintf(f, "  }\n}\n");
    fclose(f);
    int rc = hf_write_file(path, text, len);
    free(text);
    free(p);
    return rc;
}

/* The weights: one file, or shards of at most max bytes each (a tensor larger than max alone). */
static int write_weights(const char *out_dir, const st_tensor *st, int n, const char *source,
                         uint64_t max, uint64_t *total, int *nshards) {
    int *shard = tsr_malloc((size_t)n * sizeof *shard), s = 0, rc = 0;
    uint64_t cur = 0;
    *total = 0;
    for (int k = 0; k < n; k++) {
        uint64_t b = st_dtype_size(st[k].dtype);
        for (int d = 0; d < st[k].ndim; d++) b *= (uint64_t)st[k].shape[d];
        if (cur > 0 && cur + b > max) s++, cur = 0;
        shard[k] = s;
        cur += b;
        *total += b;
    }
    *nshards = s + 1;
    st_kv meta[] = {{"format", "pt"}, {"producer", "tessera ckpt export --format hf"},
                    {"source", source ? source : ""}};
    char path[4300];
    st_tensor *part = tsr_malloc((size_t)n * sizeof *part);
    tsr_progress p;
    snprintf(path, sizeof path, "export: %s", out_dir);
    tsr_progress_begin(&p, path, (uint64_t)*nshards, "safetensors files written");
    for (int j = 0; j < *nshards && !rc; j++) {
        int m = 0;
        for (int k = 0; k < n; k++)
            if (shard[k] == j) part[m++] = st[k];
        if (*nshards == 1) snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
        else snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", out_dir, j + 1, *nshards);
        rc = st_save(path, part, m, meta, (int)(sizeof meta / sizeof meta[0]));
        tsr_progress_tick(&p, (uint64_t)j + 1);
    }
    snprintf(path, sizeof path, "%s/model.safetensors%s", out_dir, *nshards == 1 ? ".index.json" : "");
    if (!rc) remove_stale(path);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", out_dir);
    if (!rc && *nshards > 1) rc = write_index(path, st, shard, n, *nshards, *total);
    free(part);
    free(shard);
    return rc;
}

/* generation_config.json and the tokenizer's files, each said on stdout. */
static int write_tokenizer_files(const char *out_dir, const tok_files *tk, const tsr_model *m) {
    TSR_CHECK(write_generation_config(out_dir, tk));
    printf("wrote %s/generation_config.json%s\n", out_dir,
           tk->present && tk->gen[0] ? ": a byte copy of the one beside the tokenizer" : "");
    if (!tk->present) {
        printf("no tokenizer files written: %s\n", tk->note);
        return 0;
    }
    TSR_CHECK(write_tokenizer(out_dir, tk, m));
    if (tk->hf)
        printf("wrote %s/tokenizer.json%s%s: byte copies of %s%s%s%s%s (%u tokens, eos_token_id "
               "%ld%s)\n", out_dir, tk->config[0] ? ", tokenizer_config.json" : "",
               tk->jinja[0] ? ", chat_template.jinja" : "", tk->json, tk->config[0] ? ", " : "",
               tk->config, tk->jinja[0] ? ", " : "", tk->jinja, tk->vocab, tk->eot, tk->extra);
    else
        printf("wrote %s/vocab.json, merges.txt, tokenizer_config.json: GPT-2 BPE from %s and %s "
               "(%u tokens%s%s)\n", out_dir, tk->vocab_file, tk->merges_file, tk->vocab,
               tk->eot >= 0 ? ", <|endoftext|> = bos/eos" : "", tk->extra);
    return 0;
}

/* An interleaved tensor (hf_tensor.groups) joined into HF's row order (malloc'd). */
static float *join_runs(const tsr_model *m, const hf_tensor *t) {
    float *x = tsr_malloc(t->numel * sizeof *x);
    size_t at, hf, len;
    for (int i = 0; !hf_tensor_runs(t, i, &at, &hf, &len); i++)
        memcpy(x + hf, m->params + at, len * sizeof *x);
    return x;
}

int hf_export_check_opts(const hf_export_opts *o) {
    const hf_family *want = o->arch ? hf_family_named(o->arch) : NULL;
    uint64_t max_shard;
    if (o->arch && (!want || !want->rope)) {
        char rope[512];
        hf_family_list(rope, sizeof rope, 1, 0, ", ");
        tsr_error("export --format hf: --arch %s (accepted: %s; GPT-2 and MPT follow from "
                  "model.pos)", o->arch, rope);
        return TSR_EXIT_USAGE;
    }
    return shard_limit(o, &max_shard);
}

int hf_exportable(const tsr_model *m, char *why, size_t cap) {
    const hf_family *f;
    return hf_family_for(m, NULL, &f, why, cap);
}

int hf_export(const tsr_model *m, const tsr_config *cfg, const char *out_dir,
              const hf_export_opts *o) {
    const hf_family *a, *want = o->arch ? hf_family_named(o->arch) : NULL;
    char why[512], path[4300];
    TSR_CHECK(hf_export_check_opts(o));
    if (hf_family_for(m, want, &a, why, sizeof why)) {
        tsr_error("export --format hf: %s; this model has no transformers equivalent", why);
        return TSR_EXIT_USAGE;
    }
    if (o->dtype != ST_F32 && o->dtype != ST_BF16)
        tsr_die(TSR_EXIT_INTERNAL, "hf_export: dtype %s (F32 or BF16 only)", st_dtype_name(o->dtype));
    /* transformers has no document mask for these classes: same weights, plain causal model */
    if (m->cfg.attn_mask == TSR_MASK_DOCUMENT)
        tsr_warn("export --format hf: model.attn_mask = \"document\" exports as a plain causal %s: "
                 "it computes the same as tessera only on inputs of one document (no "
                 "model.eot_token = %d before the last position)", a->class_name,
                 m->cfg.eot_token);
    tok_files tk;
    uint64_t max_shard, bytes;
    shard_limit(o, &max_shard); /* checked above */
    TSR_CHECK(resolve_tokenizer(o->tokenizer ? o->tokenizer : cfg->data.tokenizer, m, &tk));
    if (tsr_snprintf(path, sizeof path, "%s/model.safetensors", out_dir) || fs_make_parents(path) != 0) {
        tsr_error("%s: cannot create the output directory", out_dir);
        return TSR_EXIT_DATA;
    }

    int n, nshards;
    hf_tensor *tab = a->ops->table(m, a, &n);
    st_tensor *st = tsr_calloc((size_t)n, sizeof *st);
    float **joined = tsr_calloc((size_t)n, sizeof *joined); /* interleaved tensors, gathered */
    for (int k = 0; k < n; k++) {
        st[k].name = tab[k].name;
        st[k].dtype = o->dtype;
        st[k].ndim = tab[k].ndim;
        for (int d = 0; d < tab[k].ndim; d++) st[k].shape[d] = tab[k].shape[d];
        st[k].src = tab[k].present ? m->params + tab[k].offset : NULL; /* absent bias: zeros */
        if (tab[k].groups) st[k].src = joined[k] = join_runs(m, &tab[k]);
        st[k].transpose = tab[k].transpose;
        st[k].add = -tab[k].add; /* Gemma's norms: HF's w = tessera's weight - 1 */
        if (tab[k].experts) /* its permutation (transposes included) */
            st[k].index = hf_gptoss_src_index, st[k].ctx = &tab[k], st[k].transpose = 0;
    }
    int rc = write_weights(out_dir, st, n, o->source, max_shard, &bytes, &nshards);
    for (int k = 0; k < n; k++) free(joined[k]);
    free(joined);
    free(st);
    free(tab);
    if (rc) return rc;
    if (a->norm_add != 0.0f)
        printf("%s's RMSNorm weights are w of (1 + w): written as tessera's norm weight - %g\n",
               a->class_name, a->norm_add);
    if (nshards == 1)
        printf("wrote %s: %d tensors, %.1f MB of %s (%s; wte: the %d real vocabulary rows of %d)\n",
               path, n, (double)bytes / 1e6, st_dtype_name(o->dtype), a->class_name, m->V, m->Vp);
    else
        printf("wrote %s/model-{00001..%05d}-of-%05d.safetensors and model.safetensors.index.json: "
               "%d tensors, %.1f MB of %s in %d shards of at most %.1f MB (%s)\n", out_dir, nshards,
               nshards, n, (double)bytes / 1e6, st_dtype_name(o->dtype), nshards,
               (double)max_shard / 1e6, a->class_name);

    snprintf(path, sizeof path, "%s/config.json", out_dir);
    TSR_CHECK(hf_config_write(path, m, a, o->dtype == ST_BF16 ? "bfloat16" : "float32",
                              tk.present ? tk.bos : -1, tk.present ? tk.eot : -1));
    printf("wrote %s: model_type \"%s\", %d layers, d_model %d, %d heads (%d key/value, size %d), "
           "vocab %d, %s %d\n", path, a->model_type, m->L, m->C, m->NH, m->KVH, m->hs, m->V,
           a->names->context,
           m->maxT);
    TSR_CHECK(write_tokenizer_files(out_dir, &tk, m));
    printf("load it with: transformers.%s.from_pretrained(\"%s\")\n", a->class_name, out_dir);
    return 0;
}

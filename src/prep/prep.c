/* prep.c — `tessera prep`: text files and JSON Lines to the datasets OUT/train and OUT/val.
 *
 * Phases: parse options -> list the inputs (directories walked recursively in byte order) ->
 * detect each file's format -> load the tokenizer -> stream the inputs in batches: the reader
 * cuts a batch into items (a document or a JSONL line), OpenMP threads parse and tokenize the
 * items, then this thread appends them to the writers in input order (with --pack through the
 * packers of prep_pack.c, which place whole examples into sample windows, and the two examples
 * of a preference pair into two windows of their own) -> close and rename.
 * Results are consumed in input order and the train/val split is a hash of (seed, document
 * number), so the output is byte-identical for any --threads. Everything is staged in OUT.tmp and
 * renamed to OUT at the end: an error leaves nothing at OUT; OUT.lock keeps a second prep into
 * the same OUT out from the start (exit 2). Usage and formats: docs/prep.md.
 */
#include "prep/prep.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "fsutil.h"
#include "data/data.h"
#include "json.h"
#include "prep/prep_doc.h"
#include "prep/prep_pack.h"
#include "runlock.h"
#include "prep/prep_prompts.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_eos.h"

#define DEFAULT_SHARD_TOKENS (1ull << 27) /* as tessera shard: 256 MiB of uint16 tokens */
#define BATCH_BYTES (4u << 20)            /* input bytes per parallel batch */
#define BATCH_ITEMS 16384                 /* items per parallel batch */
#define PART_BYTES (1u << 20) /* a text file is read, and a longer document tokenized, in parts of
                                 so many bytes ($TSR_PREP_PART_BYTES for tests: read_knobs) */
#define MAX_REPORTED 10                   /* bad lines reported one by one */
#define DETECT_LINES 1000                 /* lines read to detect a JSONL file's kind */
#define SPLIT_STREAM 0x7072657053504c54ull /* "prepSPLT": the train/val split's random stream */
#define PROGRESS_TTY_S 0.25               /* redraw interval of the progress bar */
#define PROGRESS_LOG_S 5.0                /* interval of the plain lines ($TSR_PREP_PROGRESS_S) */

static const char *const fmt_names[] = {"auto", "text", "jsonl", "sft", "chat", "preference",
                                        "prompts"};
_Static_assert(sizeof fmt_names / sizeof fmt_names[0] == FMT_COUNT, "format names");

/* ================================ options ================================ */

static const cli_opt prep_opts[] = {
    {"out", 'o', "DIR", "directory to create, holding the datasets DIR/train and DIR/val"},
    {"tokenizer", 't', "SPEC", "gpt2, a directory with encoder.json + vocab.bpe, a Hugging Face "
                               "tokenizer.json (or its directory), or a tessera tokenizer file "
                               "(default gpt2)"},
    {"format", 'f', "FMT", "auto|text|jsonl|sft|chat|preference|prompts (default auto: by "
                           "extension and first line; never preference or prompts, which need "
                           "--pack)"},
    {"val-fraction", CLI_NO_SHORT('v'), "F", "fraction of documents for DIR/val, 0..1; 0 = no val (default 0.01)"},
    {"seed", 'S', "SEED", "seed of the train/val split (default 1)"},
    {"bos", CLI_NO_SHORT('b'), NULL, "put <|endoftext|> before each document too"},
    {"no-eos", 'E', NULL, "do not put <|endoftext|> after each document"},
    {"target-prompts", CLI_NO_SHORT('P'), NULL, "sft/chat/preference: every token is a target "
                                               "(mask 1), prompts too"},
    {"chat-template", CLI_NO_SHORT('T'), "SPEC", "chat/preference: auto (default: the "
                      "chat_template of the tokenizer_config.json beside a tokenizer.json), a "
                      "tokenizer_config.json, or none (the \"ROLE: content\" format; preference: "
                      "the sft form)"},
    {"strict", 'x', NULL, "stop at the first bad JSONL line (exit 2, nothing written)"},
    {"doc-sep", CLI_NO_SHORT('d'), "SEP", "text files: split documents at SEP (escapes \\n \\t \\r \\\\), "
                            "e.g. '\\n\\n'; default: one file = one document"},
    {"shard-tokens", CLI_NO_SHORT('s'), "N", "tokens per shard file (default 134217728)"},
    {"pack", CLI_NO_SHORT('p'), "T", "sft/chat: whole examples in each sample of seq_len T, padded (mask 0); "
                       "preference: one example per sample, chosen then rejected; train with "
                       "seq_len = T"},
    CHAT_BUDGET_OPTS,
    {"threads", 'j', "N", "tokenizer threads (default: OpenMP's, i.e. the cores)"},
    {"quiet", 'q', NULL, "no progress and no summary"},
    {"help", 'h', NULL, "show this help"},
};
#define N_OPTS ((int)(sizeof prep_opts / sizeof prep_opts[0]))

static const char *const prep_summary =
    "Tokenizes text files, directories of them (recursive) and JSON Lines files ({\"text\"},\n"
    "{\"prompt\",\"response\"} or {\"messages\":[{\"role\",\"content\"}]}; with\n"
    "--format preference --pack T, {\"prompt\",\"chosen\",\"rejected\"}) into the datasets\n"
    "DIR/train and DIR/val (docs/prep.md). Exit 0 ok, 1 usage error, 2 data or I/O error.";

const cli_cmd prep_cli = {"prep", "INPUT...", prep_summary, prep_opts, N_OPTS, NULL};

static int usage_error(const char *msg, const char *detail) {
    return cli_usage_error(&prep_cli, msg, detail);
}

typedef struct prep_args {
    const char *out, *tokenizer, *chat_template; /* chat_template: NULL = auto */
    prep_format format;
    double val_fraction;
    int64_t seed, shard_tokens, threads, pack; /* pack: T of --pack, 0 = not packed */
    int bos, no_eos, target_prompts, strict, quiet;
    jinja_budget budget; /* --template-steps, --template-memory (0: the defaults) */
    char doc_sep[64];
    size_t doc_sep_len;
} prep_args;

static int opt_int(int ch, const char *val, int64_t lo, int64_t hi, int64_t *out) {
    return cli_number(&prep_cli, ch, val, lo, hi, out);
}

/* --doc-sep with the escapes \n \t \r \\ decoded. */
static int parse_sep(prep_args *a, const char *val) {
    size_t k = 0;
    for (const char *s = val; *s; s++) {
        char c = *s;
        if (c == '\\') {
            switch (*++s) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '\\': c = '\\'; break;
            default: return usage_error("--doc-sep: unknown escape (use \\n \\t \\r \\\\) in ", val);
            }
        }
        if (k + 1 >= sizeof a->doc_sep) return usage_error("--doc-sep: longer than 63 bytes: ", val);
        a->doc_sep[k++] = c;
    }
    if (!k) return usage_error("--doc-sep: empty separator", NULL);
    a->doc_sep_len = k;
    return 0;
}

static int on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    prep_args *a = ctx;
    switch (ch) {
    case 'o': a->out = val; return 0;
    case 't': a->tokenizer = val; return 0;
    case 'f':
        for (int k = 0; k < FMT_COUNT; k++)
            if (!strcmp(val, fmt_names[k])) {
                a->format = (prep_format)k;
                return 0;
            }
        return usage_error("--format: expected auto, text, jsonl, sft, chat, preference or "
                           "prompts, found ",
                           val);
    case CLI_NO_SHORT('v'):
        if (tsr_parse_f64(val, 0.0, 1.0, &a->val_fraction) == 0) return 0;
        return usage_error("--val-fraction: expected a number in [0, 1], found ", val);
    case 'S': return opt_int(ch, val, 0, INT64_MAX, &a->seed);
    case CLI_NO_SHORT('b'): a->bos = 1; return 0;
    case 'E': a->no_eos = 1; return 0;
    case CLI_NO_SHORT('P'): a->target_prompts = 1; return 0;
    case CLI_NO_SHORT('T'): a->chat_template = strcmp(val, "auto") ? val : NULL; return 0;
    case 'x': a->strict = 1; return 0;
    case CLI_NO_SHORT('d'): return parse_sep(a, val);
    case CLI_NO_SHORT('s'): return opt_int(ch, val, 1, INT64_C(1) << 60, &a->shard_tokens);
    case CLI_NO_SHORT('p'): return opt_int(ch, val, PACK_MIN_T, PACK_MAX_T, &a->pack);
    case 'j': return opt_int(ch, val, 1, 1024, &a->threads);
    case 'q': a->quiet = 1; return 0;
    case CHAT_OPT_STEPS:
    case CHAT_OPT_MEMORY: return chat_budget_option(c, ch, val, &a->budget);
    default: return usage_error("unhandled option", NULL);
    }
}

/* Returns 0, -1 after --help, or an exit status. */
static int parse_args(prep_args *a, int argc, char **argv) {
    int rc = cli_parse(&prep_cli, argc, argv, on_opt, a);
    if (rc) return rc;
    if (!a->out) return usage_error("--out DIR is required", NULL);
    if (optind >= argc) return usage_error("no INPUT given", NULL);
    if (a->doc_sep_len && a->format != FMT_AUTO && a->format != FMT_TEXT)
        return usage_error("--doc-sep applies to text inputs, not to --format ",
                           fmt_names[a->format]);
    if (a->format == FMT_PREF && !a->pack)
        return usage_error("--format preference needs --pack T (each answer gets a sample of "
                           "seq_len T of its own: samples 2i and 2i+1 are pair i's chosen and "
                           "rejected answers; docs/prep.md)", NULL);
    if (a->format == FMT_PROMPTS && (!a->pack || a->bos || a->target_prompts))
        return usage_error("--format prompts needs --pack P (each prompt alone in a sample of P "
                           "tokens, at most P - 1 of them its own) and takes neither --bos nor "
                           "--target-prompts (every prompt token is kept; docs/rl.md)", NULL);
    if (a->pack) {
        char n[96];
        int paired = a->format == FMT_PREF;
        if (a->format == FMT_TEXT || a->format == FMT_JSONL)
            return usage_error("--pack places whole sft/chat examples into samples; plain text "
                               "is cut into samples by the trainer (drop --pack), found --format ",
                               fmt_names[a->format]);
        if (a->doc_sep_len)
            return usage_error("--pack takes sft/chat examples, --doc-sep splits plain text: "
                               "drop one of them", NULL);
        if (a->no_eos)
            return usage_error("--pack needs the <|endoftext|> after each example (it separates "
                               "packed examples and pads the windows): drop --no-eos", NULL);
        if (!pack_shard_tokens((uint64_t)a->shard_tokens, (uint64_t)a->pack, paired)) {
            snprintf(n, sizeof n, "%lld < %s--pack + 1 = %lld", (long long)a->shard_tokens,
                     paired ? "2 * " : "", (long long)a->pack * (paired ? 2 : 1) + 1);
            return usage_error(paired ? "--shard-tokens must hold at least one preference pair "
                                        "(two packed samples): "
                                      : "--shard-tokens must hold at least one packed sample: ", n);
        }
    }
    return 0;
}

/* ================================ inputs ================================ */

typedef struct in_file {
    char *path;
    prep_format kind; /* FMT_TEXT, FMT_JSONL, FMT_SFT, FMT_CHAT or FMT_PREF */
    uint64_t size;
    uint64_t invalid_utf8; /* a text file's ill-formed UTF-8 sequences, each encoded as U+FFFD */
} in_file;

typedef struct file_list {
    in_file *v;
    size_t n, cap;
    uint64_t bytes;
    uint64_t skipped; /* files of an earlier tessera dataset met in a walked directory */
} file_list;

static void add_file(file_list *l, const char *path, uint64_t size) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        in_file *nv = tsr_malloc(l->cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        free(l->v);
        l->v = nv;
    }
    memset(&l->v[l->n], 0, sizeof l->v[l->n]);
    l->v[l->n].path = strdup(path);
    if (!l->v[l->n].path) tsr_die(TSR_EXIT_INTERNAL, "prep: out of memory");
    l->v[l->n].kind = FMT_TEXT;
    l->v[l->n].size = size;
    l->n++;
    l->bytes += size;
}

/* A file of a walked directory; a shard or index.tsv of an earlier dataset (a folder that holds
 * prep's own output) is skipped with a warning: its binary shards read as text were garbage. */
static int add_walked(void *ctx, const char *path, const struct stat *st) {
    file_list *l = ctx;
    if (dataset_file_is_part(path)) {
        if (++l->skipped <= MAX_REPORTED)
            tsr_warn("prep: %s: part of a tessera dataset (an earlier prep's output?): skipped, prep "
                     "reads text and JSON Lines%s", path,
                     l->skipped == MAX_REPORTED ? "; further ones are counted, not shown" : "");
        return 0;
    }
    add_file(l, path, (uint64_t)st->st_size);
    return 0;
}

/* Adds an INPUT: a regular file, or every file of a directory as fs_walk finds them (sorted,
 * hidden names skipped, links followed, special files skipped with a warning). */
static int collect(file_list *l, const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        tsr_error("%s: cannot read input: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    if (S_ISREG(st.st_mode)) {
        if (dataset_file_is_part(path)) {
            tsr_error("%s: part of a tessera dataset (a shard or its index.tsv), not text or JSON "
                      "Lines: give the inputs it was made from", path);
            return TSR_EXIT_DATA;
        }
        add_file(l, path, (uint64_t)st.st_size);
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        tsr_error("%s: not a regular file or a directory", path);
        return TSR_EXIT_DATA;
    }
    return fs_walk(path, add_walked, l);
}

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Strips a trailing "\n" / "\r\n", and a UTF-8 byte order mark on line 1. */
static char *trim_line(char *s, ssize_t *len, uint64_t line_no) {
    while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == '\r')) (*len)--;
    if (line_no == 1 && *len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
        s += 3;
        *len -= 3;
    }
    return s;
}

static int is_blank(const char *s, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (s[k] != ' ' && s[k] != '\t' && s[k] != '\r') return 0;
    return 1;
}

/* The kind of a JSONL file: from the first line that is a JSON object with "messages" (chat),
 * "prompt" (sft) or "text"; FMT_JSONL when none of the first DETECT_LINES lines says. */
static int detect_jsonl(in_file *f, json_doc *jd) {
    FILE *fp = fopen(f->path, "rb");
    if (!fp) {
        tsr_error("%s: cannot open: %s", f->path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    f->kind = FMT_JSONL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    json_value *root;
    json_error err;
    for (uint64_t no = 1; no <= DETECT_LINES && (len = getline(&line, &cap, fp)) >= 0; no++) {
        char *s = trim_line(line, &len, no);
        if (json_parse(jd, s, (size_t)len, &root, &err) != 0 || root->type != JSON_OBJECT)
            continue;
        if (json_get(root, "messages")) f->kind = FMT_CHAT;
        else if (json_get(root, "prompt")) f->kind = FMT_SFT;
        else if (!json_get(root, "text")) continue;
        break;
    }
    free(line);
    fclose(fp);
    return 0;
}

static int detect_kinds(file_list *l, prep_format format) {
    json_doc jd;
    json_doc_init(&jd);
    int rc = 0;
    for (size_t k = 0; k < l->n && !rc; k++) {
        in_file *f = &l->v[k];
        static const char *const packed[] = {".gz", ".zst", ".xz", ".bz2", ".zip", ".tar"};
        for (size_t j = 0; j < sizeof packed / sizeof packed[0]; j++)
            if (has_suffix(f->path, packed[j])) {
                tsr_error("%s: compressed or archived input is not read (decompress it first, "
                          "e.g. to a .jsonl or .txt file)", f->path);
                rc = TSR_EXIT_DATA;
            }
        if (rc) break;
        if (format != FMT_AUTO) f->kind = format;
        else if (has_suffix(f->path, ".jsonl") || has_suffix(f->path, ".ndjson") ||
                 has_suffix(f->path, ".json"))
            rc = detect_jsonl(f, &jd);
        else f->kind = FMT_TEXT;
    }
    json_doc_free(&jd);
    return rc;
}

/* --pack takes sft and chat examples only; names the first input that is plain text. */
static int check_pack_kinds(const file_list *l) {
    for (size_t k = 0; k < l->n; k++)
        if (l->v[k].kind == FMT_TEXT || l->v[k].kind == FMT_JSONL) {
            tsr_error("prep: --pack: %s is %s, not sft or chat examples (--pack places whole "
                      "prompt/response examples into samples; prep plain text without --pack, or "
                      "force --format sft|chat)", l->v[k].path,
                      l->v[k].kind == FMT_TEXT ? "plain text (format text)"
                                               : "JSON Lines of {\"text\"} (format jsonl)");
            return TSR_EXIT_USAGE;
        }
    return 0;
}

/* ================================ the run's state ================================ */

typedef struct prep_ctx {
    const prep_args *a;
    file_list files;
    tsr_tokenizer *tok;
    char tok_name[4096]; /* what the dataset records: "gpt2", else the tokenizer's absolute path */
    chat_config chat;    /* the tokenizer's tokenizer_config.json, when loaded (have_chat) */
    char chat_path[4096]; /* its path */
    tsr_lock lock;        /* OUT.lock, from before OUT.tmp is made to after it is renamed */
    int have_chat;
    prep_doc_rules rules;
    uint32_t eos, vocab;
    int with_mask, threads, tty;
    int part_val; /* the split of the document whose parts are being consumed */
    size_t part_bytes; /* PART_BYTES, or $TSR_PREP_PART_BYTES */
    double log_every;  /* PROGRESS_LOG_S, or $TSR_PREP_PROGRESS_S */
    char *buf; /* the batch's input bytes */
    size_t buf_len, buf_cap;
    prep_item *items;
    size_t n_items, items_cap;
    json_doc *jd; /* one per thread */
    tsr_dataset_writer *w[2]; /* train, val */
    prep_packer *pk[2];       /* --pack: the packers writing into w[] */
    uint64_t docs[2], tokens[2], targets[2], bad, empty, bytes_done;
    uint64_t dropped, overlong; /* --pack: examples dropped; over-length examples (reported) */
    uint64_t pairs[2], pairs_dropped; /* --format preference: pairs written; pairs dropped */
    uint64_t pair_notes[3];           /* pairs with the same answer twice, with an empty answer */
    uint64_t datasets_skipped;        /* walked files of an earlier tessera dataset (skipped) */
    prompts_side side;        /* --format prompts: the records of the prompts written */
    double t0, t_progress;
} prep_ctx;

/* ================================ progress ================================ */

static void fmt_duration(char *buf, size_t n, double s) {
    long t = s < 0 ? 0 : s > 359999 ? 359999 : (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* On a terminal a bar redrawn in place; otherwise a plain line every c->log_every seconds. */
static void progress(prep_ctx *c, int final) {
    if (c->a->quiet) return;
    double now = tsr_now(), dt = now - c->t0;
    if (!final && now - c->t_progress < (c->tty ? PROGRESS_TTY_S : c->log_every)) return;
    if (final && !c->tty) return;
    c->t_progress = now;
    uint64_t total = c->files.bytes ? c->files.bytes : 1;
    double frac = (double)c->bytes_done / (double)total, rate = dt > 0 ? c->bytes_done / dt : 0;
    if (frac > 1) frac = 1;
    char eta[32];
    fmt_duration(eta, sizeof eta, rate > 0 ? (double)(total - (c->bytes_done < total ?
                                                                 c->bytes_done : total)) / rate
                                           : 0);
    double tokens = (double)(c->tokens[0] + c->tokens[1]);
    if (c->tty) {
        char bar[31];
        int fill = (int)(frac * 30);
        for (int k = 0; k < 30; k++) bar[k] = k < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(stderr, "\rprep [%s] %5.1f%% %.1f/%.1f MB %.1f MB/s ETA %s, %llu docs, %.2fM "
                "tokens\x1b[K%s", bar, 100 * frac, c->bytes_done / 1e6, total / 1e6, rate / 1e6,
                eta, (unsigned long long)(c->docs[0] + c->docs[1]), tokens / 1e6,
                final ? "\n" : "");
    } else {
        fprintf(stderr, "prep: %.1f%% of %.1f MB, %.1f MB/s, ETA %s, %llu documents, %.0f "
                "tokens\n", 100 * frac, total / 1e6, rate / 1e6, eta,
                (unsigned long long)(c->docs[0] + c->docs[1]), tokens);
    }
    fflush(stderr);
}

/* ================================ batches ================================ */

/* Items past BATCH_ITEMS are allowed (a text file split into many documents is one read). */
static prep_item *new_item(prep_ctx *c, size_t file, uint64_t line, size_t off, size_t len) {
    if (c->n_items == c->items_cap) {
        size_t cap = c->items_cap ? 2 * c->items_cap : BATCH_ITEMS;
        prep_item *ni = realloc(c->items, cap * sizeof *ni);
        if (!ni) tsr_die(TSR_EXIT_INTERNAL, "prep: out of memory (%zu items)", cap);
        memset(ni + c->items_cap, 0, (cap - c->items_cap) * sizeof *ni);
        c->items = ni;
        c->items_cap = cap;
    }
    prep_item *it = &c->items[c->n_items++];
    it->file = file;
    it->line = line;
    it->off = off;
    it->len = len;
    it->part = PART_WHOLE;
    return it;
}

static void buf_reserve(prep_ctx *c, size_t extra) {
    if (c->buf_len + extra <= c->buf_cap) return;
    size_t cap = c->buf_cap ? c->buf_cap : BATCH_BYTES + 4096;
    while (cap < c->buf_len + extra) cap *= 2;
    char *nb = realloc(c->buf, cap);
    if (!nb) tsr_die(TSR_EXIT_INTERNAL, "prep: out of memory (%zu bytes of input)", cap);
    c->buf = nb;
    c->buf_cap = cap;
}

/* --pack: warns (the first MAX_REPORTED times) that an example of n tokens was truncated or
 * dropped. what: "" or which answer of a preference pair ("chosen "); pair: its drop takes the
 * pair along. */
static void report_fate(prep_ctx *c, const prep_item *it, const char *path, const char *what,
                        size_t n, pack_fate fate, int pair) {
    if (++c->overlong > MAX_REPORTED) return;
    if (c->tty && !c->a->quiet) fprintf(stderr, "\r\x1b[K");
    long long T = (long long)c->a->pack;
    unsigned long long line = (unsigned long long)it->line;
    const char *gone = pair ? "pair dropped (its chosen and its rejected example)"
                            : "example dropped";
    const char *more = c->overlong == MAX_REPORTED ? "; further over-length examples are counted, "
                                                     "not shown" : "";
    if (fate == PACK_TRUNCATED)
        tsr_warn("%s:%llu: %sexample of %zu tokens is longer than --pack %lld: kept its first %lld "
                 "tokens (the rest, with its <|endoftext|>, is cut)%s", path, line, what, n, T,
                 T - 1, more);
    else if ((long long)n > T)
        tsr_warn("%s:%llu: %sexample of %zu tokens is longer than --pack %lld and its first %lld "
                 "tokens hold no target (the prompt fills the sample): %s%s", path, line, what, n,
                 T, T - 1, gone, more);
    else
        tsr_warn("%s:%llu: %sexample of %zu tokens holds no target: %s%s", path, line, what, n,
                 gone, more);
}

/* --pack: places the item into split `val`'s packer, reporting an over-length example. */
static int consume_packed(prep_ctx *c, const prep_item *it, int val, const char *path) {
    pack_fate fate;
    if (pack_add(c->pk[val], it->tok, it->mask, it->n, &fate)) return TSR_EXIT_DATA;
    if (fate == PACK_DROPPED) c->dropped++;
    else c->docs[val]++;
    const pack_stats *st = pack_get_stats(c->pk[val]);
    c->tokens[val] = st->tokens;
    c->targets[val] = st->targets;
    if (fate != PACK_WHOLE) report_fate(c, it, path, "", it->n, fate, 0);
    return 0;
}

/* A pair that can teach nothing is written, with a warning (the first MAX_REPORTED of each kind):
 * the same answer chosen and rejected (DPO's margin is 0: no gradient), or an empty answer. */
static void warn_pair(prep_ctx *c, const prep_item *it, const char *path) {
    if (!it->pair_note || ++c->pair_notes[it->pair_note] > MAX_REPORTED) return;
    if (c->tty && !c->a->quiet) fprintf(stderr, "\r\x1b[K");
    tsr_warn("%s:%llu: %s: the pair teaches nothing (written all the same; fix the data)%s", path,
             (unsigned long long)it->line,
             it->pair_note == PAIR_SAME ? "\"chosen\" and \"rejected\" are the same text"
                                        : "\"chosen\" or \"rejected\" is empty (or white space)",
             c->pair_notes[it->pair_note] == MAX_REPORTED ? "; further ones are counted, not shown" : "");
}

/* --format preference: places the item's pair (its chosen example, then its rejected one) into
 * split `val`'s packer: both, each in a window of its own, or neither. Reports the over-length
 * examples of a written pair, and what made a dropped pair go. */
static int consume_pair(prep_ctx *c, const prep_item *it, int val, const char *path) {
    static const char *const what[2] = {"chosen ", "rejected "};
    const size_t n[2] = {it->n_first, it->n - it->n_first};
    pack_fate fate[2];
    if (pack_add_pair(c->pk[val], it->tok, it->mask, n, fate)) return TSR_EXIT_DATA;
    int dropped = fate[0] == PACK_DROPPED || fate[1] == PACK_DROPPED;
    if (dropped) {
        c->pairs_dropped++;
        c->dropped += 2;
    } else {
        c->pairs[val]++;
        c->docs[val] += 2;
    }
    const pack_stats *st = pack_get_stats(c->pk[val]);
    c->tokens[val] = st->tokens;
    c->targets[val] = st->targets;
    for (int k = 0; k < 2; k++)
        if (dropped ? fate[k] == PACK_DROPPED : fate[k] == PACK_TRUNCATED)
            report_fate(c, it, path, what[k], n[k], fate[k], 1);
    return 0;
}

/* --format prompts: the prompt alone in a window of split `val`, its line as its record; a prompt
 * that does not fit is dropped and reported. */
static int consume_prompt(prep_ctx *c, const prep_item *it, int val, const char *path) {
    pack_fate fate;
    if (pack_add_alone(c->pk[val], it->tok, it->mask, it->n, &fate)) return TSR_EXIT_DATA;
    if (fate == PACK_DROPPED) {
        c->dropped++;
        if (++c->overlong <= MAX_REPORTED) {
            if (c->tty && !c->a->quiet) fprintf(stderr, "\r\x1b[K");
            tsr_warn("%s:%llu: the prompt has %zu tokens, --pack %lld leaves room for %lld: "
                     "dropped%s", path, (unsigned long long)it->line, it->n,
                     (long long)c->a->pack, (long long)c->a->pack - 1,
                     c->overlong == MAX_REPORTED ? "; further ones are counted, not shown" : "");
        }
        return 0;
    }
    c->docs[val]++;
    const pack_stats *st = pack_get_stats(c->pk[val]);
    c->tokens[val] = st->tokens;
    c->targets[val] = st->targets;
    return prompts_side_add(&c->side, val, c->buf + it->off, it->len);
}

/* Handles one finished item in input order: report it, or append it to train or val. */
static int consume(prep_ctx *c, const prep_item *it) {
    in_file *f = &c->files.v[it->file];
    const char *path = f->path;
    /* JSON refuses invalid UTF-8 (a bad line); plain text keeps it, replaced: counted per file */
    if (f->kind == FMT_TEXT)
        f->invalid_utf8 += tokenizer_count_invalid_utf8((const uint8_t *)c->buf + it->off, it->len);
    if (it->status == ITEM_FATAL) {
        if (c->tty && !c->a->quiet) fprintf(stderr, "\n");
        tsr_error("%s:%llu: %s: the chat template of %s; stopping, nothing written (%s)", path,
                  (unsigned long long)it->line, it->err, c->chat_path, CHAT_BUDGET_HINT);
        return TSR_EXIT_DATA;
    }
    if (it->status == ITEM_BAD) {
        c->bad++;
        if (c->a->strict) {
            if (c->tty && !c->a->quiet) fprintf(stderr, "\n");
            tsr_error("%s:%llu: %s (--strict: stopping, nothing written)", path,
                      (unsigned long long)it->line, it->err);
            return TSR_EXIT_DATA;
        }
        if (c->bad <= MAX_REPORTED) {
            if (c->tty && !c->a->quiet) fprintf(stderr, "\r\x1b[K");
            tsr_warn("%s:%llu: %s (line skipped)%s", path, (unsigned long long)it->line, it->err,
                     c->bad == MAX_REPORTED ? "; further bad lines are counted, not shown" : "");
        }
        return 0;
    }
    if (it->status == ITEM_EMPTY || it->n == 0) { /* it->n == 0: text that makes no token */
        c->empty++;
        return 0;
    }
    /* a dropped example keeps its number; a preference pair is one document of the split */
    uint64_t doc = f->kind == FMT_PREF ? c->pairs[0] + c->pairs[1] + c->pairs_dropped
                                       : c->docs[0] + c->docs[1] + c->dropped;
    int val = c->a->val_fraction > 0 &&
              tsr_rand_uniform((uint64_t)c->a->seed, SPLIT_STREAM, doc) < c->a->val_fraction;
    if (!(it->part & PART_FIRST)) /* a later part of a document read in parts: its split */
        val = c->part_val;
    c->part_val = val;
    if (f->kind == FMT_PREF) {
        warn_pair(c, it, path);
        return consume_pair(c, it, val, path);
    }
    if (f->kind == FMT_PROMPTS) return consume_prompt(c, it, val, path);
    if (c->pk[val]) return consume_packed(c, it, val, path);
    c->docs[val] += (it->part & PART_FIRST) != 0;
    c->tokens[val] += it->n;
    if (c->with_mask)
        for (size_t k = 0; k < it->n; k++) c->targets[val] += it->mask[k];
    return dataset_writer_append(c->w[val], it->tok, c->with_mask ? it->mask : NULL, it->n)
               ? TSR_EXIT_DATA : 0;
}

/* Tokenizes the batch on c->threads threads, then consumes it in order; the buffer's bytes from
 * `keep` on (a text document still being read, in no item) move to its front. Past an item whose
 * chat template went over its budget (ITEM_FATAL: prep stops there) the items are not tokenized:
 * each would take the template's whole budget for nothing. */
static int flush_from(prep_ctx *c, size_t keep) {
    int n = (int)c->n_items, fatal = n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->threads)
    for (int k = 0; k < n; k++) {
        prep_item *it = &c->items[k];
        int first;
#pragma omp atomic read
        first = fatal;
        if (k > first) {
            it->status = ITEM_EMPTY;
            continue;
        }
        prep_tokenize(&c->rules, c->files.v[it->file].kind, c->buf + it->off, it,
                      &c->jd[omp_get_thread_num()]);
        if (it->status == ITEM_FATAL) {
#pragma omp critical(prep_fatal)
            if (k < fatal) {
#pragma omp atomic write
                fatal = k;
            }
        }
    }
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) rc = consume(c, &c->items[k]);
    c->n_items = 0;
    memmove(c->buf, c->buf + keep, c->buf_len - keep);
    c->buf_len -= keep;
    if (!rc) progress(c, 0);
    return rc;
}

static int flush(prep_ctx *c) { return flush_from(c, c->buf_len); }

/* The test knobs of the environment (docs/prep.md): TSR_PREP_PART_BYTES, the bytes of a text file
 * read at a time and of a streamed document's parts (tiny parts put many cuts in a small file);
 * TSR_PREP_PROGRESS_S, the seconds between two plain progress lines. */
static int read_knobs(prep_ctx *c) {
    const char *part = getenv("TSR_PREP_PART_BYTES"), *every = getenv("TSR_PREP_PROGRESS_S");
    int64_t bytes = PART_BYTES;
    c->log_every = PROGRESS_LOG_S;
    if (part && *part && tsr_parse_i64(part, 1, 1 << 30, &bytes)) {
        tsr_error("prep: TSR_PREP_PART_BYTES = \"%s\": expected bytes from 1 to 1073741824", part);
        return TSR_EXIT_USAGE;
    }
    if (every && *every && tsr_parse_f64(every, 0, 3600, &c->log_every)) {
        tsr_error("prep: TSR_PREP_PROGRESS_S = \"%s\": expected seconds from 0 to 3600", every);
        return TSR_EXIT_USAGE;
    }
    c->part_bytes = (size_t)bytes;
    return 0;
}

static int read_error(const char *path) {
    tsr_error("%s: read failed: %s", path, strerror(errno));
    return TSR_EXIT_DATA;
}

/* Cuts the open document of a text file (its bytes from *pos) into items: each document that a
 * --doc-sep separator ends; at the end of the file the rest; and, once c->part_bytes are open, a
 * part of it up to the last place the tokenizer may be cut (tokenizer_stream_cut; never within
 * reach of a separator not read whole yet). *part: the flags of the next part (PART_FIRST until a
 * part of the document went out); *scan: where the search for the separator resumes. */
static void split_text(prep_ctx *c, size_t fi, size_t *pos, size_t *scan, int *part, int eof) {
    const char *sep = c->a->doc_sep;
    size_t seplen = c->a->doc_sep_len;
    while (seplen) {
        const char *hit = memmem(c->buf + *scan, c->buf_len - *scan, sep, seplen);
        if (!hit) {
            *scan = c->buf_len - *pos >= seplen ? c->buf_len - seplen + 1 : *pos;
            break;
        }
        size_t end = (size_t)(hit - c->buf);
        if (end > *pos) /* empty pieces between separators are not documents */
            new_item(c, fi, 0, *pos, end - *pos)->part = *part | PART_LAST;
        *pos = *scan = end + seplen;
        *part = PART_FIRST;
    }
    size_t open = c->buf_len - *pos;
    if (eof) {
        if (open || !seplen) new_item(c, fi, 0, *pos, open)->part = *part | PART_LAST;
        *pos = c->buf_len;
        return;
    }
    if (open < c->part_bytes) return;
    size_t q = tokenizer_stream_cut(c->tok, (const uint8_t *)c->buf + *pos,
                                    seplen ? open - seplen + 1 : open);
    if (!q) return; /* no place to cut yet: the document grows in memory */
    new_item(c, fi, 0, *pos, q)->part = *part;
    *part = 0;
    *pos += q;
}

/* A text file: one document, or documents separated by --doc-sep, read c->part_bytes at a time; a
 * long document is tokenized in parts (split_text), so memory does not grow with the file. */
static int read_text(prep_ctx *c, size_t fi) {
    const char *path = c->files.v[fi].path;
    if ((c->n_items >= BATCH_ITEMS || c->buf_len >= BATCH_BYTES) && flush(c)) return TSR_EXIT_DATA;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tsr_error("%s: cannot open: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    size_t pos = c->buf_len, scan = pos, got;
    int part = PART_FIRST, rc = 0;
    do {
        buf_reserve(c, c->part_bytes);
        got = fread(c->buf + c->buf_len, 1, c->part_bytes, fp);
        c->buf_len += got;
        c->bytes_done += got;
        if (!got && ferror(fp)) break;
        split_text(c, fi, &pos, &scan, &part, got == 0);
        if (c->n_items >= BATCH_ITEMS || pos >= BATCH_BYTES) {
            rc = flush_from(c, pos);
            scan -= pos;
            pos = 0;
        }
    } while (!rc && got > 0);
    int err = ferror(fp);
    fclose(fp);
    return rc ? rc : err ? read_error(path) : 0;
}

/* A JSONL file: one item per non-blank line. */
static int read_jsonl(prep_ctx *c, size_t fi) {
    const char *path = c->files.v[fi].path;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        tsr_error("%s: cannot open: %s", path, strerror(errno));
        return TSR_EXIT_DATA;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    for (uint64_t no = 1; !rc && (len = getline(&line, &cap, fp)) >= 0; no++) {
        c->bytes_done += (uint64_t)len;
        char *s = trim_line(line, &len, no);
        if (is_blank(s, (size_t)len)) continue;
        if (c->n_items >= BATCH_ITEMS || c->buf_len >= BATCH_BYTES) rc = flush(c);
        if (rc) break;
        buf_reserve(c, (size_t)len + 1);
        memcpy(c->buf + c->buf_len, s, (size_t)len);
        new_item(c, fi, no, c->buf_len, (size_t)len);
        c->buf_len += (size_t)len;
    }
    if (!rc && ferror(fp)) rc = read_error(path);
    free(line);
    fclose(fp);
    return rc;
}

/* ================================ output directory ================================ */

/* Takes OUT.lock (one prep per output: runlock.h; the lock outlives OUT.tmp's rename to OUT),
 * checks that OUT does not exist and creates an empty OUT.tmp (clearing a stale one, which only a
 * dead prep can have left: its lock was ours to take). */
static int make_staging(const char *out, tsr_lock *lock, char *tmp, size_t cap) {
    struct stat st;
    char lpath[4096 + 8];
    if (tsr_snprintf(tmp, cap, "%s.tmp", out) || tsr_snprintf(lpath, sizeof lpath, "%s.lock", out)) {
        tsr_error("%s: path too long", out);
        return TSR_EXIT_DATA;
    }
    if (fs_make_parents(lpath) != 0) {
        tsr_error("%s: cannot create its directory: %s", out, strerror(errno));
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(tsr_lock_take(lock, lpath, "tessera prep"));
    if (lstat(out, &st) == 0) {
        tsr_error("%s: already exists; refusing to overwrite (choose a new --out or remove it)",
                  out);
        return TSR_EXIT_DATA;
    }
    if (lstat(tmp, &st) == 0 && dataset_split_remove_staging(tmp)) return TSR_EXIT_DATA;
    if (fs_make_parents(tmp) || mkdir(tmp, 0777) != 0) {
        tsr_error("%s: mkdir failed: %s", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* ================================ the command ================================ */

/* Streams every input through the batches. */
static int run(prep_ctx *c) {
    int rc = 0;
    for (size_t k = 0; k < c->files.n && !rc; k++)
        rc = c->files.v[k].kind == FMT_TEXT ? read_text(c, k) : read_jsonl(c, k);
    if (!rc) rc = flush(c);
    for (int k = 0; k < 2 && !rc; k++)
        if (c->pk[k]) {
            rc = pack_finish(c->pk[k]);
            c->tokens[k] = pack_get_stats(c->pk[k])->tokens;
        }
    return rc;
}

/* Closes the writers and renames OUT.tmp to OUT; val is dropped when it got no document. */
static int commit(prep_ctx *c, const char *tmp) {
    if (c->docs[0] == 0) {
        tsr_error("prep: no %sdocument in the input%s%s; nothing written",
                  c->docs[1] ? "training " : "",
                  c->bad ? " (every JSONL line was bad, see above)" : "",
                  c->pairs_dropped ? " (preference pairs were dropped, see above)"
                  : c->dropped     ? " (over-length examples were dropped, see above: a larger "
                                     "--pack keeps them)" : "");
        return TSR_EXIT_DATA;
    }
    int rc = dataset_writer_close(c->w[0]);
    c->w[0] = NULL;
    if (c->w[1]) {
        if (c->docs[1]) rc = rc ? rc : dataset_writer_close(c->w[1]);
        else {
            dataset_writer_abort(c->w[1]);
            if (!c->a->quiet)
                tsr_warn("prep: no document fell into the val split (--val-fraction %g of %llu "
                         "documents); writing no %s/val", c->a->val_fraction,
                         (unsigned long long)c->docs[0], c->a->out);
        }
        c->w[1] = NULL;
    }
    if (rc) return TSR_EXIT_DATA;
    for (int k = 0; k < 2 && c->a->pack; k++) {
        char sub[4096 + 8];
        snprintf(sub, sizeof sub, "%s/%s", tmp, k ? "val" : "train");
        if ((!k || c->docs[1]) && pack_note_index(c->pk[k], sub)) return TSR_EXIT_DATA;
    }
    const int written[2] = {1, c->docs[1] > 0};
    if (c->a->format == FMT_PROMPTS && prompts_side_commit(&c->side, tmp, written))
        return TSR_EXIT_DATA;
    if (rename(tmp, c->a->out) != 0) {
        tsr_error("%s: rename to %s failed: %s", tmp, c->a->out, strerror(errno));
        return TSR_EXIT_DATA;
    }
    return fs_sync_parent(c->a->out);
}

static void summary(const prep_ctx *c) {
    double dt = tsr_now() - c->t0;
    printf("prep: wrote %s: train %llu documents, %llu tokens; val %llu documents, %llu tokens; "
           "vocab %u (%s), loss mask %s\n", c->a->out, (unsigned long long)c->docs[0],
           (unsigned long long)c->tokens[0], (unsigned long long)c->docs[1],
           (unsigned long long)c->tokens[1], c->vocab, c->vocab <= 65536 ? "uint16" : "uint32",
           c->with_mask ? "yes" : "no");
    if (c->with_mask)
        printf("prep: target tokens (mask 1): train %llu, val %llu\n",
               (unsigned long long)c->targets[0], (unsigned long long)c->targets[1]);
    if (c->a->pack) {
        printf("prep: packed for seq_len %lld (train with seq_len = %lld):", (long long)c->a->pack,
               (long long)c->a->pack);
        for (int k = 0; k < 2; k++) {
            static const pack_stats none;
            const pack_stats *p = c->pk[k] ? pack_get_stats(c->pk[k]) : &none;
            printf("%s %s %llu windows, %llu examples, %llu truncated, %llu dropped, padding %llu "
                   "of %llu tokens (%.1f%%)", k ? ";" : "", k ? "val" : "train",
                   (unsigned long long)p->windows, (unsigned long long)p->examples,
                   (unsigned long long)p->truncated, (unsigned long long)p->dropped,
                   (unsigned long long)p->pad, (unsigned long long)p->tokens,
                   p->tokens ? 100.0 * (double)p->pad / (double)p->tokens : 0.0);
        }
        printf("\n");
    }
    if (c->a->format == FMT_PROMPTS)
        printf("prep: prompts (each alone in a sample of seq_len %lld, its line in SPLIT/%s): "
               "train %llu, val %llu; %llu dropped (longer than %lld tokens)\n",
               (long long)c->a->pack, DATASET_PROMPTS, (unsigned long long)c->docs[0],
               (unsigned long long)c->docs[1], (unsigned long long)c->dropped,
               (long long)c->a->pack - 1);
    if (c->a->format == FMT_PREF) {
        printf("prep: preference pairs (samples 2i and 2i+1 of seq_len %lld are pair i's chosen "
               "and rejected answers):", (long long)c->a->pack);
        for (int k = 0; k < 2; k++) {
            static const pack_stats none;
            const pack_stats *p = c->pk[k] ? pack_get_stats(c->pk[k]) : &none;
            printf("%s %s %llu pairs written, %llu pairs dropped, %llu truncated examples",
                   k ? ";" : "", k ? "val" : "train", (unsigned long long)p->pairs,
                   (unsigned long long)p->pairs_dropped, (unsigned long long)p->truncated);
        }
        printf("\n");
        if (c->pair_notes[PAIR_SAME] || c->pair_notes[PAIR_EMPTY])
            printf("prep: %llu pairs with the same chosen and rejected text, %llu with an empty "
                   "answer: written, but they teach nothing (warnings above)\n",
                   (unsigned long long)c->pair_notes[PAIR_SAME],
                   (unsigned long long)c->pair_notes[PAIR_EMPTY]);
    }
    printf("prep: read %.1f MB from %zu file%s in %.2f s (%.1f MB/s, %d thread%s); skipped %llu "
           "bad line%s, %llu empty document%s\n", c->files.bytes / 1e6, c->files.n,
           c->files.n == 1 ? "" : "s", dt, dt > 0 ? c->files.bytes / 1e6 / dt : 0.0, c->threads,
           c->threads == 1 ? "" : "s", (unsigned long long)c->bad, c->bad == 1 ? "" : "s",
           (unsigned long long)c->empty, c->empty == 1 ? "" : "s");
    /* text that is not valid UTF-8 was tokenized with U+FFFD in place of each ill-formed
     * sequence (as GPT-2's encoder reads it): say where, so a wrong encoding is noticed */
    uint64_t files_bad = 0, total_bad = 0;
    for (size_t k = 0; k < c->files.n; k++) {
        const in_file *f = &c->files.v[k];
        if (!f->invalid_utf8) continue;
        total_bad += f->invalid_utf8;
        if (++files_bad <= MAX_REPORTED)
            printf("prep: %s: %llu invalid UTF-8 sequence%s replaced by U+FFFD\n", f->path,
                   (unsigned long long)f->invalid_utf8, f->invalid_utf8 == 1 ? "" : "s");
    }
    if (files_bad > MAX_REPORTED)
        printf("prep: ... and %llu more files with invalid UTF-8\n",
               (unsigned long long)(files_bad - MAX_REPORTED));
    printf("prep: invalid UTF-8: %llu sequence%s replaced by U+FFFD in %llu of %zu files%s\n",
           (unsigned long long)total_bad, total_bad == 1 ? "" : "s", (unsigned long long)files_bad,
           c->files.n, total_bad ? " (is the input in another encoding? convert it with iconv)" : "");
}

static void ctx_free(prep_ctx *c) {
    for (size_t k = 0; k < c->items_cap; k++) {
        free(c->items[k].tok);
        free(c->items[k].mask);
    }
    free(c->items);
    if (c->jd)
        for (int k = 0; k < c->threads; k++) json_doc_free(&c->jd[k]);
    free(c->jd);
    free(c->buf);
    for (int k = 0; k < 2; k++) pack_free(c->pk[k]);
    prompts_side_close(&c->side);
    for (size_t k = 0; k < c->files.n; k++) free(c->files.v[k].path);
    free(c->files.v);
    if (c->tok) tokenizer_free(c->tok);
    if (c->have_chat) chat_config_free(&c->chat);
    tsr_lock_release(&c->lock);
}

/* The tokenizer_config.json of --chat-template, or (auto) the one beside a tokenizer.json: its
 * chat_template renders chat lines, its eos_token ends documents when the vocabulary has no
 * <|endoftext|> (Llama 3's <|end_of_text|>). */
static int open_chat_config(prep_ctx *c) {
    const char *spec = c->a->chat_template;
    char path[4096];
    jinja_error e;
    int none = spec && !strcmp(spec, "none");
    if (none) spec = NULL; /* still read for the eos_token */
    if (spec) {
        snprintf(path, sizeof path, "%s", spec);
    } else if (!tokenizer_is_hf(c->tok) || chat_config_find(c->a->tokenizer, path, sizeof path) != 1) {
        return 0;
    }
    if (chat_config_load(path, &c->chat, &e)) {
        tsr_error("prep: %s%s", e.msg, e.status == JINJA_ESYNTAX ? " (the chat_template's syntax)" : "");
        return TSR_EXIT_DATA;
    }
    c->have_chat = 1;
    snprintf(c->chat_path, sizeof c->chat_path, "%s", path);
    if (c->chat.tpl) jinja_set_budget(c->chat.tpl, &c->a->budget);
    if (spec && !c->chat.tpl) {
        tsr_error("prep: --chat-template %s: the file has no chat_template (give a "
                  "tokenizer_config.json that has one, or --chat-template none)", spec);
        return TSR_EXIT_USAGE;
    }
    if (none && c->chat.tpl) {
        jinja_free(c->chat.tpl);
        c->chat.tpl = NULL;
    }
    if (c->chat.tpl && !c->a->quiet) printf("prep: chat lines: the chat template of %s\n", path);
    return 0;
}

/* Loads the tokenizer and its end of document: <|endoftext|>, else the chat config's eos_token
 * (tokenizer_eos.h). */
static int open_tokenizer(prep_ctx *c) {
    int rc = tokenizer_open(&c->tok, c->a->tokenizer);
    if (rc) return rc;
    if (strcmp(c->a->tokenizer, "gpt2") == 0 || !realpath(c->a->tokenizer, c->tok_name))
        snprintf(c->tok_name, sizeof c->tok_name, "%s", c->a->tokenizer);
    c->vocab = tokenizer_vocab_size(c->tok);
    rc = open_chat_config(c);
    if (rc) return rc;
    c->eos = tokenizer_eos_id(c->tok, c->have_chat ? chat_config_token(&c->chat, "eos_token") : NULL,
                              TOKENIZER_EOS_DOCUMENT);
    c->rules = (prep_doc_rules){c->tok, c->eos, c->a->bos, c->a->no_eos, c->a->target_prompts,
                                c->have_chat && c->chat.tpl ? &c->chat : NULL};
    if (c->eos == UINT32_MAX && (!c->a->no_eos || c->a->bos)) {
        tsr_error("prep: tokenizer '%s' has no <|endoftext|> token (nor an eos_token in a "
                  "tokenizer_config.json beside it) to end documents with (add one, or pass "
                  "--no-eos without --bos)", c->a->tokenizer);
        return TSR_EXIT_USAGE;
    }
    return 0;
}

int cmd_prep(int argc, char **argv) {
    prep_args a = {.tokenizer = "gpt2", .format = FMT_AUTO, .val_fraction = 0.01, .seed = 1,
                   .shard_tokens = (int64_t)DEFAULT_SHARD_TOKENS};
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    prep_ctx c = {.a = &a, .t0 = tsr_now()};
    rc = read_knobs(&c);
    if (rc) return rc;
    c.threads = a.threads ? (int)a.threads : omp_get_max_threads();
    c.tty = isatty(STDERR_FILENO);
    struct stat st;
    if (lstat(a.out, &st) == 0) {
        tsr_error("%s: already exists; refusing to overwrite (choose a new --out or remove it)",
                  a.out);
        return TSR_EXIT_DATA;
    }
    for (int k = optind; k < argc && !rc; k++) rc = collect(&c.files, argv[k]);
    if (!rc && c.files.skipped > MAX_REPORTED)
        tsr_warn("prep: %llu files of tessera datasets skipped in all",
                 (unsigned long long)c.files.skipped);
    if (!rc) rc = detect_kinds(&c.files, a.format);
    if (!rc && a.pack) rc = check_pack_kinds(&c.files);
    if (!rc) rc = open_tokenizer(&c);
    if (rc) {
        ctx_free(&c);
        return rc;
    }
    for (size_t k = 0; k < c.files.n; k++)
        c.with_mask |= c.files.v[k].kind == FMT_SFT || c.files.v[k].kind == FMT_CHAT ||
                       c.files.v[k].kind == FMT_PREF || c.files.v[k].kind == FMT_PROMPTS;
    c.jd = tsr_calloc((size_t)c.threads, sizeof *c.jd);
    char tmp[4096], sub[4096 + 8];
    rc = make_staging(a.out, &c.lock, tmp, sizeof tmp);
    if (rc) {
        ctx_free(&c);
        return rc;
    }
    /* --pack: shards of whole samples, 1 + m*T tokens, m even for preference pairs (prep_pack.h) */
    int paired = a.format == FMT_PREF;
    uint64_t shard_tokens = a.pack ? pack_shard_tokens((uint64_t)a.shard_tokens, (uint64_t)a.pack,
                                                       paired)
                                   : (uint64_t)a.shard_tokens;
    snprintf(sub, sizeof sub, "%s/train", tmp);
    /* packed sft/chat examples: their segments recorded for attn_mask = document (prep_pack.h) */
    int segments = a.pack && !paired && a.format != FMT_PROMPTS;
    int mask = segments ? DATASET_MASK_SEGMENTS : c.with_mask ? DATASET_MASK : DATASET_NO_MASK;
    rc = dataset_writer_open(&c.w[0], sub, c.vocab, mask, shard_tokens);
    snprintf(sub, sizeof sub, "%s/val", tmp);
    if (!rc && a.val_fraction > 0)
        rc = dataset_writer_open(&c.w[1], sub, c.vocab, mask, shard_tokens);
    /* the dataset records the tokenizer that made it (the trainer warns on another one) */
    if (!rc && strpbrk(c.tok_name, " \t\n\r\v\f"))
        tsr_warn("prep: tokenizer \"%s\": a path with spaces is not recorded in the dataset's "
                 "index (the trainer then cannot warn when its data.tokenizer differs)", c.tok_name);
    for (int k = 0; k < 2 && !rc && !strpbrk(c.tok_name, " \t\n\r\v\f"); k++)
        if (c.w[k]) rc = dataset_writer_set_tokenizer(c.w[k], c.tok_name);
    for (int k = 0; k < 2 && !rc && a.pack; k++)
        if (c.w[k])
            c.pk[k] = pack_open(c.w[k], c.eos, (uint64_t)a.pack, shard_tokens, paired, segments);
    if (!rc && a.format == FMT_PROMPTS) rc = prompts_side_open(&c.side, tmp, c.w[1] != NULL);
    if (!rc && a.format == FMT_PROMPTS && c.have_chat && c.chat.tpl)
        prompts_side_stops(&c.side, &c.chat, c.tok);
    c.t0 = tsr_now();
    c.t_progress = c.t0;
    if (!rc) rc = run(&c);
    progress(&c, 1);
    if (!rc) rc = commit(&c, tmp);
    if (rc) {
        for (int k = 0; k < 2; k++)
            if (c.w[k]) dataset_writer_abort(c.w[k]);
        dataset_split_remove_staging(tmp);
        rc = rc == TSR_EXIT_USAGE ? rc : TSR_EXIT_DATA;
    } else if (!a.quiet) {
        summary(&c);
    }
    ctx_free(&c);
    return rc;
}

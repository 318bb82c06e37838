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
 * The inputs and their formats are prep_input.c's, the stream of batches prep_stream.c's
 * (prep_int.h: what they share).
 */
#include "prep/prep.h"

#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "data/data_cmd.h"
#include "data/s3.h"
#include "fsutil.h"
#include "json.h"
#include "prep/prep_int.h"
#include "tokenizer/tokenizer_eos.h"

static const char *const fmt_names[] = {"auto", "text", "jsonl", "sft", "chat", "preference",
                                        "prompts"};
_Static_assert(sizeof fmt_names / sizeof fmt_names[0] == FMT_COUNT, "format names");

/* ================================ options ================================ */

static const cli_opt prep_opts[] = {
    {"out", 'o', "DIR", "directory to create, holding the datasets DIR/train and DIR/val; or "
                        "s3://BUCKET/PREFIX: prepared in a temporary directory, then uploaded as by "
                        "tessera data push (docs/object-storage.md)"},
    {"tokenizer", 't', "SPEC", "gpt2, a directory with encoder.json + vocab.bpe, a Hugging Face "
                               "tokenizer.json (or its directory), or a tessera tokenizer file "
                               "(default gpt2)"},
    {"format", 'f', "FMT", "auto|text|jsonl|sft|chat|preference|prompts (default auto: by "
                           "extension and first line; never preference or prompts, which need "
                           "--pack)"},
    {"val-fraction", CLI_NO_SHORT('v'), "F", "fraction of documents for DIR/val, 0..1; 0 = no val (default 0.01)"},
    {"seed", 'S', "SEED", "seed of the train/val split (default 1)"},
    {"bos", CLI_NO_SHORT('b'), NULL, "put the tokenizer's start of a document (its config's "
                                     "bos_token, <bos>, <|begin_of_text|>, <s>; GPT-2 and Qwen: "
                                     "<|endoftext|>) before each document too"},
    {"eos", CLI_NO_SHORT('e'), "TOKEN", "end each document with this special token instead of "
                                       "the family's end of a document (<|endoftext|>, "
                                       "<|end_of_text|>, <eos>, </s>, else the config's "
                                       "eos_token)"},
    {"no-eos", 'E', NULL, "do not put the end of a document after each document"},
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
    case CLI_NO_SHORT('e'): a->eos_token = val; return 0;
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
/* The document end in the index of the dataset at dir (docs/prep.md): "# document_end<TAB>ID<TAB>
 * (...)", which the trainer compares with model.eot_token under the document mask. None with
 * --no-eos or --format prompts (no document ends). Returns 0 or TSR_EXIT_DATA. */
static int note_document_end(const prep_ctx *c, const char *dir) {
    char line[512], name[96];
    if (c->a->no_eos || c->a->format == FMT_PROMPTS) return 0;
    tokenizer_id_label(c->tok, c->eos, name, sizeof name);
    snprintf(line, sizeof line, "# document_end\t%u\t(tessera prep ends each document with this "
             "id%s: model.eot_token under model.attn_mask = \"document\"; docs/prep.md)\n",
             c->eos, name);
    return pack_note_lines(dir, line);
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
    for (int k = 0; k < 2; k++) {
        char sub[4096 + 8];
        snprintf(sub, sizeof sub, "%s/%s", tmp, k ? "val" : "train");
        if (k && !c->docs[1]) continue;
        if (note_document_end(c, sub) || (c->a->pack && pack_note_index(c->pk[k], sub)))
            return TSR_EXIT_DATA;
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
    snprintf(c->chat_path, sizeof c->chat_path, "%s", c->chat.tpl ? c->chat.source : path);
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
    if (c->chat.tpl && !c->a->quiet) printf("prep: chat lines: the chat template of %s\n", c->chat.source);
    return 0;
}

/* The end of a document (--eos TOKEN, else the family's: tokenizer_eos.h) and, with --bos, its
 * start, into c->eos and c->rules.bos_id: 0, or exit 1 naming what is missing. */
static int document_ids(prep_ctx *c) {
    const prep_args *a = c->a;
    const char *eos = c->have_chat ? chat_config_token(&c->chat, "eos_token") : NULL;
    c->eos = a->eos_token ? tokenizer_special_id(c->tok, a->eos_token)
                          : tokenizer_eos_id(c->tok, eos, TOKENIZER_EOS_DOCUMENT);
    const char *bos = c->have_chat ? chat_config_token(&c->chat, "bos_token") : NULL;
    c->rules.bos_id = tokenizer_bos_id(c->tok, bos);
    if (a->eos_token && c->eos == UINT32_MAX) {
        tsr_error("prep: --eos '%s': the tokenizer '%s' has no such special token (name one it "
                  "has, e.g. its tokenizer_config.json's eos_token)", a->eos_token, a->tokenizer);
        return TSR_EXIT_USAGE;
    }
    if (c->eos == UINT32_MAX && (!a->no_eos || a->pack)) {
        tsr_error("prep: tokenizer '%s' has no end of a document (<|endoftext|>, <|end_of_text|>, "
                  "<eos>, </s>, nor an eos_token in a tokenizer_config.json beside it) to end "
                  "documents with (name one with --eos TOKEN, or pass --no-eos)", a->tokenizer);
        return TSR_EXIT_USAGE;
    }
    if (a->bos && c->rules.bos_id == UINT32_MAX) {
        tsr_error("prep: --bos: tokenizer '%s' has no start of a document (a bos_token in a "
                  "tokenizer_config.json beside it, <bos>, <|begin_of_text|>, <s>, "
                  "<|startoftext|>, <|endoftext|>): drop --bos", a->tokenizer);
        return TSR_EXIT_USAGE;
    }
    c->rules.eos = c->eos;
    return 0;
}

/* Loads the tokenizer, its chat config and the ends of a document (document_ids). */
static int open_tokenizer(prep_ctx *c) {
    int rc = tokenizer_open(&c->tok, c->a->tokenizer);
    if (rc) return rc;
    if (strcmp(c->a->tokenizer, "gpt2") == 0 || !realpath(c->a->tokenizer, c->tok_name))
        snprintf(c->tok_name, sizeof c->tok_name, "%s", c->a->tokenizer);
    c->vocab = tokenizer_vocab_size(c->tok);
    rc = open_chat_config(c);
    if (rc) return rc;
    c->rules = (prep_doc_rules){c->tok, 0, 0, c->a->bos, c->a->no_eos, c->a->target_prompts,
                                c->have_chat && c->chat.tpl ? &c->chat : NULL,
                                c->a->format == FMT_PROMPTS
                                    ? tokenizer_bytes_bound(c->tok, (size_t)c->a->pack - 1) : 0};
    return document_ids(c);
}

/* The prep into the directory a.out (inputs argv[optind..argc)). */
static int prep_local(prep_args a, int argc, char **argv) {
    prep_ctx c = {.a = &a, .t0 = tsr_now()};
    int rc = prep_read_knobs(&c);
    if (rc) return rc;
    c.threads = a.threads ? (int)a.threads : omp_get_max_threads();
    c.tty = isatty(STDERR_FILENO);
    struct stat st;
    if (lstat(a.out, &st) == 0) {
        tsr_error("%s: already exists; refusing to overwrite (choose a new --out or remove it)",
                  a.out);
        return TSR_EXIT_DATA;
    }
    for (int k = optind; k < argc && !rc; k++) rc = prep_collect(&c.files, argv[k]);
    if (!rc && c.files.skipped > MAX_REPORTED)
        tsr_warn("prep: %llu files of tessera datasets skipped in all",
                 (unsigned long long)c.files.skipped);
    if (!rc) rc = prep_detect_kinds(&c.files, a.format);
    if (!rc && a.pack) rc = prep_check_pack_kinds(&c.files);
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
    if (!rc) rc = prep_run(&c);
    prep_progress(&c, 1);
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

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(path) != 0 ? -1 : 0;
}

/* --out s3://BUCKET/PREFIX: the prep into a private temporary directory (TMPDIR, else /tmp), then
 * the same upload as `tessera data push`; the directory is removed whatever happens. */
static int prep_to_store(prep_args a, int argc, char **argv) {
    const char *url = a.out;
    char tmp[4096], out[4096 + 8];
    tsr_s3 *s3;
    int rc = s3_open(&s3, url); /* the store's settings checked before any work */
    s3_close(s3);
    if (rc || (rc = fs_temp_dir(tmp, sizeof tmp, "prep"))) return rc;
    snprintf(out, sizeof out, "%s/out", tmp);
    a.out = out;
    rc = prep_local(a, argc, argv);
    if (!rc) rc = data_push(out, url);
    if (nftw(tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        tsr_warn("prep: could not remove the temporary directory %s: %s", tmp, strerror(errno));
    return rc;
}

int cmd_prep(int argc, char **argv) {
    prep_args a = {.tokenizer = "gpt2", .format = FMT_AUTO, .val_fraction = 0.01, .seed = 1,
                   .shard_tokens = (int64_t)DEFAULT_SHARD_TOKENS};
    int rc = parse_args(&a, argc, argv);
    if (rc) return rc < 0 ? 0 : rc;
    return s3_is_url(a.out) ? prep_to_store(a, argc, argv) : prep_local(a, argc, argv);
}

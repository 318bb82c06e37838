/* prep_stream.c — the inputs of `tessera prep` streamed into the datasets (prep_int.h): a reader
 * cuts the input into items (a document, a part of a long one, or a JSONL line) in batches; OpenMP
 * threads parse and tokenize a batch's items, then this thread consumes them in input order into
 * the writers (with --pack through the packers, a preference pair into two windows, a prompt alone
 * in one), reporting bad lines and over-length examples; the progress bar or lines.
 */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "prep/prep_int.h"

/* ================================ progress ================================ */

static void fmt_duration(char *buf, size_t n, double s) {
    long t = s < 0 ? 0 : s > 359999 ? 359999 : (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(buf, n, "%ld:%02ld", t / 60, t % 60);
}

/* On a terminal a bar redrawn in place; otherwise a plain line every c->log_every seconds. */
void prep_progress(prep_ctx *c, int final) {
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
    if (!rc) prep_progress(c, 0);
    return rc;
}

static int flush(prep_ctx *c) { return flush_from(c, c->buf_len); }

/* The test knobs of the environment (docs/prep.md): TSR_PREP_PART_BYTES, the bytes of a text file
 * read at a time and of a streamed document's parts (tiny parts put many cuts in a small file);
 * TSR_PREP_PROGRESS_S, the seconds between two plain progress lines. */
int prep_read_knobs(prep_ctx *c) {
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
        char *s = prep_trim_line(line, &len, no);
        if (prep_is_blank(s, (size_t)len)) continue;
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

/* Streams every input through the batches. */
int prep_run(prep_ctx *c) {
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

/* prep_input.c — the inputs of `tessera prep` (prep_int.h): the files of the command line, with
 * directories walked recursively in byte order (an earlier tessera dataset met there skipped), and
 * each file's format: text, or JSON Lines of plain text, sft, chat, preference or prompt
 * examples, given (--format) or detected from the name and the first lines.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"
#include "fsutil.h"
#include "prep/prep_int.h"

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
int prep_collect(file_list *l, const char *path) {
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
char *prep_trim_line(char *s, ssize_t *len, uint64_t line_no) {
    while (*len > 0 && (s[*len - 1] == '\n' || s[*len - 1] == '\r')) (*len)--;
    if (line_no == 1 && *len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) {
        s += 3;
        *len -= 3;
    }
    return s;
}

int prep_is_blank(const char *s, size_t n) {
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
        char *s = prep_trim_line(line, &len, no);
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

int prep_detect_kinds(file_list *l, prep_format format) {
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
int prep_check_pack_kinds(const file_list *l) {
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

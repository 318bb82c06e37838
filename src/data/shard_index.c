/* shard_index.c — a dataset's paths and its index.tsv as text (data.h): the index fetched from an
 * object store or handed over (preset) by the trainer's rank 0, and its notes, the header comments
 * "# KEY<TAB>VALUE<TAB>(...)" right after the magic line, written by the dataset writer
 * (max_token_id) and by tessera prep (packed_seq_len, preference_pairs, document_end, the prompts'
 * notes; docs/data-format.md, docs/prep.md), read by the reader (shard.c), the trainer, tessera
 * eval and GRPO. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "data/data.h"
#include "data/s3.h"
#include "data/shard_format.h"

/* (shard_format.h) */
char *data_path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = tsr_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* Copy of a directory path without trailing slashes (keeps a lone "/"). */
char *data_dir_dup(const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    char *d = tsr_malloc(n + 1);
    memcpy(d, dir, n);
    d[n] = '\0';
    return d;
}

/* Index texts handed over by dataset_index_preset (main thread, before the datasets open). */
typedef struct index_preset {
    char *dir, *text;
    size_t len;
    struct index_preset *next;
} index_preset;
static index_preset *presets;

static const index_preset *preset_find(const char *dir) {
    char *d = data_dir_dup(dir);
    const index_preset *p = presets;
    while (p && strcmp(p->dir, d) != 0) p = p->next;
    free(d);
    return p;
}

const char *index_preset_text(const char *dir, size_t *len) {
    const index_preset *p = preset_find(dir);
    *len = p ? p->len : 0;
    return p ? p->text : NULL;
}

void dataset_index_preset(const char *dir, const char *text, size_t len) {
    index_preset *p = tsr_calloc(1, sizeof *p);
    p->dir = data_dir_dup(dir);
    p->text = tsr_malloc(len + 1);
    memcpy(p->text, text, len);
    p->text[len] = '\0';
    p->len = len;
    p->next = presets;
    presets = p;
}

int dataset_object_fetch(const char *dir, const char *name, size_t max, char **text,
                         size_t *len) {
    tsr_s3 *c;
    char err[S3_ERR_LEN];
    *text = NULL;
    int rc = s3_open(&c, dir);
    if (!rc && (rc = s3_get(c, name, max, text, len, err)))
        tsr_error("%s (the dataset's %s; docs/object-storage.md)", err,
                  strcmp(name, INDEX_NAME) ? name : "index");
    s3_close(c);
    return rc;
}

int dataset_index_fetch(const char *dir, char **text, size_t *len) {
    return dataset_object_fetch(dir, INDEX_NAME, INDEX_MAX_BYTES, text, len);
}

/* 1 with out set to the value field when line is the note "# KEY<TAB>VALUE..." of key. */
static int note_of_line(const char *line, const char *key, char *out, size_t cap) {
    size_t k = strlen(key);
    if (strncmp(line, "# ", 2) != 0 || strncmp(line + 2, key, k) != 0 || line[2 + k] != '\t')
        return 0;
    snprintf(out, cap, "%.*s", (int)strcspn(line + 3 + k, "\t\r\n"), line + 3 + k);
    return 1;
}

int index_note_in_text(const char *text, const char *key, char *out, size_t cap) {
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (p != text && *p != '#') break;
        if (note_of_line(p, key, out, cap)) return 1;
    }
    return 0;
}

int dataset_index_note_text(const char *dir, const char *key, char *out, size_t cap) {
    char path[4200], line[1024], *text;
    size_t len;
    size_t n = 0;
    const char *pre = index_preset_text(dir, &n);
    out[0] = '\0';
    if (pre) return index_note_in_text(pre, key, out, cap);
    if (s3_is_url(dir)) { /* not preset: fetched */
        int rc = dataset_index_fetch(dir, &text, &len);
        int found = rc ? -1 : index_note_in_text(text, key, out, cap);
        free(text);
        return found;
    }
    if (snprintf(path, sizeof path, "%s/index.tsv", dir) >= (int)sizeof path) return -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int found = 0, first = 1;
    while (!found && fgets(line, sizeof line, f)) {
        if (!first && line[0] != '#') break; /* the magic line, then the comments */
        first = 0;
        found = note_of_line(line, key, out, cap);
    }
    fclose(f);
    return found;
}

int dataset_index_note(const char *dir, const char *key, uint64_t *value) {
    char text[64], *end;
    int found = dataset_index_note_text(dir, key, text, sizeof text);
    if (found != 1) return found;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end || text[0] == '-') return 0;
    *value = v;
    return 1;
}

int dataset_pairs_for(const char *dir, int T, uint64_t *pairs, uint64_t *packed_T) {
    *packed_T = 0;
    if (dataset_index_note(dir, "preference_pairs", pairs) != 1) return 0;
    if (dataset_index_note(dir, "packed_seq_len", packed_T) != 1 || *packed_T != (uint64_t)T)
        return -1;
    return 1;
}

/* fuzz_jsonl.c — the strict JSON Lines parser of `tessera prep` (src/base/json.c), one doc reused
 * across lines as prep does. Input: JSONL text; each line is parsed on its own. For a value that
 * parses, the tree is walked (counts, keys, json_get) so a bad link or length shows under ASan. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "fuzz_common.h"
#include "json.h"

static json_doc g_doc; /* one per process, reused like prep's per-thread doc */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_quiet();
    json_doc_init(&g_doc);
    return 0;
}

/* Touches every byte the tree claims to hold; checks the counts and terminators it states. */
static size_t walk(const json_value *v, int depth) {
    size_t sum = (size_t)v->type;
    if (depth > JSON_MAX_DEPTH + 1) abort(); /* deeper than the parser allows */
    if (v->key && v->key[v->key_len] != '\0') abort(); /* keys are NUL-terminated */
    if (v->key) sum += v->key_len;
    if (v->type == JSON_STRING) {
        if (v->str[v->len] != '\0') abort(); /* strings are NUL-terminated */
        for (size_t i = 0; i < v->len; i++) sum += (unsigned char)v->str[i];
    } else if (v->type == JSON_ARRAY || v->type == JSON_OBJECT) {
        size_t n = 0;
        for (const json_value *c = v->child; c; c = c->next, n++) {
            if ((v->type == JSON_OBJECT) != (c->key != NULL)) abort(); /* members have keys */
            sum += walk(c, depth + 1);
            if (v->type == JSON_OBJECT) { /* found by name, unless the key holds \u0000; then */
                const json_value *g = json_get(v, c->key); /* never a prefix match */
                if ((json_key_plain(c) && !g) || (g && !json_key_is(g, c->key))) abort();
            }
        }
        if (n != v->len) abort(); /* len = number of children */
    }
    return sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *s = (const char *)data, *end = s + size;
    volatile size_t sink = 0;
    while (s <= end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        size_t n = nl ? (size_t)(nl - s) : (size_t)(end - s);
        /* a private copy of exactly n bytes, so a read past the line is caught */
        char *line = malloc(n ? n : 1);
        memcpy(line, s, n);
        json_value *root = NULL;
        json_error err;
        if (json_parse(&g_doc, line, n, &root, &err) == 0) {
            sink += walk(root, 0);
            json_get(root, "text");
        } else if (err.pos > n || !memchr(err.msg, '\0', sizeof err.msg)) {
            abort(); /* the error points outside the line or is not a string */
        }
        free(line);
        if (!nl) break;
        s = nl + 1;
    }
    (void)sink;
    return 0;
}

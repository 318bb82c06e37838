/* test_jinja.c — the chat-template Jinja subset (src/chat/jinja.h).
 *
 *   test_jinja                         unit checks (TAP): each construct, hf's quirks, errors with
 *                                      their line:column, malformed templates never crash
 *   test_jinja --render TMPL CTX...    driver for tests/chat/test_chat_templates.sh: renders the
 *                                      template file with the JSON context files (objects, merged
 *                                      in order) to stdout; on an error prints
 *                                      "error: STATUS: LINE:COL: MESSAGE" to stdout and exits 2
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "tap.h"

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (buf) *n = len;
    return buf;
}

static int render_files(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_jinja --render TEMPLATE [CONTEXT.json ...]\n");
        return 1;
    }
    size_t n;
    char *src = read_file(argv[2], &n);
    if (!src) {
        fprintf(stderr, "test_jinja: cannot read %s\n", argv[2]);
        return 1;
    }
    int nctx = argc - 3;
    json_doc *docs = calloc((size_t)nctx + 1, sizeof *docs);
    const json_value **ctx = calloc((size_t)nctx + 1, sizeof *ctx);
    char **texts = calloc((size_t)nctx + 1, sizeof *texts);
    for (int i = 0; i < nctx; i++) {
        size_t cn;
        json_error je;
        json_value *root;
        json_doc_init(&docs[i]);
        texts[i] = read_file(argv[3 + i], &cn);
        if (!texts[i] || json_parse(&docs[i], texts[i], cn, &root, &je)) {
            fprintf(stderr, "test_jinja: %s: %s\n", argv[3 + i], texts[i] ? je.msg : "cannot read");
            return 1;
        }
        ctx[i] = root;
    }
    jinja_template *t = NULL;
    jinja_error err;
    char *out = NULL;
    size_t out_len = 0;
    int rc = jinja_compile(src, n, &t, &err);
    if (rc == JINJA_OK) rc = jinja_render(t, ctx, (size_t)nctx, &out, &out_len, &err);
    if (rc == JINJA_OK) fwrite(out, 1, out_len, stdout);
    else printf("error: %s: %d:%d: %s\n", jinja_status_name(rc), err.line, err.col, err.msg);
    free(out);
    jinja_free(t);
    for (int i = 0; i < nctx; i++) {
        json_doc_free(&docs[i]);
        free(texts[i]);
    }
    free(docs);
    free(ctx);
    free(texts);
    free(src);
    return rc == JINJA_OK ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--render")) return render_files(argc, argv);
    tap_plan(0);
    return tap_done();
}

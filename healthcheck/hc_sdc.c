/* hc_sdc.c — see hc_sdc.h. */
#include "hc_sdc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hc.h"
#include "json.h"

/* The file's bytes (a regular file of at most HC_SDC_MAX_BYTES) into buf; its length, or -1 */
static long read_record(const char *path, char *buf, char *why, size_t cap) {
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f) {
        snprintf(why, cap, "%s: cannot open it: %s", path, strerror(errno));
        return -1;
    }
    long n = -1;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        snprintf(why, cap, "%s: not a regular file", path);
    else if (st.st_size > HC_SDC_MAX_BYTES)
        snprintf(why, cap, "%s: %lld bytes, a culprit record holds at most %d", path,
                 (long long)st.st_size, HC_SDC_MAX_BYTES);
    else if ((n = (long)fread(buf, 1, HC_SDC_MAX_BYTES, f)) < 0 || ferror(f))
        snprintf(why, cap, "%s: read error", path), n = -1;
    fclose(f);
    return n;
}

/* The string member key of obj (plain: no \u0000), or NULL with why */
static const char *str_member(const json_value *obj, const char *key, const char *path, char *why,
                              size_t cap) {
    const json_value *v = json_get(obj, key);
    if (v && v->type == JSON_STRING && json_str_plain(v)) return v->str;
    snprintf(why, cap, "%s: \"%s\" is %s, expected a string (tessera-train's sdc-culprit.json)",
             path, key, v ? json_type_name(v->type) : "missing");
    return NULL;
}

/* node is one of the comma-separated names of list */
static int listed(const char *list, const char *node) {
    const size_t n = strlen(node);
    for (const char *p = list;;) {
        const size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, node, n)) return 1;
        if (!p[k]) return 0;
        p += k + 1;
    }
}

/* The record's fields into out; 0, or -1 with why */
static int judge_record(const json_value *root, const char *path, const char *node, hc_sdc *out,
                        char *why, size_t cap) {
    const json_value *step = root->type == JSON_OBJECT ? json_get(root, "step") : NULL;
    if (!step || step->type != JSON_NUMBER || step->num < 0 || step->num > 9e15) {
        snprintf(why, cap, "%s: expected an object whose \"step\" is an integer >= 0 "
                 "(tessera-train's sdc-culprit.json)", path);
        return -1;
    }
    const char *tensor = str_member(root, "tensor", path, why, cap);
    const char *verdict = tensor ? str_member(root, "verdict", path, why, cap) : NULL;
    const char *nodes = verdict ? str_member(root, "nodes", path, why, cap) : NULL;
    if (!nodes) return -1;
    out->step = (long long)step->num;
    out->named = listed(nodes, node);
    snprintf(out->reason, sizeof out->reason, "tessera-hc: sdc step %lld %.80s %.40s", out->step,
             tensor, verdict);
    hc_sanitize_reason(out->reason);
    return 0;
}

int hc_sdc_read(const char *path, const char *node, hc_sdc *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    char *buf = malloc(HC_SDC_MAX_BYTES);
    if (!buf) {
        snprintf(why, cap, "out of memory");
        return 2;
    }
    long n = read_record(path, buf, why, cap);
    json_doc d;
    json_doc_init(&d);
    json_value *root = NULL;
    json_error err;
    int rc = n < 0 ? -1 : json_parse(&d, buf, (size_t)n, &root, &err);
    if (n >= 0 && rc)
        snprintf(why, cap, "%s: not JSON at byte %zu: %s", path, err.pos, err.msg);
    if (!rc) rc = judge_record(root, path, node, out, why, cap);
    json_doc_free(&d);
    free(buf);
    return rc ? 2 : 0;
}

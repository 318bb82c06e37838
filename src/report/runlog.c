/* runlog.c — see runlog.h. A small JSON reader for one flat object per line: the keys of
 * runlog_field become numbers (or absent when null); strings, booleans, nested objects and arrays
 * are checked for syntax (RFC 8259) and skipped. No library: the format is ours and flat. */
#include "report/runlog.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char *const field_names[] = {
    "step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "step_time_s",
    "val_loss", "val_ppl",
};
_Static_assert(sizeof field_names / sizeof field_names[0] == RL_FIELD_COUNT,
               "one name per runlog_field");

const char *runlog_field_name(runlog_field f) { return field_names[f]; }

#define MAX_DEPTH 64

/* The parse cursor of one line; err holds the first error ("expected ..."), at = its column. */
typedef struct jcur {
    const char *s, *p;
    const char *err;
} jcur;

static int fail(jcur *c, const char *what) {
    if (!c->err) c->err = what;
    return -1;
}

static void ws(jcur *c) {
    while (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n') c->p++;
}

static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int hexval(char ch) {
    if (is_digit(ch)) return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* A string at the cursor; its bytes (escapes decoded, \u as '?' above ASCII) into out[n] when
 * out is not NULL, truncated. */
static int parse_string(jcur *c, char *out, size_t n) {
    size_t k = 0;
    if (*c->p != '"') return fail(c, "expected a string");
    c->p++;
    for (;;) {
        unsigned char ch = (unsigned char)*c->p;
        if (ch == '\0') return fail(c, "unterminated string");
        if (ch < 0x20) return fail(c, "control character in a string");
        c->p++;
        if (ch == '"') break;
        if (ch == '\\') {
            char e = *c->p++;
            switch (e) {
            case '"': case '\\': case '/': ch = (unsigned char)e; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': {
                int u = 0;
                for (int i = 0; i < 4; i++) {
                    int h = hexval(*c->p);
                    if (h < 0) return fail(c, "expected 4 hex digits after \\u");
                    u = u * 16 + h;
                    c->p++;
                }
                ch = u < 0x80 ? (unsigned char)u : '?';
                break;
            }
            default: c->p--; return fail(c, "invalid escape in a string");
            }
        }
        if (out && k + 1 < n) out[k++] = (char)ch;
    }
    if (out && n) out[k] = '\0';
    return 0;
}

/* A number at the cursor, by JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(jcur *c, double *v) {
    const char *q = c->p;
    if (*q == '-') q++;
    if (*q == '0') q++;
    else if (is_digit(*q)) while (is_digit(*q)) q++;
    else return fail(c, "expected a value");
    if (*q == '.') {
        q++;
        if (!is_digit(*q)) return fail(c, "expected a digit after '.'");
        while (is_digit(*q)) q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!is_digit(*q)) return fail(c, "expected a digit in the exponent");
        while (is_digit(*q)) q++;
    }
    char *end;
    errno = 0;
    *v = strtod(c->p, &end);
    if (end != q) return fail(c, "malformed number");
    c->p = q;
    return 0;
}

static int literal(jcur *c, const char *word) {
    size_t n = strlen(word);
    if (strncmp(c->p, word, n) != 0) return fail(c, "expected a value");
    c->p += n;
    return 0;
}

static int skip_value(jcur *c, int depth);

/* An object or array at the cursor ('{' or '['), skipped. */
static int skip_container(jcur *c, int depth) {
    char close = *c->p == '{' ? '}' : ']';
    if (depth >= MAX_DEPTH) return fail(c, "nested deeper than 64 levels");
    c->p++;
    ws(c);
    if (*c->p == close) return c->p++, 0;
    for (;;) {
        if (close == '}') {
            if (parse_string(c, NULL, 0)) return -1;
            ws(c);
            if (*c->p != ':') return fail(c, "expected ':'");
            c->p++;
            ws(c);
        }
        if (skip_value(c, depth + 1)) return -1;
        ws(c);
        if (*c->p == close) return c->p++, 0;
        if (*c->p != ',')
            return fail(c, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
        c->p++;
        ws(c);
    }
}

static int skip_value(jcur *c, int depth) {
    double v;
    switch (*c->p) {
    case '"': return parse_string(c, NULL, 0);
    case '{': case '[': return skip_container(c, depth);
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    case 'n': return literal(c, "null");
    default: return parse_number(c, &v);
    }
}

enum { LINE_OTHER, LINE_STEP, LINE_EVAL };

/* One line: an object whose runlog_field keys are numbers or null. Returns LINE_* or -1. */
static int parse_line(jcur *c, runlog_point *pt) {
    unsigned seen = 0;
    int event = 0;
    memset(pt, 0, sizeof *pt);
    ws(c);
    if (*c->p != '{') return fail(c, "expected '{' (one JSON object per line)");
    c->p++;
    ws(c);
    if (*c->p == '}') c->p++;
    else for (;;) {
        char key[64];
        if (parse_string(c, key, sizeof key)) return -1;
        ws(c);
        if (*c->p != ':') return fail(c, "expected ':'");
        c->p++;
        ws(c);
        int f = RL_FIELD_COUNT;
        for (int k = 0; k < RL_FIELD_COUNT; k++)
            if (!strcmp(key, field_names[k])) f = k;
        if (!strcmp(key, "event")) event = 1;
        if (f < RL_FIELD_COUNT) {
            seen |= 1u << f;
            if (*c->p == 'n') {
                if (literal(c, "null")) return -1;
            } else {
                if (*c->p != '-' && !is_digit(*c->p)) return fail(c, "expected a number or null");
                if (parse_number(c, &pt->v[f])) return -1;
                pt->has |= 1u << f;
            }
        } else if (skip_value(c, 1)) {
            return -1;
        }
        ws(c);
        if (*c->p == '}') {
            c->p++;
            break;
        }
        if (*c->p != ',') return fail(c, "expected ',' or '}'");
        c->p++;
        ws(c);
    }
    ws(c);
    if (*c->p) return fail(c, "unexpected text after the object");
    if (event || !(pt->has & 1u << RL_STEP)) return LINE_OTHER;
    double sv = pt->v[RL_STEP];
    if (!(sv >= 0 && sv < 9e18) || (double)(int64_t)sv != sv)
        return fail(c, "\"step\" is not an integer in [0, 9e18)");
    pt->step = (int64_t)sv;
    if (seen & 1u << RL_LOSS) return LINE_STEP;
    if (seen & 1u << RL_VAL_LOSS) return LINE_EVAL;
    return LINE_OTHER; /* a checkpoint line */
}

static void push(runlog_point **a, size_t *n, size_t *cap, const runlog_point *pt) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        runlog_point *p = realloc(*a, *cap * sizeof **a);
        if (!p) tsr_die(TSR_EXIT_INTERNAL, "runlog: realloc(%zu points): out of memory", *cap);
        *a = p;
    }
    (*a)[(*n)++] = *pt;
}

static int by_step_then_line(const void *x, const void *y) {
    const runlog_point *a = x, *b = y;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    return a->line < b->line ? -1 : a->line > b->line;
}

/* Sorts by step and keeps the last line of each step. */
static size_t one_per_step(runlog_point *a, size_t n) {
    if (n == 0) return 0;
    qsort(a, n, sizeof *a, by_step_then_line);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && a[k - 1].step == a[i].step) a[k - 1] = a[i];
        else a[k++] = a[i];
    }
    return k;
}

int runlog_read(runlog *rl, const char *path) {
    memset(rl, 0, sizeof *rl);
    FILE *f = fopen(path, "r");
    if (!f) {
        tsr_error("%s: cannot open: %s (is this a run directory of tessera-train?)", path,
                  strerror(errno));
        return TSR_EXIT_DATA;
    }
    char *line = NULL;
    size_t cap = 0, cap_t = 0, cap_e = 0, lineno = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(line)) {
            tsr_error("%s:%zu: not JSON: a NUL byte in the line", path, lineno);
            rc = TSR_EXIT_DATA;
            break;
        }
        jcur c = {line, line, NULL};
        ws(&c);
        if (!*c.p) continue; /* a blank line */
        runlog_point pt;
        int kind = parse_line(&c, &pt);
        if (kind < 0) {
            tsr_error("%s:%zu:%zu: not JSON: %s", path, lineno, (size_t)(c.p - c.s) + 1, c.err);
            rc = TSR_EXIT_DATA;
            break;
        }
        pt.line = lineno;
        if (kind == LINE_STEP) push(&rl->train, &rl->n_train, &cap_t, &pt), rl->train_lines++;
        if (kind == LINE_EVAL) push(&rl->eval, &rl->n_eval, &cap_e, &pt), rl->eval_lines++;
    }
    if (!rc && ferror(f)) {
        tsr_error("%s: read error: %s", path, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    free(line);
    fclose(f);
    if (rc) {
        runlog_free(rl);
        return rc;
    }
    rl->n_train = one_per_step(rl->train, rl->n_train);
    rl->n_eval = one_per_step(rl->eval, rl->n_eval);
    return 0;
}

void runlog_free(runlog *rl) {
    free(rl->train);
    free(rl->eval);
    memset(rl, 0, sizeof *rl);
}

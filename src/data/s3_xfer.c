/* s3_xfer.c — the requests of the object-store client (s3.h, docs/object-storage.md): ranged GETs
 * into files, GETs into memory, HEAD, PUT and multipart uploads, over libcurl.
 *
 * libcurl signs every request (AWS SigV4, CURLOPT_AWS_SIGV4) and sends it as built: http or https
 * only (redirects too), the path as given (CURLOPT_PATH_AS_IS: no dot-segment removal), with
 * x-amz-content-sha256: UNSIGNED-PAYLOAD (libcurl 7.88 does not send it, and servers that check it
 * refuse the request without). The store is untrusted: every transfer has a deadline (TSR_S3_GRACE_S
 * + its bytes / TSR_S3_MIN_RATE), no body is taken past its bound (the range asked, or the most the
 * object may hold), and every text of the server that a message quotes is made printable.
 */
#include "data/s3.h"

#ifndef TSR_NO_CURL /* (a build without the target's libcurl: Makefile, CROSS) */
#include <curl/curl.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "data/s3_impl.h"
#include "strbuf.h"

#ifdef TSR_NO_CURL /* s3_open refuses every url: no tsr_s3 reaches these */
int s3_get_files(tsr_s3 *c, s3_fetch *f, int n, int parallel, _Atomic int *cancel) {
    (void)c, (void)f, (void)n, (void)parallel, (void)cancel;
    return TSR_EXIT_USAGE;
}
int s3_get(tsr_s3 *c, const char *name, size_t max, char **body, size_t *len,
           char err[S3_ERR_LEN]) {
    (void)c, (void)name, (void)max, (void)body, (void)len;
    tsr_snprintf(err, S3_ERR_LEN, "no libcurl in this build");
    return TSR_EXIT_USAGE;
}
int s3_head(tsr_s3 *c, const char *name, int *found, char err[S3_ERR_LEN]) {
    (void)c, (void)name, (void)found;
    tsr_snprintf(err, S3_ERR_LEN, "no libcurl in this build");
    return TSR_EXIT_USAGE;
}
int s3_put_file(tsr_s3 *c, const char *name, const char *path, int *parts,
                char err[S3_ERR_LEN]) {
    (void)c, (void)name, (void)path, (void)parts;
    tsr_snprintf(err, S3_ERR_LEN, "no libcurl in this build");
    return TSR_EXIT_USAGE;
}
#else

#define SIZE_UNKNOWN UINT64_MAX
#define ANSWER_MAX (1u << 20) /* the most an answer to a PUT, POST or DELETE may hold */

typedef struct xfer {
    const tsr_s3 *c;
    CURL *h;
    struct curl_slist *hdrs;
    FILE *fp;           /* body to a file, or */
    strbuf mem;         /* to memory */
    uint64_t limit;     /* the most body bytes of a 2xx answer taken: the range asked, the bound */
    uint64_t expect;    /* the body's size when known before the answer, else SIZE_UNKNOWN */
    uint64_t send;      /* the bytes the request sends (a multipart Complete: the object's) */
    int head;           /* a HEAD: no body, its Content-Length is the object's */
    /* one try's state (xfer_reset) */
    double t0;          /* when it started */
    int status;         /* the HTTP status of the answer's last status line */
    uint64_t clen;      /* its Content-Length (a 2xx answer's), SIZE_UNKNOWN when none */
    int in_body, late, over; /* a 2xx body began; past the deadline; a body over limit */
    uint64_t got, moved; /* body bytes of a 2xx answer; bytes moved either way */
    long http;          /* the status xfer_outcome judged (kept across xfer_reset) */
    char ebody[1024];   /* the start of an error answer's body */
    size_t ebody_len;
    char etag[S3_ETAG_LEN]; /* the answer's ETag header, printable, "" when none */
} xfer;

/* The answer's bytes the deadline allows for: the size known before, else the Content-Length,
 * else (a body without one) the bound; 0 until the answer's headers have come. */
static uint64_t recv_bytes(const xfer *x) {
    if (x->expect != SIZE_UNKNOWN) return x->expect;
    return x->clen != SIZE_UNKNOWN ? x->clen : x->in_body ? x->limit : 0;
}

/* Seconds from the start a try may take: TSR_S3_GRACE_S + its bytes / TSR_S3_MIN_RATE. */
static double allowed_s(const xfer *x) {
    return x->c->grace_s + (double)(x->send + recv_bytes(x)) / x->c->min_rate;
}

/* in[0..len) into out with every byte outside printable ASCII as \xNN (a server's text in a
 * message: no terminal escapes). */
static void printable(const char *in, size_t len, char *out, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < len && in[i] && o + 5 < n; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') out[o++] = (char)ch;
        else o += (size_t)snprintf(out + o, n - o, "\\x%02x", ch);
    }
    out[o] = '\0';
}

/* A header's decimal value (saturated at UINT64_MAX). */
static uint64_t header_number(const char *p, size_t len) {
    uint64_t v = 0;
    size_t i = strspn(p, " \t");
    for (; i < len && p[i] >= '0' && p[i] <= '9'; i++)
        v = v > (UINT64_MAX - 9) / 10 ? UINT64_MAX : v * 10 + (uint64_t)(p[i] - '0');
    return v;
}

/* The status line, Content-Length (a 2xx answer's: one over the limit stops the transfer here)
 * and ETag of the answer. */
static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t len = sz * nm;
    if (len > 9 && strncmp(p, "HTTP/", 5) == 0) { /* a new answer (after a 100 Continue) */
        const char *sp = memchr(p, ' ', len);
        x->status = sp ? (int)header_number(sp, len - (size_t)(sp - p)) : 0;
        x->clen = SIZE_UNKNOWN;
        x->etag[0] = '\0';
    } else if (len > 15 && strncasecmp(p, "content-length:", 15) == 0 && !x->head &&
               x->status >= 200 && x->status < 300) {
        x->clen = header_number(p + 15, len - 15);
        if (x->clen > x->limit) return x->over = 1, 0; /* not one byte of it taken */
    } else if (len > 5 && strncasecmp(p, "etag:", 5) == 0) {
        size_t a = 5 + strspn(p + 5, " \t"), b = len;
        while (b > a && strchr(" \t\r\n", p[b - 1])) b--;
        printable(p + a, b - a, x->etag, sizeof x->etag);
    }
    return len;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t len = sz * nm;
    if (x->status < 200 || x->status >= 300) {
        size_t room = sizeof x->ebody - 1 - x->ebody_len, k = len < room ? len : room;
        memcpy(x->ebody + x->ebody_len, p, k);
        x->ebody_len += k;
        x->ebody[x->ebody_len] = '\0';
        return len;
    }
    x->in_body = 1;
    if (len > x->limit - x->got) return x->over = 1, 0; /* stopped at the bound */
    x->got += len;
    if (x->fp) return fwrite(p, 1, len, x->fp) == len ? len : 0;
    sb_addn(&x->mem, p, len);
    return len;
}

/* Called by libcurl about once a second and on every step: a try past its deadline stops. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    xfer *x = ud;
    (void)dltotal, (void)ultotal;
    x->moved = (uint64_t)dlnow + (uint64_t)ulnow;
    if (tsr_now() - x->t0 <= allowed_s(x)) return 0;
    x->late = 1;
    return 1;
}

/* What a transfer moves and takes: expect (SIZE_UNKNOWN or the body's size), the bound of its
 * answer's body, the bytes it sends. */
static void xfer_plan(xfer *x, uint64_t expect, uint64_t limit, uint64_t send) {
    x->expect = expect;
    x->limit = limit;
    x->send = send;
}

/* The per-request headers: the payload header, the session token. (No "Expect:" to turn off
 * libcurl's "Expect: 100-continue": libcurl 7.88 would sign that empty header as "expect:", which
 * the request then does not carry, and a store that checks finds the signature wrong.) */
static struct curl_slist *xfer_headers(const tsr_s3 *c) {
    struct curl_slist *h = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (c->token[0]) {
        size_t n = strlen(c->token) + 32;
        char *tok = tsr_malloc(n);
        snprintf(tok, n, "x-amz-security-token: %s", c->token);
        h = curl_slist_append(h, tok);
        memset(tok, 0, strlen(tok));
        free(tok);
    }
    return h;
}

/* A fresh handle for object `name` (query: "" or "k=v&..." in canonical order): signed, with the
 * headers, the deadline, the body and header sinks. 0, or -1 with err set (a key this client
 * does not send). */
static int xfer_setup(const tsr_s3 *c, xfer *x, const char *verb, const char *name,
                      const char *query, char *err) {
    char url[3 * S3_KEY_MAX + 2400], what[S3_ERR_LEN];
    if (s3_object_url(c, name, url, sizeof url) ||
        (query[0] && tsr_snprintf(url + strlen(url), sizeof url - strlen(url), "?%s", query))) {
        s3_describe(c, name, what, sizeof what);
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: not a key this client sends (longer than %d bytes, "
                     "or a \".\" or \"..\" segment)", verb, what, S3_KEY_MAX);
        return -1;
    }
    x->c = c;
    x->h = curl_easy_init();
    if (!x->h) tsr_die(TSR_EXIT_INTERNAL, "curl_easy_init failed (out of memory?)");
    x->hdrs = xfer_headers(c);
    x->t0 = tsr_now();
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    curl_easy_setopt(x->h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(x->h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(x->h, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(x->h, CURLOPT_AWS_SIGV4, c->sigv4);
    curl_easy_setopt(x->h, CURLOPT_USERNAME, c->key);
    curl_easy_setopt(x->h, CURLOPT_PASSWORD, c->secret);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_LIMIT, 1L); /* nothing for a minute: a timeout */
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_TIME, (long)(c->grace_s > 60 ? c->grace_s + 1 : 60));
    curl_easy_setopt(x->h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(x->h, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(x->h, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
    return 0;
}

/* Ends a try: its handle freed, its state cleared (what it moves and its body sink stay). */
static void xfer_reset(xfer *x) {
    if (x->h) curl_easy_cleanup(x->h);
    curl_slist_free_all(x->hdrs);
    x->h = NULL;
    x->hdrs = NULL;
    x->status = 0;
    x->clen = SIZE_UNKNOWN;
    x->in_body = x->late = x->over = 0;
    x->got = x->moved = 0;
    x->ebody_len = 0;
    x->ebody[0] = '\0';
    x->etag[0] = '\0';
}

/* The S3 error code of an error body (<Code>AccessDenied</Code>) as " CODE", printable; or "". */
static void s3_code(const char *body, char *out, size_t n) {
    const char *a = strstr(body, "<Code>"), *b = a ? strstr(a, "</Code>") : NULL;
    out[0] = '\0';
    if (!a || !b || n < 2) return;
    out[0] = ' ';
    printable(a + 6, (size_t)(b - a - 6) < 100 ? (size_t)(b - a - 6) : 100, out + 1, n - 1);
}

enum { XF_OK, XF_RETRY, XF_FATAL };

/* "6612 bytes", "its answer's 812 bytes", ... : what a try had to move, for a message. */
static void size_text(const xfer *x, char *out, size_t n) {
    uint64_t r = recv_bytes(x);
    if (x->send && !r) snprintf(out, n, "%llu bytes to send", (unsigned long long)x->send);
    else if (x->expect != SIZE_UNKNOWN || x->clen != SIZE_UNKNOWN)
        snprintf(out, n, "%llu bytes", (unsigned long long)(x->send + r));
    else if (x->in_body) snprintf(out, n, "a body of unknown size (at most %llu bytes)",
                                  (unsigned long long)x->limit);
    else snprintf(out, n, "an answer");
}

/* A try past its deadline: what it moved, the deadline and how it was set. */
static int timed_out(const xfer *x, const char *verb, const char *what, char *err) {
    char size[96];
    size_text(x, size, sizeof size);
    tsr_snprintf(err, S3_ERR_LEN, "%s %s: timed out: %llu bytes of %s moved in %.1f s, past its "
                 "deadline of %.1f s (TSR_S3_GRACE_S %.3g s + %llu bytes at TSR_S3_MIN_RATE %.0f "
                 "bytes/s)", verb, what, (unsigned long long)x->moved, size, tsr_now() - x->t0,
                 allowed_s(x), x->c->grace_s, (unsigned long long)(x->send + recv_bytes(x)),
                 x->c->min_rate);
    return XF_RETRY;
}

/* A body over its bound: final (the same object would be as large again). */
static int over_bound(const xfer *x, const char *verb, const char *what, char *err) {
    char how[64] = "more than that sent";
    if (x->clen != SIZE_UNKNOWN)
        snprintf(how, sizeof how, "Content-Length %llu", (unsigned long long)x->clen);
    tsr_snprintf(err, S3_ERR_LEN, "%s %s: the answer is larger than the %llu bytes %s (%s): "
                 "stopped there, not fetched again", verb, what, (unsigned long long)x->limit,
                 x->expect != SIZE_UNKNOWN ? "asked for" : "this object may hold", how);
    return XF_FATAL;
}

/* The outcome of a finished try (a body of x->expect bytes wanted when known); err gets the
 * fault. */
static int xfer_outcome(xfer *x, CURLcode res, const char *verb, const char *name, char *err) {
    char what[S3_ERR_LEN], code[128];
    s3_describe(x->c, name, what, sizeof what);
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->http);
    if (x->late) return timed_out(x, verb, what, err);
    if (x->over) return over_bound(x, verb, what, err);
    if (res != CURLE_OK) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: %s", verb, what, curl_easy_strerror(res));
        return XF_RETRY;
    }
    s3_code(x->ebody, code, sizeof code);
    if (x->http >= 500 || x->http == 429) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: HTTP %ld%s", verb, what, x->http, code);
        return XF_RETRY;
    }
    if (x->http >= 300) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: HTTP %ld%s%s", verb, what, x->http, code,
                     x->http == 403 ? " (access denied: check the credentials of the profile and "
                     "the bucket's policy)" : x->http == 404 ? " (no such bucket or key)" : "");
        return XF_FATAL;
    }
    if (!x->head && x->expect != SIZE_UNKNOWN && x->got != x->expect) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: %llu bytes, expected %llu (a cut-off body)", verb,
                     what, (unsigned long long)x->got, (unsigned long long)x->expect);
        return XF_RETRY;
    }
    return XF_OK;
}

/* A fault still there after `tries` tries: said at the end of err. */
static void note_tries(char *err, int tries) {
    size_t n = strlen(err);
    if (tries > 1) tsr_snprintf(err + n, S3_ERR_LEN - n, "; %d tries (TSR_S3_RETRIES)", tries);
}

/* Sleeps before try `t` (1, 2, ...): 0.2 s x 2^(t-1), at most 10 s, times a jitter in [0.5, 1.5). */
static void backoff(int t) {
    static _Thread_local unsigned seed;
    if (!seed) seed = (unsigned)time(NULL) ^ (unsigned)getpid() ^ (unsigned)(uintptr_t)&seed;
    double d = 0.2 * (double)(1u << (t - 1 < 6 ? t - 1 : 6));
    if (d > 10) d = 10;
    d *= 0.5 + (double)rand_r(&seed) / ((double)RAND_MAX + 1);
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- transfers at once */

/* n transfers run over one curl multi handle: start(ctx, i, x) sets up item i's handle in x (0, or
 * -1: a fault it recorded), finish(ctx, i, x, res) judges its answer (XF_OK, XF_RETRY, XF_FATAL),
 * give_up(ctx, i, rc, tries) records an item that failed for good (rc TSR_EXIT_DATA; tries > 0
 * when its retries ran out) or was cancelled (rc -1). The GETs of s3_get_files and the parts of a
 * multipart upload. */
typedef struct multi_ops {
    int (*start)(tsr_s3 *c, void *ctx, int i, xfer *x);
    int (*finish)(tsr_s3 *c, void *ctx, int i, xfer *x, CURLcode res);
    void (*give_up)(void *ctx, int i, int rc, int tries);
} multi_ops;

enum { XF_CANCEL = XF_FATAL + 1 };

/* The transfers still running after a cancel: removed, their files closed. */
static void multi_drop(CURLM *mh, xfer *xs, int m) {
    for (int j = 0; j < m; j++) {
        if (!xs[j].h) continue;
        curl_multi_remove_handle(mh, xs[j].h);
        if (xs[j].fp) fclose(xs[j].fp);
        xs[j].fp = NULL;
        xfer_reset(&xs[j]);
    }
}

/* The finished transfers of mh judged into outcome[]; returns how many finished. */
static int multi_collect(tsr_s3 *c, const multi_ops *ops, void *ctx, CURLM *mh, xfer *xs,
                         const int *idx, int *outcome) {
    CURLMsg *msg;
    int left, done = 0;
    while ((msg = curl_multi_info_read(mh, &left))) {
        if (msg->msg != CURLMSG_DONE) continue;
        intptr_t j;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&j);
        outcome[j] = ops->finish(c, ctx, idx[j], &xs[j], msg->data.result);
        curl_multi_remove_handle(mh, xs[j].h);
        free(xs[j].mem.s);
        xs[j].mem = (strbuf){0};
        xfer_reset(&xs[j]);
        done++;
    }
    return done;
}

/* One round: every item in idx[0..m) tried once, at most `parallel` at a time; outcome[j] set
 * (XF_CANCEL for those not finished when *cancel turns non-zero). */
static void multi_round(tsr_s3 *c, const multi_ops *ops, void *ctx, const int *idx, int m,
                        int parallel, int *outcome, _Atomic int *cancel) {
    CURLM *mh = curl_multi_init();
    xfer *xs = tsr_calloc((size_t)m, sizeof *xs);
    int next = 0, running = 0;
    for (int j = 0; j < m; j++) outcome[j] = XF_CANCEL;
    while (!(cancel && atomic_load(cancel))) {
        while (running < parallel && next < m) {
            int j = next++;
            if (ops->start(c, ctx, idx[j], &xs[j])) {
                outcome[j] = XF_FATAL;
                xfer_reset(&xs[j]);
                continue;
            }
            curl_easy_setopt(xs[j].h, CURLOPT_PRIVATE, (void *)(intptr_t)j);
            curl_multi_add_handle(mh, xs[j].h);
            running++;
        }
        if (!running) break;
        int still;
        curl_multi_perform(mh, &still);
        running -= multi_collect(c, ops, ctx, mh, xs, idx, outcome);
        if (running) curl_multi_poll(mh, NULL, 0, 200, NULL);
    }
    multi_drop(mh, xs, next);
    free(xs);
    curl_multi_cleanup(mh);
}

/* Items 0..n-1 in rounds with backoff between them: those that answer XF_RETRY are tried again,
 * c->retries tries in all. Returns the number that failed or were cancelled (give_up told). */
static int multi_run(tsr_s3 *c, const multi_ops *ops, void *ctx, int n, int parallel,
                     _Atomic int *cancel) {
    int *idx = tsr_malloc(((size_t)n + 1) * sizeof *idx), *out = tsr_malloc(((size_t)n + 1) * sizeof *out);
    int m = 0, failed = 0;
    for (int i = 0; i < n; i++) idx[m++] = i;
    for (int t = 1; m > 0; t++) {
        if (t > 1 && !(cancel && atomic_load(cancel))) backoff(t - 1);
        multi_round(c, ops, ctx, idx, m, parallel < 1 ? 1 : parallel, out, cancel);
        int again = 0;
        for (int j = 0; j < m; j++) {
            if (out[j] == XF_OK) continue;
            if (out[j] == XF_RETRY && t < c->retries) {
                idx[again++] = idx[j];
                continue;
            }
            ops->give_up(ctx, idx[j], out[j] == XF_CANCEL ? -1 : TSR_EXIT_DATA,
                         out[j] == XF_RETRY ? t : 0);
            failed++;
        }
        m = again;
    }
    free(idx);
    free(out);
    return failed;
}

/* ---------------------------------------------------------------- GET to files */

/* Starts item i's transfer: its file opened, a ranged GET of [0, size). */
static int fetch_start(tsr_s3 *c, void *ctx, int i, xfer *x) {
    s3_fetch *f = (s3_fetch *)ctx + i;
    char range[64];
    xfer_reset(x);
    xfer_plan(x, f->size, f->size, 0);
    x->fp = fopen(f->path, "wb");
    if (!x->fp) {
        tsr_snprintf(f->err, S3_ERR_LEN, "cannot create %s: %s", f->path, strerror(errno));
        return -1;
    }
    if (xfer_setup(c, x, "GET", f->name, "", f->err)) {
        fclose(x->fp);
        x->fp = NULL;
        return -1;
    }
    snprintf(range, sizeof range, "0-%llu", (unsigned long long)(f->size - 1));
    if (f->size) curl_easy_setopt(x->h, CURLOPT_RANGE, range);
    return 0;
}

static int fetch_finish(tsr_s3 *c, void *ctx, int i, xfer *x, CURLcode res) {
    s3_fetch *f = (s3_fetch *)ctx + i;
    (void)c;
    int ok = fclose(x->fp) == 0;
    x->fp = NULL;
    int r = xfer_outcome(x, res, "GET", f->name, f->err);
    snprintf(f->etag, sizeof f->etag, "%s", x->etag);
    return r == XF_OK && !ok ? XF_FATAL : r;
}

static void fetch_give_up(void *ctx, int i, int rc, int tries) {
    s3_fetch *f = (s3_fetch *)ctx + i;
    f->rc = rc;
    if (rc < 0) snprintf(f->err, S3_ERR_LEN, "cancelled");
    else note_tries(f->err, tries);
}

int s3_get_files(tsr_s3 *c, s3_fetch *f, int n, int parallel, _Atomic int *cancel) {
    static const multi_ops ops = {fetch_start, fetch_finish, fetch_give_up};
    for (int i = 0; i < n; i++) f[i].rc = 0, f[i].err[0] = f[i].etag[0] = '\0';
    return multi_run(c, &ops, f, n, parallel, cancel);
}

/* ---------------------------------------------------------------- GET, HEAD, PUT */

/* One request with the retries: prepare(x) sets the method and body source for each try. The
 * answer's body is left in x->mem (the caller frees it), its ETag in x->etag, its status in
 * x->http. */
static int request(tsr_s3 *c, xfer *x, const char *verb, const char *name, const char *query,
                   int (*prepare)(xfer *, void *), void *arg, char *err) {
    int r = XF_RETRY, t = 0;
    while (r == XF_RETRY && t < c->retries) {
        if (t++) backoff(t - 1);
        xfer_reset(x);
        x->mem.n = 0; /* a retry starts the body again */
        if (x->mem.s) x->mem.s[0] = '\0';
        if (xfer_setup(c, x, verb, name, query, err)) return TSR_EXIT_DATA;
        if (prepare && prepare(x, arg)) {
            tsr_snprintf(err, S3_ERR_LEN, "%s %s: cannot read the local file", verb, name);
            r = XF_FATAL;
            break;
        }
        r = xfer_outcome(x, curl_easy_perform(x->h), verb, name, err);
    }
    if (r == XF_RETRY) note_tries(err, t);
    char etag[S3_ETAG_LEN];
    memcpy(etag, x->etag, sizeof etag);
    xfer_reset(x);
    memcpy(x->etag, etag, sizeof etag);
    return r == XF_OK ? 0 : TSR_EXIT_DATA;
}

int s3_get(tsr_s3 *c, const char *name, size_t max, char **body, size_t *len,
           char err[S3_ERR_LEN]) {
    xfer x = {0};
    xfer_plan(&x, SIZE_UNKNOWN, max, 0);
    int rc = request(c, &x, "GET", name, "", NULL, NULL, err);
    if (rc) {
        free(x.mem.s);
        return rc;
    }
    sb_add(&x.mem, ""); /* an empty object: "" */
    *body = x.mem.s;
    *len = x.mem.n;
    return 0;
}

static int head_prepare(xfer *x, void *arg) {
    (void)arg;
    curl_easy_setopt(x->h, CURLOPT_NOBODY, 1L);
    return 0;
}

int s3_head(tsr_s3 *c, const char *name, int *found, char err[S3_ERR_LEN]) {
    xfer x = {.head = 1};
    xfer_plan(&x, 0, 0, 0);
    int rc = request(c, &x, "HEAD", name, "", head_prepare, NULL, err);
    free(x.mem.s);
    *found = !rc;
    return rc && x.http == 404 ? 0 : rc;
}

/* The bytes [off, off + len) of a local file as a request body (pread: parts of one file are
 * read at once by several transfers). */
typedef struct put_src {
    int fd;
    uint64_t off, len, left;
} put_src;

static size_t put_read(char *buf, size_t sz, size_t nm, void *ud) {
    put_src *p = ud;
    size_t want = sz * nm < p->left ? sz * nm : (size_t)p->left;
    ssize_t got = want ? pread(p->fd, buf, want, (off_t)(p->off + p->len - p->left)) : 0;
    if (got < (ssize_t)want) return CURL_READFUNC_ABORT;
    p->left -= (uint64_t)got;
    return (size_t)got;
}

static int put_prepare(xfer *x, void *arg) {
    put_src *p = arg;
    p->left = p->len;
    x->send = p->len;
    curl_easy_setopt(x->h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(x->h, CURLOPT_READFUNCTION, put_read);
    curl_easy_setopt(x->h, CURLOPT_READDATA, p);
    curl_easy_setopt(x->h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)p->len);
    return 0;
}

/* A POST's XML text ("" for none) and the bytes of work it asks of the store beyond its text
 * (a CompleteMultipartUpload: the object's size), for its deadline. */
typedef struct post_src {
    const char *body;
    uint64_t work;
} post_src;

static int post_prepare(xfer *x, void *arg) {
    const post_src *p = arg;
    x->send = strlen(p->body) + p->work;
    x->hdrs = curl_slist_append(x->hdrs, "Content-Type: application/xml");
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_POST, 1L);
    curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(p->body));
    curl_easy_setopt(x->h, CURLOPT_COPYPOSTFIELDS, p->body);
    return 0;
}

static int delete_prepare(xfer *x, void *arg) {
    (void)arg;
    curl_easy_setopt(x->h, CURLOPT_CUSTOMREQUEST, "DELETE");
    return 0;
}

/* The text of <tag>...</tag> in body into out; 1 when found. */
static int xml_text(const char *body, const char *tag, char *out, size_t n) {
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = body ? strstr(body, open) : NULL, *b = a ? strstr(a, close) : NULL;
    if (!a || !b || b == a + strlen(open)) return 0;
    a += strlen(open);
    return snprintf(out, n, "%.*s", (int)(b - a), a) < (int)n;
}

/* One part of a multipart upload: its bytes, its outcome, the ETag the store answered. */
typedef struct upload_part {
    put_src src;
    int rc;
    char err[S3_ERR_LEN];
    char etag[S3_ETAG_LEN];
} upload_part;

/* One multipart upload in progress (CreateMultipartUpload .. Complete or Abort). */
typedef struct upload {
    tsr_s3 *c;
    const char *name;
    uint64_t size;
    char id[512], query[1600];
    upload_part *p; /* the parts, in order */
    int n;
    _Atomic int stop; /* a part failed for good: the others are not sent */
} upload;

/* POST ?uploads=: the upload id. */
static int upload_create(upload *u, xfer *x, char *err) {
    post_src none = {"", 0};
    xfer_plan(x, SIZE_UNKNOWN, ANSWER_MAX, 0);
    int rc = request(u->c, x, "POST (create multipart upload)", u->name, "uploads=", post_prepare,
                     &none, err);
    char enc[sizeof u->id * 3];
    if (!rc && !xml_text(x->mem.s, "UploadId", u->id, sizeof u->id)) {
        tsr_snprintf(err, S3_ERR_LEN, "POST %s?uploads: no UploadId in the answer (or one over "
                     "%zu bytes)", u->name, sizeof u->id - 1);
        rc = TSR_EXIT_DATA;
    }
    s3_pct_encode(u->id, "", enc, sizeof enc);
    tsr_snprintf(u->query, sizeof u->query, "uploadId=%s", enc);
    return rc;
}

/* PUT ?partNumber=i+1&uploadId=: part i's transfer. */
static int part_start(tsr_s3 *c, void *ctx, int i, xfer *x) {
    upload *u = ctx;
    char q[sizeof u->query + 32];
    tsr_snprintf(q, sizeof q, "partNumber=%d&%s", i + 1, u->query);
    xfer_reset(x);
    xfer_plan(x, SIZE_UNKNOWN, ANSWER_MAX, 0);
    if (xfer_setup(c, x, "PUT (upload part)", u->name, q, u->p[i].err)) return -1;
    return put_prepare(x, &u->p[i].src);
}

static int part_finish(tsr_s3 *c, void *ctx, int i, xfer *x, CURLcode res) {
    upload *u = ctx;
    upload_part *p = &u->p[i];
    (void)c;
    int r = xfer_outcome(x, res, "PUT (upload part)", u->name, p->err);
    if (r == XF_OK && !x->etag[0]) {
        tsr_snprintf(p->err, S3_ERR_LEN, "PUT part %d of %s: no ETag in the answer", i + 1, u->name);
        r = XF_FATAL;
    }
    snprintf(p->etag, sizeof p->etag, "%s", x->etag);
    if (r == XF_FATAL) atomic_store(&u->stop, 1);
    return r;
}

static void part_give_up(void *ctx, int i, int rc, int tries) {
    upload *u = ctx;
    u->p[i].rc = rc;
    note_tries(u->p[i].err, tries);
    atomic_store(&u->stop, 1);
}

/* Every part sent, s3_connections() at once; 0, or TSR_EXIT_DATA with err the first part's
 * fault (in part order; not one cancelled because another failed). */
static int upload_parts(upload *u, char *err) {
    static const multi_ops ops = {part_start, part_finish, part_give_up};
    if (!multi_run(u->c, &ops, u, u->n, s3_connections(), &u->stop)) return 0;
    int first = -1;
    for (int i = 0; i < u->n && first < 0; i++)
        if (u->p[i].rc > 0) first = i;
    for (int i = 0; i < u->n && first < 0; i++)
        if (u->p[i].rc) first = i;
    tsr_snprintf(err, S3_ERR_LEN, "%s", first >= 0 && u->p[first].err[0] ? u->p[first].err
                                                                          : "a part was not sent");
    return TSR_EXIT_DATA;
}

/* text added to b with XML's three special characters of element content escaped */
static void xml_escape(strbuf *b, const char *text) {
    for (const char *p = text; *p; p++)
        if (*p == '&') sb_add(b, "&amp;");
        else if (*p == '<') sb_add(b, "&lt;");
        else if (*p == '>') sb_add(b, "&gt;");
        else sb_addn(b, p, 1);
}

/* POST ?uploadId=: the parts joined in order (an <Error> in a 200 answer is a failure too). Its
 * deadline counts the object's size: the store assembles it. */
static int upload_complete(upload *u, xfer *x, char *err) {
    char code[128], text[S3_ETAG_LEN + 80];
    strbuf body = {0};
    sb_add(&body, "<CompleteMultipartUpload>");
    for (int i = 0; i < u->n; i++) {
        tsr_snprintf(text, sizeof text, "<Part><PartNumber>%d</PartNumber><ETag>", i + 1);
        sb_add(&body, text);
        xml_escape(&body, u->p[i].etag); /* the store's text: an ETag may hold < > & */
        sb_add(&body, "</ETag></Part>");
    }
    sb_add(&body, "</CompleteMultipartUpload>");
    post_src src = {body.s, u->size};
    xfer_plan(x, SIZE_UNKNOWN, ANSWER_MAX, 0);
    int rc = request(u->c, x, "POST (complete multipart upload)", u->name, u->query, post_prepare,
                     &src, err);
    if (!rc && x->mem.s && strstr(x->mem.s, "<Error>")) {
        s3_code(x->mem.s, code, sizeof code);
        tsr_snprintf(err, S3_ERR_LEN, "POST (complete multipart upload) %s: error%s", u->name, code);
        rc = TSR_EXIT_DATA;
    }
    free(body.s);
    return rc;
}

/* Uploads the file fd (size bytes) in parts of c->part_bytes (more when 10,000 would not hold
 * it), s3_connections() parts at once; an upload that fails is aborted (DELETE ?uploadId=, best
 * effort: a store that keeps the parts drops them with its lifecycle rules). */
static int put_multipart(tsr_s3 *c, const char *name, int fd, uint64_t size, char *err) {
    upload u = {.c = c, .name = name, .size = size};
    xfer x = {0};
    uint64_t part = c->part_bytes < (size + 9999) / 10000 ? (size + 9999) / 10000 : c->part_bytes;
    u.n = (int)((size + part - 1) / part);
    u.p = tsr_calloc((size_t)u.n, sizeof *u.p);
    for (int i = 0; i < u.n; i++) {
        uint64_t off = (uint64_t)i * part;
        u.p[i].src = (put_src){fd, off, size - off < part ? size - off : part, 0};
    }
    int rc = upload_create(&u, &x, err);
    if (!rc) rc = upload_parts(&u, err);
    free(x.mem.s);
    x.mem = (strbuf){0};
    if (!rc) rc = upload_complete(&u, &x, err);
    if (rc && u.id[0]) {
        char ignored[S3_ERR_LEN];
        xfer_plan(&x, SIZE_UNKNOWN, ANSWER_MAX, 0);
        request(c, &x, "DELETE (abort multipart upload)", name, u.query, delete_prepare, NULL,
                ignored);
    }
    free(x.mem.s);
    free(u.p);
    return rc;
}

int s3_put_file(tsr_s3 *c, const char *name, const char *path, int *parts, char err[S3_ERR_LEN]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    *parts = 0;
    if (fd < 0 || fstat(fd, &st) != 0) {
        tsr_snprintf(err, S3_ERR_LEN, "%s: cannot read it: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return TSR_EXIT_DATA;
    }
    uint64_t size = (uint64_t)st.st_size;
    int rc;
    if (size > c->part_bytes) {
        rc = put_multipart(c, name, fd, size, err);
        *parts = 1;
    } else {
        xfer x = {0};
        put_src src = {fd, 0, size, 0};
        xfer_plan(&x, SIZE_UNKNOWN, ANSWER_MAX, 0);
        rc = request(c, &x, "PUT", name, "", put_prepare, &src, err);
        free(x.mem.s);
    }
    close(fd);
    return rc;
}
#endif /* TSR_NO_CURL */

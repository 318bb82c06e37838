/* s3.c — S3-compatible object stores over libcurl (s3.h, docs/object-storage.md).
 *
 * Settings are found here, in order of precedence (docs/object-storage.md "Where the settings
 * come from"). Requests: libcurl signs with AWS SigV4
 * (CURLOPT_AWS_SIGV4); every request sends x-amz-content-sha256: UNSIGNED-PAYLOAD (libcurl 7.88
 * does not, and servers that check it refuse the request without).
 */
#include "data/s3.h"

#ifndef TSR_NO_CURL /* (a build without the target's libcurl: Makefile, CROSS) */
#include <curl/curl.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "strbuf.h"

struct tsr_s3 {
    char url[1024], bucket[256], prefix[1024];
    char scheme[16], host[512]; /* the endpoint: scheme ("http"/"https") and host[:port][/path] */
    char region[64], profile[128];
    char key[256], secret[256], token[2048];
    char sigv4[128];
    int virtual_host, retries;
    uint64_t part_bytes; /* files larger than this go up in parts (TSR_S3_PART_MB, default 64) */
};

/* ---------------------------------------------------------------- settings */

static void trim(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    size_t i = strspn(s, " \t");
    memmove(s, s + i, strlen(s + i) + 1);
}

/* The value of `key` in section [section] (or [alt] when alt != NULL) of an INI file such as
 * ~/.aws/credentials; nested "s3 =" blocks are read as part of their section. 1 when found. */
static int ini_get(const char *path, const char *section, const char *alt, const char *key,
                   char *out, size_t n) {
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[4096];
    int in = 0, found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        trim(line);
        if (line[0] == '#' || line[0] == ';' || !line[0]) continue;
        if (line[0] == '[') {
            char *end = strchr(line, ']');
            if (end) *end = '\0';
            in = !strcmp(line + 1, section) || (alt && !strcmp(line + 1, alt));
            continue;
        }
        char *eq = strchr(line, '=');
        if (!in || !eq) continue;
        *eq = '\0';
        trim(line);
        trim(eq + 1);
        if (strcmp(line, key) == 0 && eq[1]) found = snprintf(out, n, "%s", eq + 1) > 0;
    }
    fclose(f);
    return found;
}

/* An environment variable's value, or NULL when unset or empty. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* The shared files: AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, AWS_CONFIG_FILE or
 * ~/.aws/config. */
static void aws_file(const char *var, const char *name, char *out, size_t n) {
    const char *home = env("HOME");
    if (env(var)) snprintf(out, n, "%s", env(var));
    else if (home) snprintf(out, n, "%s/.aws/%s", home, name);
    else out[0] = '\0';
}

/* A key of the profile: the credentials file first, then the config file. */
static int profile_get(const tsr_s3 *c, const char *key, char *out, size_t n) {
    char cred[1024], conf[1024], sec[160];
    aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", cred, sizeof cred);
    aws_file("AWS_CONFIG_FILE", "config", conf, sizeof conf);
    snprintf(sec, sizeof sec, "profile %s", c->profile);
    return ini_get(cred[0] ? cred : NULL, c->profile, NULL, key, out, n) ||
           ini_get(conf[0] ? conf : NULL, sec, c->profile, key, out, n);
}

static int setting(const tsr_s3 *c, const char *var, const char *key, char *out, size_t n) {
    if (var && env(var)) return snprintf(out, n, "%s", env(var)) > 0;
    return key && profile_get(c, key, out, n);
}

static int load_credentials(tsr_s3 *c) {
    if (env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
        snprintf(c->key, sizeof c->key, "%s", env("AWS_ACCESS_KEY_ID"));
        snprintf(c->secret, sizeof c->secret, "%s", env("AWS_SECRET_ACCESS_KEY"));
        setting(c, "AWS_SESSION_TOKEN", NULL, c->token, sizeof c->token);
        return 0;
    }
    if (profile_get(c, "aws_access_key_id", c->key, sizeof c->key) &&
        profile_get(c, "aws_secret_access_key", c->secret, sizeof c->secret)) {
        profile_get(c, "aws_session_token", c->token, sizeof c->token);
        return 0;
    }
    tsr_error("%s: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give the "
              "profile \"%s\" aws_access_key_id and aws_secret_access_key in the shared "
              "credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials; AWS_PROFILE "
              "picks the profile; docs/object-storage.md)", c->url, c->profile);
    return TSR_EXIT_USAGE;
}

/* "s3://bucket/prefix/" -> bucket, prefix (no slashes at either end). */
static int parse_url(tsr_s3 *c, const char *url) {
    snprintf(c->url, sizeof c->url, "%s", url);
    size_t n = strlen(c->url);
    while (n > 5 && c->url[n - 1] == '/') c->url[--n] = '\0';
    const char *b = c->url + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (strncmp(url, "s3://", 5) != 0 || bl == 0 || bl >= sizeof c->bucket ||
        strlen(url) >= sizeof c->url - 1) {
        tsr_error("%s: expected s3://BUCKET/PREFIX (a bucket name, then the dataset's prefix)",
                  url);
        return TSR_EXIT_USAGE;
    }
    memcpy(c->bucket, b, bl);
    snprintf(c->prefix, sizeof c->prefix, "%s", slash ? slash + 1 : "");
    return 0;
}

/* The endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS's
 * regional one) and the addressing style (AWS_S3_ADDRESSING_STYLE or the profile's
 * addressing_style: path or virtual; default path with an endpoint given, virtual for AWS). */
static int load_endpoint(tsr_s3 *c) {
    char ep[600], style[32] = "";
    int given = setting(c, "AWS_ENDPOINT_URL_S3", NULL, ep, sizeof ep) ||
                setting(c, "AWS_ENDPOINT_URL", "endpoint_url", ep, sizeof ep);
    if (!given) snprintf(ep, sizeof ep, "https://s3.%s.amazonaws.com", c->region);
    const char *sep = strstr(ep, "://");
    size_t n = strlen(ep);
    while (n && ep[n - 1] == '/') ep[--n] = '\0';
    if (!sep || sep == ep || (size_t)(sep - ep) >= sizeof c->scheme || !sep[3]) {
        tsr_error("AWS_ENDPOINT_URL (or endpoint_url of profile %s) = \"%s\": expected "
                  "http(s)://HOST[:PORT]", c->profile, ep);
        return TSR_EXIT_USAGE;
    }
    snprintf(c->scheme, sizeof c->scheme, "%.*s", (int)(sep - ep), ep);
    snprintf(c->host, sizeof c->host, "%s", sep + 3);
    setting(c, "AWS_S3_ADDRESSING_STYLE", "addressing_style", style, sizeof style);
    if (style[0] && strcmp(style, "path") && strcmp(style, "virtual") && strcmp(style, "auto")) {
        tsr_error("addressing style \"%s\" (AWS_S3_ADDRESSING_STYLE or addressing_style of "
                  "profile %s): expected path, virtual or auto", style, c->profile);
        return TSR_EXIT_USAGE;
    }
    c->virtual_host = !strcmp(style, "virtual") || ((!style[0] || !strcmp(style, "auto")) && !given);
    return 0;
}

#ifndef TSR_NO_CURL
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }
#endif

/* TSR_S3_PART_MB (MiB, decimals allowed; default 64): the size above which a file is uploaded
 * in parts, and the size of each part. */
static int part_size(tsr_s3 *c) {
    const char *v = env("TSR_S3_PART_MB");
    char *end = NULL;
    double mb = v ? strtod(v, &end) : 64;
    if (v && (end == v || *end || !(mb * 1048576 >= 1) || mb > 5 * 1024)) {
        tsr_error("TSR_S3_PART_MB = \"%s\": expected the part size in MiB, more than 0 and at "
                  "most 5120 (S3's limit; docs/object-storage.md)", v);
        return TSR_EXIT_USAGE;
    }
    c->part_bytes = (uint64_t)(mb * 1048576);
    return 0;
}

int s3_connections(void) {
    const char *v = env("TSR_S3_CONNECTIONS");
    return v && atoi(v) > 0 ? atoi(v) : 8;
}

int s3_is_url(const char *path) { return path && strncmp(path, "s3://", 5) == 0; }

int s3_open(tsr_s3 **out, const char *url) {
    *out = NULL;
#ifdef TSR_NO_CURL
    tsr_error("%s: this build has no libcurl (TSR_NO_CURL: a cross build without the target's "
              "libcurl headers), so no s3:// datasets (docs/object-storage.md)", url);
    return TSR_EXIT_USAGE;
#endif
    tsr_s3 *c = tsr_calloc(1, sizeof *c);
    snprintf(c->profile, sizeof c->profile, "%s", env("AWS_PROFILE") ? env("AWS_PROFILE") : "default");
    int rc = parse_url(c, url);
    if (!rc && !setting(c, "AWS_REGION", "region", c->region, sizeof c->region) &&
        !setting(c, "AWS_DEFAULT_REGION", NULL, c->region, sizeof c->region))
        snprintf(c->region, sizeof c->region, "us-east-1");
    if (!rc) rc = load_endpoint(c);
    if (!rc) rc = load_credentials(c);
    if (rc) {
        free(c);
        return rc;
    }
    snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", c->region);
    const char *r = env("TSR_S3_RETRIES");
    c->retries = r && atoi(r) > 0 ? atoi(r) : 6;
    if ((rc = part_size(c))) {
        free(c);
        return rc;
    }
#ifndef TSR_NO_CURL
    pthread_once(&curl_once, curl_init_once);
#endif
    *out = c;
    return 0;
}

void s3_close(tsr_s3 *c) {
    if (!c) return;
    memset(c->secret, 0, sizeof c->secret); /* not left in freed memory */
    memset(c->token, 0, sizeof c->token);
    free(c);
}

const char *s3_url(const tsr_s3 *c) { return c->url; }

/* The object key of `name`: PREFIX/name (name "" = the prefix itself). */
static void object_key(const tsr_s3 *c, const char *name, char *out, size_t n) {
    snprintf(out, n, "%s%s%s", c->prefix, c->prefix[0] && name[0] ? "/" : "", name);
}

void s3_describe(const tsr_s3 *c, const char *name, char *buf, size_t n) {
    char key[1400];
    object_key(c, name, key, sizeof key);
    tsr_snprintf(buf, n, "s3://%s/%s at %s://%s (bucket %s, key %s, profile %s)", c->bucket, key,
             c->scheme, c->host, c->bucket, key, c->profile);
}

/* in percent-encoded into out (n >= 4) but for the unreserved characters and those of keep. */
static void pct_encode(const char *in, const char *keep, char *out, size_t n) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 4 < n; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            strchr("-._~", *p) || (keep[0] && strchr(keep, *p)))
            out[o++] = (char)*p;
        else
            o += (size_t)snprintf(out + o, n - o, "%%%02X", *p);
    }
    out[o] = '\0';
}

void s3_object_url(const tsr_s3 *c, const char *name, char *out, size_t n) {
    char key[1400], enc[4200];
    object_key(c, name, key, sizeof key);
    pct_encode(key, "/", enc, sizeof enc);
    if (c->virtual_host)
        tsr_snprintf(out, n, "%s://%s.%s/%s", c->scheme, c->bucket, c->host, enc);
    else
        tsr_snprintf(out, n, "%s://%s/%s/%s", c->scheme, c->host, c->bucket, enc);
}

/* ---------------------------------------------------------------- requests */
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
int s3_put_file(tsr_s3 *c, const char *name, const char *path, int *parts,
                char err[S3_ERR_LEN]) {
    (void)c, (void)name, (void)path, (void)parts;
    tsr_snprintf(err, S3_ERR_LEN, "no libcurl in this build");
    return TSR_EXIT_USAGE;
}
#else

typedef struct xfer {
    CURL *h;
    struct curl_slist *hdrs;
    FILE *fp;              /* body to a file, or */
    strbuf mem;            /* to memory */
    size_t mem_max;        /* at most this many bytes there (0: no limit) */
    int too_big;           /* the body passed mem_max */
    uint64_t got;          /* body bytes of a 2xx answer */
    char ebody[1024];      /* the start of an error answer's body */
    size_t ebody_len;
    char etag[S3_ETAG_LEN]; /* the answer's ETag header, "" when none */
} xfer;

/* Keeps the ETag header of the answer. */
static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t len = sz * nm;
    if (len > 5 && strncasecmp(p, "etag:", 5) == 0) {
        snprintf(x->etag, sizeof x->etag, "%.*s", (int)(len - 5), p + 5);
        trim(x->etag);
    }
    return len;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t len = sz * nm;
    long code = 0;
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &code);
    if (code >= 300) {
        size_t room = sizeof x->ebody - 1 - x->ebody_len, k = len < room ? len : room;
        memcpy(x->ebody + x->ebody_len, p, k);
        x->ebody_len += k;
        x->ebody[x->ebody_len] = '\0';
        return len;
    }
    x->got += len;
    if (x->fp) return fwrite(p, 1, len, x->fp) == len ? len : 0;
    if (x->mem_max && x->mem.n + len > x->mem_max) {
        x->too_big = 1;
        return 0;
    }
    sb_addn(&x->mem, p, len);
    return len;
}

/* A fresh handle for object `name` (query: "" or "k=v&..." in canonical order): signed, with the
 * payload header, timeouts, the body and header sinks. */
static void xfer_setup(const tsr_s3 *c, xfer *x, const char *name, const char *query) {
    char url[4800], tok[2100];
    s3_object_url(c, name, url, sizeof url);
    if (query[0]) tsr_snprintf(url + strlen(url), sizeof url - strlen(url), "?%s", query);
    x->h = curl_easy_init();
    x->hdrs = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    x->hdrs = curl_slist_append(x->hdrs, "Expect:");
    if (c->token[0]) {
        snprintf(tok, sizeof tok, "x-amz-security-token: %s", c->token);
        x->hdrs = curl_slist_append(x->hdrs, tok);
    }
    curl_easy_setopt(x->h, CURLOPT_URL, url);
    curl_easy_setopt(x->h, CURLOPT_AWS_SIGV4, c->sigv4);
    curl_easy_setopt(x->h, CURLOPT_USERNAME, c->key);
    curl_easy_setopt(x->h, CURLOPT_PASSWORD, c->secret);
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->h, CURLOPT_CONNECTTIMEOUT, 20L);
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled body is a timeout */
    curl_easy_setopt(x->h, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(x->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(x->h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->h, CURLOPT_HEADERDATA, x);
}

static void xfer_reset(xfer *x) {
    if (x->h) curl_easy_cleanup(x->h);
    curl_slist_free_all(x->hdrs);
    x->h = NULL;
    x->hdrs = NULL;
    x->got = 0;
    x->too_big = 0;
    x->ebody_len = 0;
    x->ebody[0] = '\0';
    x->etag[0] = '\0';
}

/* The S3 error code of an error body (<Code>AccessDenied</Code>), or "" */
static void s3_code(const char *body, char *out, size_t n) {
    const char *a = strstr(body, "<Code>"), *b = a ? strstr(a, "</Code>") : NULL;
    if (a && b) snprintf(out, n, " %.*s", (int)(b - a - 6), a + 6);
    else out[0] = '\0';
}

enum { XF_OK, XF_RETRY, XF_FATAL };

/* The outcome of a finished transfer (want: the expected body size, or UINT64_MAX for any);
 * err gets the fault. */
static int xfer_outcome(const tsr_s3 *c, xfer *x, CURLcode res, const char *verb,
                        const char *name, uint64_t want, char *err) {
    char what[1700], code[128];
    long http = 0;
    s3_describe(c, name, what, sizeof what);
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &http);
    if (res != CURLE_OK) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: %s", verb, what, curl_easy_strerror(res));
        return XF_RETRY;
    }
    s3_code(x->ebody, code, sizeof code);
    if (http >= 500 || http == 429) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: HTTP %ld%s", verb, what, http, code);
        return XF_RETRY;
    }
    if (http >= 300) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: HTTP %ld%s%s", verb, what, http, code,
                 http == 403 ? " (access denied: check the credentials of the profile and the "
                 "bucket's policy)" : http == 404 ? " (no such bucket or key)" : "");
        return XF_FATAL;
    }
    if (x->too_big) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: larger than %zu bytes, the most this object may hold",
                     verb, what, x->mem_max);
        return XF_FATAL;
    }
    if (want != UINT64_MAX && x->got != want) {
        tsr_snprintf(err, S3_ERR_LEN, "%s %s: %llu bytes, expected %llu (a cut-off body)", verb, what,
                 (unsigned long long)x->got, (unsigned long long)want);
        return XF_RETRY;
    }
    return XF_OK;
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
 * give_up(ctx, i, rc) records an item that failed for good (rc TSR_EXIT_DATA) or was cancelled
 * (rc -1). The GETs of s3_get_files and the parts of a multipart upload. */
typedef struct multi_ops {
    int (*start)(tsr_s3 *c, void *ctx, int i, xfer *x);
    int (*finish)(tsr_s3 *c, void *ctx, int i, xfer *x, CURLcode res);
    void (*give_up)(void *ctx, int i, int rc);
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
            ops->give_up(ctx, idx[j], out[j] == XF_CANCEL ? -1 : TSR_EXIT_DATA);
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
    xfer_reset(x);
    x->fp = fopen(f->path, "wb");
    if (!x->fp) {
        tsr_snprintf(f->err, S3_ERR_LEN, "cannot create %s", f->path);
        return -1;
    }
    xfer_setup(c, x, f->name, "");
    char range[64];
    snprintf(range, sizeof range, "0-%llu", (unsigned long long)(f->size - 1));
    if (f->size) curl_easy_setopt(x->h, CURLOPT_RANGE, range);
    return 0;
}

static int fetch_finish(tsr_s3 *c, void *ctx, int i, xfer *x, CURLcode res) {
    s3_fetch *f = (s3_fetch *)ctx + i;
    int ok = fclose(x->fp) == 0;
    x->fp = NULL;
    int r = xfer_outcome(c, x, res, "GET", f->name, f->size, f->err);
    snprintf(f->etag, sizeof f->etag, "%s", x->etag);
    return r == XF_OK && !ok ? XF_FATAL : r;
}

static void fetch_give_up(void *ctx, int i, int rc) {
    s3_fetch *f = (s3_fetch *)ctx + i;
    f->rc = rc;
    if (rc < 0) snprintf(f->err, S3_ERR_LEN, "cancelled");
}

int s3_get_files(tsr_s3 *c, s3_fetch *f, int n, int parallel, _Atomic int *cancel) {
    static const multi_ops ops = {fetch_start, fetch_finish, fetch_give_up};
    for (int i = 0; i < n; i++) f[i].rc = 0, f[i].err[0] = f[i].etag[0] = '\0';
    return multi_run(c, &ops, f, n, parallel, cancel);
}

/* ---------------------------------------------------------------- GET, PUT */

/* One request with the retries: prepare(x) sets the method and body source for each try. The
 * answer's body is left in x->mem (the caller frees it), its ETag in x->etag. */
static int request(tsr_s3 *c, xfer *x, const char *verb, const char *name, const char *query,
                   int (*prepare)(xfer *, void *), void *arg, char *err) {
    int r = XF_RETRY;
    for (int t = 1; r == XF_RETRY && t <= c->retries; t++) {
        if (t > 1) backoff(t - 1);
        xfer_reset(x);
        x->mem.n = 0; /* a retry starts the body again */
        if (x->mem.s) x->mem.s[0] = '\0';
        xfer_setup(c, x, name, query);
        if (prepare && prepare(x, arg)) {
            tsr_snprintf(err, S3_ERR_LEN, "%s %s: cannot read the local file", verb, name);
            r = XF_FATAL;
            break;
        }
        r = xfer_outcome(c, x, curl_easy_perform(x->h), verb, name, UINT64_MAX, err);
    }
    char etag[S3_ETAG_LEN];
    memcpy(etag, x->etag, sizeof etag);
    xfer_reset(x);
    memcpy(x->etag, etag, sizeof etag);
    return r == XF_OK ? 0 : TSR_EXIT_DATA;
}

int s3_get(tsr_s3 *c, const char *name, size_t max, char **body, size_t *len,
           char err[S3_ERR_LEN]) {
    xfer x = {.mem_max = max};
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
    curl_easy_setopt(x->h, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(x->h, CURLOPT_READFUNCTION, put_read);
    curl_easy_setopt(x->h, CURLOPT_READDATA, p);
    curl_easy_setopt(x->h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)p->len);
    return 0;
}

/* A POST with the XML text arg ("" for none). */
static int post_prepare(xfer *x, void *arg) {
    const char *body = arg;
    x->hdrs = curl_slist_append(x->hdrs, "Content-Type: application/xml");
    curl_easy_setopt(x->h, CURLOPT_HTTPHEADER, x->hdrs);
    curl_easy_setopt(x->h, CURLOPT_POST, 1L);
    curl_easy_setopt(x->h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(x->h, CURLOPT_COPYPOSTFIELDS, body);
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
    char id[512], query[700];
    upload_part *p; /* the parts, in order */
    int n;
    _Atomic int stop; /* a part failed for good: the others are not sent */
} upload;

/* POST ?uploads=: the upload id. */
static int upload_create(upload *u, xfer *x, char *err) {
    int rc = request(u->c, x, "POST (create multipart upload)", u->name, "uploads=", post_prepare,
                     "", err);
    char enc[sizeof u->id * 3];
    if (!rc && !xml_text(x->mem.s, "UploadId", u->id, sizeof u->id)) {
        tsr_snprintf(err, S3_ERR_LEN, "POST %s?uploads: no UploadId in the answer", u->name);
        rc = TSR_EXIT_DATA;
    }
    pct_encode(u->id, "", enc, sizeof enc);
    tsr_snprintf(u->query, sizeof u->query, "uploadId=%s", enc);
    return rc;
}

/* PUT ?partNumber=i+1&uploadId=: part i's transfer. */
static int part_start(tsr_s3 *c, void *ctx, int i, xfer *x) {
    upload *u = ctx;
    char q[800];
    tsr_snprintf(q, sizeof q, "partNumber=%d&%s", i + 1, u->query);
    xfer_reset(x);
    xfer_setup(c, x, u->name, q);
    return put_prepare(x, &u->p[i].src);
}

static int part_finish(tsr_s3 *c, void *ctx, int i, xfer *x, CURLcode res) {
    upload *u = ctx;
    upload_part *p = &u->p[i];
    int r = xfer_outcome(c, x, res, "PUT (upload part)", u->name, UINT64_MAX, p->err);
    if (r == XF_OK && !x->etag[0]) {
        tsr_snprintf(p->err, S3_ERR_LEN, "PUT part %d of %s: no ETag in the answer", i + 1, u->name);
        r = XF_FATAL;
    }
    snprintf(p->etag, sizeof p->etag, "%s", x->etag);
    if (r == XF_FATAL) atomic_store(&u->stop, 1);
    return r;
}

static void part_give_up(void *ctx, int i, int rc) {
    upload *u = ctx;
    u->p[i].rc = rc;
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

/* POST ?uploadId=: the parts joined in order (an <Error> in a 200 answer is a failure too). */
static int upload_complete(upload *u, xfer *x, char *err) {
    char code[128], text[S3_ETAG_LEN + 80];
    strbuf body = {0};
    sb_add(&body, "<CompleteMultipartUpload>");
    for (int i = 0; i < u->n; i++) {
        tsr_snprintf(text, sizeof text, "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>",
                     i + 1, u->p[i].etag);
        sb_add(&body, text);
    }
    sb_add(&body, "</CompleteMultipartUpload>");
    int rc = request(u->c, x, "POST (complete multipart upload)", u->name, u->query, post_prepare,
                     body.s, err);
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
    upload u = {.c = c, .name = name};
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
        rc = request(c, &x, "PUT", name, "", put_prepare, &src, err);
        free(x.mem.s);
    }
    close(fd);
    return rc;
}
#endif /* TSR_NO_CURL */

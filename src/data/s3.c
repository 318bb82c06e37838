/* s3.c — S3-compatible object stores: the settings, the location and the request URLs (s3.h,
 * docs/object-storage.md). The requests themselves are s3_xfer.c's.
 *
 * Settings are found here, in order of precedence (docs/object-storage.md "Where the settings
 * come from"); everything is checked before a request is made: the endpoint speaks http or https
 * only, the bucket follows S3's naming rules, a key has no "." or ".." segment, no value is cut.
 */
#include "data/s3.h"

#ifndef TSR_NO_CURL /* (a build without the target's libcurl: Makefile, CROSS) */
#include <curl/curl.h>
#endif
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common.h"
#include "config/config.h"
#include "data/s3_impl.h"
#include "fsutil.h"

#define SHARED_FILE_MAX (1u << 20)      /* the most a shared credentials or config file may hold */
#define MIN_RATE_DEFAULT (1024.0 * 1024) /* TSR_S3_MIN_RATE: 1 MiB/s */
#define GRACE_DEFAULT 30.0               /* TSR_S3_GRACE_S */

/* ---------------------------------------------------------------- the shared files */

/* [*p, *e) without the blanks at either end. */
static void strip(const char **p, const char **e) {
    while (*p < *e && strchr(" \t\r", **p)) (*p)++;
    while (*e > *p && strchr(" \t\r", (*e)[-1])) (*e)--;
}

/* 1 when the section header's text after '[' (up to ']') is name. */
static int section_is(const char *p, const char *e, const char *name) {
    const char *r = memchr(p, ']', (size_t)(e - p));
    size_t len = (size_t)((r ? r : e) - p);
    return name && len == strlen(name) && memcmp(p, name, len) == 0;
}

/* The value of `key` in section [section] (or [alt]) of an INI text such as ~/.aws/credentials;
 * nested "s3 =" blocks are read as part of their section. 1 found (into out), 0 not, -1 found
 * but longer than n - 1 bytes (*len its length; out untouched). */
static int ini_get(const char *text, const char *section, const char *alt, const char *key,
                   char *out, size_t n, size_t *len) {
    int in = 0;
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n'), *next = e ? e + 1 : NULL;
        if (!e) e = p + strlen(p);
        strip(&p, &e);
        const char *eq = memchr(p, '=', (size_t)(e - p)), *k = p, *v = eq ? eq + 1 : e, *ve = e;
        if (p < e && *p == '[') in = section_is(p + 1, e, section) || section_is(p + 1, e, alt);
        else if (in && eq && *p != '#' && *p != ';') {
            strip(&k, &eq);
            strip(&v, &ve);
            if ((size_t)(eq - k) == strlen(key) && !memcmp(k, key, strlen(key)) && v < ve) {
                *len = (size_t)(ve - v);
                if (*len >= n) return -1;
                memcpy(out, v, *len);
                out[*len] = '\0';
                return 1;
            }
        }
        p = next;
    }
    return 0;
}

/* An environment variable's value, or NULL when unset or empty. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* The path of a shared file: the variable's value, else ~/.aws/NAME ("" with neither). */
static int aws_file(const char *var, const char *name, char *out, size_t n) {
    const char *v = env(var), *home = env("HOME");
    int cut = 0;
    out[0] = '\0';
    if (v) cut = tsr_snprintf(out, n, "%s%s", strcmp(v, "-") ? "" : "./", v); /* "-": no stdin */
    else if (home) cut = tsr_snprintf(out, n, "%s/.aws/%s", home, name);
    if (!cut) return 0;
    tsr_error("%s: the path of the shared %s file is longer than %zu bytes", var, name, n - 1);
    return TSR_EXIT_USAGE;
}

/* The text of a shared file into *text (NULL when there is none): a regular file (a FIFO would
 * block every command) of at most 1 MiB. 0, or TSR_EXIT_USAGE after tsr_error naming it. */
static int shared_file(const char *var, const char *name, char **text) {
    char path[1024];
    struct stat st;
    size_t n;
    *text = NULL;
    int rc = aws_file(var, name, path, sizeof path);
    if (rc || !path[0] || (stat(path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR)))
        return rc;
    if (fs_read_all(path, SHARED_FILE_MAX, text, &n) == 0) return 0;
    tsr_error("%s (%s): expected the AWS shared %s file, a regular file of at most %u bytes "
              "(docs/object-storage.md)", path, env(var) ? var : "the default", name,
              SHARED_FILE_MAX);
    return TSR_EXIT_USAGE;
}

/* A key of the profile: the credentials file's [PROFILE] first, then the config file's
 * [profile PROFILE] or [PROFILE]. 1 found, 0 not, -1 too long (after tsr_error naming it). */
static int profile_get(const tsr_s3 *c, const char *key, char *out, size_t n) {
    char sec[160];
    size_t len = 0;
    snprintf(sec, sizeof sec, "profile %s", c->profile);
    int r = c->files[0] ? ini_get(c->files[0], c->profile, NULL, key, out, n, &len) : 0;
    if (!r && c->files[1]) r = ini_get(c->files[1], sec, c->profile, key, out, n, &len);
    if (r < 0)
        tsr_error("%s of profile %s (the shared files): %zu bytes, more than the %zu this client "
                  "holds (docs/object-storage.md)", key, c->profile, len, n - 1);
    return r;
}

/* An environment variable into out: 1 copied, 0 unset, -1 too long (after tsr_error naming it;
 * the value itself is never printed: it may be a secret). */
static int env_copy(const char *var, char *out, size_t n) {
    const char *v = env(var);
    if (!v) return 0;
    if (strlen(v) < n) return snprintf(out, n, "%s", v), 1;
    tsr_error("%s: %zu bytes, more than the %zu this client holds (docs/object-storage.md)", var,
              strlen(v), n - 1);
    return -1;
}

/* The variable var, else the profile's key (NULL: none): 1 found, 0 not, -1 too long. */
static int setting(const tsr_s3 *c, const char *var, const char *key, char *out, size_t n) {
    int r = var ? env_copy(var, out, n) : 0;
    return r || !key ? r : profile_get(c, key, out, n);
}

static int load_credentials(tsr_s3 *c) {
    if (env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
        if (env_copy("AWS_ACCESS_KEY_ID", c->key, sizeof c->key) < 0 ||
            env_copy("AWS_SECRET_ACCESS_KEY", c->secret, sizeof c->secret) < 0 ||
            env_copy("AWS_SESSION_TOKEN", c->token, sizeof c->token) < 0)
            return TSR_EXIT_USAGE;
        return 0;
    }
    int k = profile_get(c, "aws_access_key_id", c->key, sizeof c->key);
    int s = k > 0 ? profile_get(c, "aws_secret_access_key", c->secret, sizeof c->secret) : 0;
    if (k < 0 || s < 0) return TSR_EXIT_USAGE;
    if (k && s)
        return profile_get(c, "aws_session_token", c->token, sizeof c->token) < 0 ? TSR_EXIT_USAGE : 0;
    tsr_error("%s: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give the "
              "profile \"%s\" aws_access_key_id and aws_secret_access_key in the shared "
              "credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials; AWS_PROFILE "
              "picks the profile; docs/object-storage.md)", c->url, c->profile);
    return TSR_EXIT_USAGE;
}

/* ---------------------------------------------------------------- the location */

static int lower_or_digit(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); }

/* S3's bucket naming rules: 3-63 characters of a-z 0-9 . -, a letter or digit at either end, no
 * ".." ".-" "-.", not an IPv4 address. So a bucket is one host name label run (virtual-host
 * addressing puts it in front of the endpoint's host). */
static int bucket_ok(const char *b) {
    size_t n = strlen(b), dots = 0, digits = 0;
    if (n < 3 || n > 63 || !lower_or_digit(b[0]) || !lower_or_digit(b[n - 1])) return 0;
    for (size_t i = 0; i < n; i++) {
        if (!lower_or_digit(b[i]) && b[i] != '.' && b[i] != '-') return 0;
        if (b[i] == '.' && (b[i + 1] == '.' || b[i + 1] == '-' || b[i - 1] == '-')) return 0;
        dots += b[i] == '.';
        digits += b[i] >= '0' && b[i] <= '9';
    }
    return !(dots == 3 && dots + digits == n);
}

/* 1 when the key (or key prefix) k has a "." or ".." segment (libcurl, a proxy or the store
 * would resolve it into another key). */
static int dot_segment(const char *k) {
    for (const char *s = k; s;) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.')) return 1;
        s = e ? e + 1 : NULL;
    }
    return 0;
}

/* "s3://bucket/prefix/" -> bucket, prefix (no slashes at either end), each checked. */
static int parse_url(tsr_s3 *c, const char *url) {
    const char *b = url + 5, *slash = strncmp(url, "s3://", 5) ? NULL : strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(url) > 5 ? strlen(b) : 0;
    if (strncmp(url, "s3://", 5) != 0 || bl == 0 || tsr_snprintf(c->url, sizeof c->url, "%s", url) ||
        (slash && tsr_snprintf(c->prefix, sizeof c->prefix, "%s", slash + 1))) {
        tsr_error("%.1100s: expected s3://BUCKET/PREFIX (a bucket name, then the dataset's prefix, "
                  "at most %d bytes)", url, S3_KEY_MAX);
        return TSR_EXIT_USAGE;
    }
    for (size_t n = strlen(c->url); n > 5 && c->url[n - 1] == '/';) c->url[--n] = '\0';
    for (size_t n = strlen(c->prefix); n && c->prefix[n - 1] == '/';) c->prefix[--n] = '\0';
    if (bl >= sizeof c->bucket || !bucket_ok(memcpy(c->bucket, b, bl))) {
        tsr_error("%s: bucket \"%.*s\" does not follow S3's naming rules: 3-63 characters of "
                  "lower-case letters, digits, '.' and '-', a letter or digit at either end, not "
                  "an IP address (docs/object-storage.md)", c->url, (int)(bl < 80 ? bl : 80), b);
        return TSR_EXIT_USAGE;
    }
    if (!dot_segment(c->prefix)) return 0;
    tsr_error("%s: the key prefix \"%s\" has a \".\" or \"..\" segment, which would name another "
              "key: expected s3://BUCKET/PREFIX with PREFIX a plain key prefix", c->url, c->prefix);
    return TSR_EXIT_USAGE;
}

/* ---------------------------------------------------------------- the endpoint */

/* 1 when the endpoint's host (host[:port][/path]) is this machine: localhost, *.localhost,
 * 127.x.y.z, [::1]. */
static int loopback(const char *host) {
    size_t n = host[0] == '[' ? strcspn(host, "]") + 1 : strcspn(host, ":/");
    if (n == 5 && !strncmp(host, "[::1]", 5)) return 1;
    if ((n == 9 && !strncasecmp(host, "localhost", 9)) ||
        (n > 10 && !strncasecmp(host + n - 10, ".localhost", 10)))
        return 1;
    return n > 4 && !strncmp(host, "127.", 4) && strspn(host, "0123456789.") >= n;
}

/* Splits ep ("scheme://host[:port][/path]") into c->scheme (http or https only: libcurl would
 * speak FTP, and others, with the key and the secret as a plain user and password) and c->host. */
static int endpoint_split(tsr_s3 *c, const char *ep) {
    const char *sep = strstr(ep, "://"), *h = sep ? sep + 3 : "";
    size_t sl = sep ? (size_t)(sep - ep) : 0, auth = strcspn(h, "/");
    int scheme_ok = (sl == 4 && !strncasecmp(ep, "http", 4)) || (sl == 5 && !strncasecmp(ep, "https", 5));
    int host_ok = auth > 0 && strcspn(h, "@?#\\ \t\r\n") == strlen(h) && strlen(h) < sizeof c->host;
    if (scheme_ok && host_ok) {
        snprintf(c->scheme, sizeof c->scheme, "%s", sl == 4 ? "http" : "https");
        snprintf(c->host, sizeof c->host, "%s", h);
        return 0;
    }
    tsr_error("AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or endpoint_url of profile %s = \"%.200s\": "
              "expected http://HOST[:PORT] or https://HOST[:PORT] (no other scheme: the key and "
              "the secret would go as a plain user name and password; no user name, '?' or '#')",
              c->profile, strchr(h, '@') ? "(a URL with a user name, not printed)" : ep);
    return TSR_EXIT_USAGE;
}

/* The endpoint (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url, else AWS's
 * regional one) and the addressing style (AWS_S3_ADDRESSING_STYLE or the profile's
 * addressing_style: path or virtual; default path with an endpoint given, virtual for AWS). */
static int load_endpoint(tsr_s3 *c) {
    char ep[600], style[32] = "";
    int given = setting(c, "AWS_ENDPOINT_URL_S3", NULL, ep, sizeof ep);
    if (!given) given = setting(c, "AWS_ENDPOINT_URL", "endpoint_url", ep, sizeof ep);
    if (!given) snprintf(ep, sizeof ep, "https://s3.%s.amazonaws.com", c->region);
    for (size_t n = strlen(ep); n && ep[n - 1] == '/';) ep[--n] = '\0';
    if (given < 0 || endpoint_split(c, ep)) return TSR_EXIT_USAGE;
    if (setting(c, "AWS_S3_ADDRESSING_STYLE", "addressing_style", style, sizeof style) < 0)
        return TSR_EXIT_USAGE;
    if (style[0] && strcmp(style, "path") && strcmp(style, "virtual") && strcmp(style, "auto")) {
        tsr_error("addressing style \"%s\" (AWS_S3_ADDRESSING_STYLE or addressing_style of "
                  "profile %s): expected path, virtual or auto", style, c->profile);
        return TSR_EXIT_USAGE;
    }
    c->virtual_host = !strcmp(style, "virtual") || ((!style[0] || !strcmp(style, "auto")) && !given);
    return 0;
}

/* Plain http to another machine: said once per process (the requests are signed, not
 * encrypted: the data, and the session token when there is one, cross the network readable). */
static void warn_plain_http(const tsr_s3 *c) {
    static atomic_int said;
    if (strcmp(c->scheme, "http") != 0 || loopback(c->host) || atomic_exchange(&said, 1)) return;
    tsr_warn("the object store's endpoint http://%s is plain http to another machine: the "
             "requests are signed but not encrypted (the data%s cross the network readable); use "
             "https where the store offers it (docs/object-storage.md)", c->host,
             c->token[0] ? " and the session token" : "");
}

/* ---------------------------------------------------------------- numeric settings */

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

/* TSR_S3_MIN_RATE (bytes/s, a size: "1M", "500K", "65536"; default 1M) and TSR_S3_GRACE_S
 * (seconds; default 30): each transfer's deadline is GRACE + its bytes / MIN_RATE. */
static int deadline_settings(tsr_s3 *c) {
    const char *r = env("TSR_S3_MIN_RATE"), *g = env("TSR_S3_GRACE_S");
    uint64_t rate = 0;
    c->min_rate = MIN_RATE_DEFAULT;
    c->grace_s = GRACE_DEFAULT;
    if (r && (size_parse(r, &rate) || rate < 1)) {
        tsr_error("TSR_S3_MIN_RATE = \"%s\": expected the slowest rate a transfer may average, in "
                  "bytes per second: a size such as 1M, 500K or 65536, at least 1 "
                  "(docs/object-storage.md)", r);
        return TSR_EXIT_USAGE;
    }
    if (g && tsr_parse_f64(g, 0.001, 86400, &c->grace_s)) {
        tsr_error("TSR_S3_GRACE_S = \"%s\": expected the seconds a transfer is given for its "
                  "connection and first byte, in [0.001, 86400] (docs/object-storage.md)", g);
        return TSR_EXIT_USAGE;
    }
    if (r) c->min_rate = (double)rate;
    return 0;
}

/* A count from variable var: def when unset; a whole number in [1, max], else -1 after the
 * error naming it */
static int env_count(const char *var, int def, int max, const char *what) {
    const char *v = env(var);
    char *end = NULL;
    long k = v ? strtol(v, &end, 10) : def;
    if (v && (end == v || *end || k < 1 || k > max)) {
        tsr_error("%s = \"%s\": expected %s, a whole number from 1 to %d "
                  "(docs/object-storage.md)", var, v, what, max);
        return -1;
    }
    return (int)k;
}

int s3_connections(void) {
    const int k = env_count("TSR_S3_CONNECTIONS", 8, 1024, "the transfers at once");
    return k > 0 ? k : 8; /* s3_open refused a bad value before any transfer asks */
}

int s3_is_url(const char *path) { return path && strncmp(path, "s3://", 5) == 0; }

/* Every setting of c (its url parsed), each checked. 0 or TSR_EXIT_USAGE. */
static int load_settings(tsr_s3 *c) {
    int rc = shared_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", &c->files[0]);
    if (!rc) rc = shared_file("AWS_CONFIG_FILE", "config", &c->files[1]);
    int reg = rc ? 0 : setting(c, "AWS_REGION", "region", c->region, sizeof c->region);
    if (!rc && !reg) reg = setting(c, "AWS_DEFAULT_REGION", NULL, c->region, sizeof c->region);
    if (!rc && !reg) snprintf(c->region, sizeof c->region, "us-east-1");
    if (!rc && reg < 0) rc = TSR_EXIT_USAGE;
    if (!rc) rc = load_endpoint(c);
    if (!rc) rc = load_credentials(c);
    if (!rc) rc = part_size(c);
    if (!rc) rc = deadline_settings(c);
    c->retries = env_count("TSR_S3_RETRIES", 6, 100, "the tries of a transfer");
    if (!rc && (c->retries < 0 || env_count("TSR_S3_CONNECTIONS", 8, 1024, "the transfers at "
                                            "once") < 0))
        rc = TSR_EXIT_USAGE;
    snprintf(c->sigv4, sizeof c->sigv4, "aws:amz:%s:s3", c->region);
    for (int i = 0; i < 2; i++) free(c->files[i]), c->files[i] = NULL;
    return rc;
}

int s3_open(tsr_s3 **out, const char *url) {
    *out = NULL;
#ifdef TSR_NO_CURL
    tsr_error("%s: this build has no libcurl (TSR_NO_CURL: a cross build without the target's "
              "libcurl headers), so no s3:// datasets (docs/object-storage.md)", url);
    return TSR_EXIT_USAGE;
#endif
    tsr_s3 *c = tsr_calloc(1, sizeof *c);
    int rc = env_copy("AWS_PROFILE", c->profile, sizeof c->profile) < 0 ? TSR_EXIT_USAGE : 0;
    if (!c->profile[0]) snprintf(c->profile, sizeof c->profile, "default");
    if (!rc) rc = parse_url(c, url);
    if (!rc) rc = load_settings(c);
    if (rc) {
        s3_close(c);
        return rc;
    }
    warn_plain_http(c);
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

/* ---------------------------------------------------------------- keys and URLs */

/* The object key of `name`: PREFIX/name (name "" = the prefix itself). 0, or -1 when it is longer
 * than S3's 1024 bytes (out cut) or has a "." or ".." segment. */
static int object_key(const tsr_s3 *c, const char *name, char *out, size_t n) {
    int cut = tsr_snprintf(out, n, "%s%s%s", c->prefix, c->prefix[0] && name[0] ? "/" : "", name);
    return cut || strlen(out) > S3_KEY_MAX || dot_segment(out) ? -1 : 0;
}

void s3_describe(const tsr_s3 *c, const char *name, char *buf, size_t n) {
    char key[S3_KEY_MAX + 200];
    object_key(c, name, key, sizeof key);
    tsr_snprintf(buf, n, "s3://%s/%s at %s://%s (bucket %s, key %s, profile %s)", c->bucket, key,
                 c->scheme, c->host, c->bucket, key, c->profile);
}

int s3_pct_encode(const char *in, const char *keep, char *out, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
        int plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    (*p >= '0' && *p <= '9') || strchr("-._~", *p) || (keep[0] && strchr(keep, *p));
        if (o + (plain ? 1 : 3) >= n) {
            out[o] = '\0';
            return -1;
        }
        if (plain) out[o++] = (char)*p;
        else out[o++] = '%', out[o++] = hex[*p >> 4], out[o++] = hex[*p & 15];
    }
    out[o] = '\0';
    return 0;
}

int s3_object_url(const tsr_s3 *c, const char *name, char *out, size_t n) {
    char key[S3_KEY_MAX + 200], enc[3 * S3_KEY_MAX + 1];
    out[0] = '\0';
    if (object_key(c, name, key, sizeof key) || s3_pct_encode(key, "/", enc, sizeof enc))
        return -1;
    if (c->virtual_host) return tsr_snprintf(out, n, "%s://%s.%s/%s", c->scheme, c->bucket, c->host, enc);
    return tsr_snprintf(out, n, "%s://%s/%s/%s", c->scheme, c->host, c->bucket, enc);
}

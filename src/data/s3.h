/* s3.h — a small client of S3-compatible object stores over libcurl (docs/object-storage.md).
 *
 * A location is "s3://BUCKET/PREFIX": objects are PREFIX/NAME. The endpoint, region, addressing
 * style and credentials come from the conventional places (AWS_* environment variables, the shared
 * credentials and config files with a profile); libcurl signs every request (AWS SigV4) and brings
 * its TLS, proxies and CA settings. The secret is never printed: messages name the endpoint, the
 * bucket, the key and the profile. The store is untrusted: every transfer has a deadline (its
 * bytes at TSR_S3_MIN_RATE after TSR_S3_GRACE_S), no answer's body is taken past its bound, and
 * a server's text (an error code, an ETag) is made printable before anything quotes it.
 *
 * Threads: s3_open and s3_close on one thread; s3_get_files, s3_get, s3_head and s3_put_file may then run
 * on any thread (one call at a time per thread; each uses its own handles). They never print:
 * faults are returned as text in `err` for the caller to report.
 */
#ifndef TSR_S3_H
#define TSR_S3_H

#include <stddef.h>
#include <stdint.h>

typedef struct tsr_s3 tsr_s3;

#define S3_ERR_LEN 512
#define S3_ETAG_LEN 128

/* 1 when path starts with "s3://". */
int s3_is_url(const char *path);
/* Resolves the settings for url ("s3://bucket[/prefix]") and checks they are complete. Returns 0,
 * or TSR_EXIT_USAGE after tsr_error naming what is missing or malformed (no credentials, a bucket
 * outside S3's naming rules, a "." or ".." segment in the prefix, an endpoint that is not
 * http(s)://HOST, a value longer than the client holds, a shared file that is not a regular file
 * of at most 1 MiB, a bad addressing style, TSR_S3_PART_MB, TSR_S3_MIN_RATE or TSR_S3_GRACE_S).
 * Plain http to a host other than this one is said once per process (tsr_warn). */
int s3_open(tsr_s3 **out, const char *url);
void s3_close(tsr_s3 *c);
/* "s3://bucket/prefix/name at ENDPOINT (profile P)": for messages (no secret). */
void s3_describe(const tsr_s3 *c, const char *name, char *buf, size_t n);
/* The request URL of object `name` (PREFIX/name, percent-encoded by SigV4's rules but for
 * slashes): path style ENDPOINT/BUCKET/KEY or virtual-host style SCHEME://BUCKET.HOST/KEY. 0, or
 * -1 when the key is longer than 1024 bytes, has a "." or ".." segment, or does not fit n. */
int s3_object_url(const tsr_s3 *c, const char *name, char *out, size_t n);
/* The url as given, without trailing slashes. */
const char *s3_url(const tsr_s3 *c);

/* How many objects to fetch at once: TSR_S3_CONNECTIONS, default 8. */
int s3_connections(void);

/* One object to fetch into a local file. */
typedef struct s3_fetch {
    const char *name;  /* object PREFIX/name */
    const char *path;  /* local file, created or truncated */
    uint64_t size;     /* the expected size: fetched with ranged GETs, a shorter body is retried,
                        * a longer one (or a Content-Length over it) stopped there and not */
    int rc;            /* out: 0, TSR_EXIT_DATA (403, 404, retries exhausted), -1 cancelled */
    char err[S3_ERR_LEN]; /* out: the fault, when rc != 0 */
    char etag[S3_ETAG_LEN]; /* out: the ETag of the last answer ("" when none), as sent but for
                             * backslashes and bytes outside printable ASCII (as \xNN) */
} s3_fetch;

/* Fetches n objects with at most `parallel` connections at once; timeouts (a transfer past its
 * deadline, TSR_S3_GRACE_S + size / TSR_S3_MIN_RATE), 5xx, 429/503 "slow down" and short bodies
 * are retried with exponential backoff and jitter (TSR_S3_RETRIES, default 6 tries). A non-zero
 * *cancel (checked every 200 ms; NULL: never) stops the transfers left, their rc -1. Returns the
 * number of items that failed or were cancelled (their rc and err set). */
int s3_get_files(tsr_s3 *c, s3_fetch *f, int n, int parallel, _Atomic int *cancel);
/* The whole object `name` into a malloc'd NUL-terminated buffer (*len bytes), at most max bytes
 * (a larger object, by its Content-Length or mid-body, is stopped at once and not fetched again:
 * the store is untrusted). Its deadline: TSR_S3_GRACE_S for the answer's headers, then + its
 * Content-Length (or, without one, max) / TSR_S3_MIN_RATE. 0, or TSR_EXIT_DATA with err set. */
int s3_get(tsr_s3 *c, const char *name, size_t max, char **body, size_t *len,
           char err[S3_ERR_LEN]);
/* Whether object `name` exists (HEAD): 0 with *found 1 or 0 (HTTP 404), or TSR_EXIT_DATA with err
 * set (403, the retries exhausted, ...). */
int s3_head(tsr_s3 *c, const char *name, int *found, char err[S3_ERR_LEN]);
/* Uploads the local file as object `name`: one PUT, or a multipart upload (CreateMultipartUpload,
 * UploadPart of up to s3_connections() parts at once over one curl multi handle,
 * CompleteMultipartUpload with the parts in order; a part that fails for good stops the others
 * and the upload is aborted) when it is larger than TSR_S3_PART_MB (s3_open reads it; default 64
 * MiB), *parts then 1. Each request is retried as s3_get_files'. 0, or TSR_EXIT_DATA with err
 * set (the first failed part's fault). */
int s3_put_file(tsr_s3 *c, const char *name, const char *path, int *parts,
                char err[S3_ERR_LEN]);

#endif

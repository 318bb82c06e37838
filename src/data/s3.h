/* s3.h — a small client of S3-compatible object stores over libcurl (docs/object-storage.md).
 *
 * A location is "s3://BUCKET/PREFIX": objects are PREFIX/NAME. The endpoint, region, addressing
 * style and credentials come from the conventional places (AWS_* environment variables, the shared
 * credentials and config files with a profile); libcurl signs every request (AWS SigV4) and brings
 * its TLS, proxies and CA settings. The secret is never printed: messages name the endpoint, the
 * bucket, the key and the profile.
 *
 * Threads: s3_open and s3_close on one thread; s3_get_files, s3_get and s3_put_file may then run
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
 * or TSR_EXIT_USAGE after tsr_error naming what is missing or malformed (no credentials, a bad
 * url or addressing style, a bad TSR_S3_PART_MB). */
int s3_open(tsr_s3 **out, const char *url);
void s3_close(tsr_s3 *c);
/* "s3://bucket/prefix/name at ENDPOINT (profile P)": for messages (no secret). */
void s3_describe(const tsr_s3 *c, const char *name, char *buf, size_t n);
/* The request URL of object `name` (PREFIX/name, percent-encoded but for slashes): path style
 * ENDPOINT/BUCKET/KEY or virtual-host style SCHEME://BUCKET.HOST/KEY. */
void s3_object_url(const tsr_s3 *c, const char *name, char *out, size_t n);
/* The url as given, without trailing slashes. */
const char *s3_url(const tsr_s3 *c);

/* How many objects to fetch at once: TSR_S3_CONNECTIONS, default 8. */
int s3_connections(void);

/* One object to fetch into a local file. */
typedef struct s3_fetch {
    const char *name;  /* object PREFIX/name */
    const char *path;  /* local file, created or truncated */
    uint64_t size;     /* the expected size: fetched with ranged GETs, a shorter body is retried */
    int rc;            /* out: 0, TSR_EXIT_DATA (403, 404, retries exhausted), -1 cancelled */
    char err[S3_ERR_LEN]; /* out: the fault, when rc != 0 */
    char etag[S3_ETAG_LEN]; /* out: the ETag of the last answer ("" when none), as sent */
} s3_fetch;

/* Fetches n objects with at most `parallel` connections at once; timeouts, 5xx, 429/503 "slow
 * down" and short bodies are retried with exponential backoff and jitter (TSR_S3_RETRIES, default
 * 6 tries). A non-zero *cancel (checked every 200 ms; NULL: never) stops the transfers left, their
 * rc -1. Returns the number of items that failed or were cancelled (their rc and err set). */
int s3_get_files(tsr_s3 *c, s3_fetch *f, int n, int parallel, _Atomic int *cancel);
/* The whole object `name` into a malloc'd NUL-terminated buffer (*len bytes), at most max bytes
 * (0: no limit; a larger object is refused at once, not retried: the store is untrusted). 0, or
 * TSR_EXIT_DATA with err set. */
int s3_get(tsr_s3 *c, const char *name, size_t max, char **body, size_t *len,
           char err[S3_ERR_LEN]);
/* Uploads the local file as object `name`: one PUT, or a multipart upload (CreateMultipartUpload,
 * UploadPart of up to s3_connections() parts at once over one curl multi handle,
 * CompleteMultipartUpload with the parts in order; a part that fails for good stops the others
 * and the upload is aborted) when it is larger than TSR_S3_PART_MB (s3_open reads it; default 64
 * MiB), *parts then 1. Each request is retried as s3_get_files'. 0, or TSR_EXIT_DATA with err
 * set (the first failed part's fault). */
int s3_put_file(tsr_s3 *c, const char *name, const char *path, int *parts,
                char err[S3_ERR_LEN]);

#endif

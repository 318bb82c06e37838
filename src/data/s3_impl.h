/* s3_impl.h — what the two halves of the object-store client share (s3.h): the settings that
 * s3.c resolves (s3_open) and s3_xfer.c's requests read. Not for other files. */
#ifndef TSR_S3_IMPL_H
#define TSR_S3_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "data/s3.h"

#define S3_KEY_MAX 1024    /* S3's longest object key, in bytes */
#define S3_TOKEN_MAX 8192  /* the longest session token held (AWS_SESSION_TOKEN, aws_session_token) */

struct tsr_s3 {
    char url[1024], bucket[64], prefix[S3_KEY_MAX + 1];
    char scheme[8], host[512]; /* the endpoint: "http" or "https", host[:port][/path] */
    char region[64], profile[128];
    char key[256], secret[256], token[S3_TOKEN_MAX + 1];
    char sigv4[128];
    int virtual_host, retries;
    uint64_t part_bytes; /* files larger than this go up in parts (TSR_S3_PART_MB, default 64) */
    double min_rate;     /* bytes/s each transfer must average (TSR_S3_MIN_RATE, default 1 MiB/s) */
    double grace_s;      /* seconds for the connection and the first byte (TSR_S3_GRACE_S, 30) */
    char *files[2];      /* while s3_open runs: the shared credentials and config files' text */
};

/* in percent-encoded into out (n bytes) as SigV4's canonical form wants: every byte but the
 * unreserved A-Z a-z 0-9 - . _ ~ and those of keep as %XX (upper-case hex). 0, or -1 when out
 * is too small (out then holds a cut-off text). */
int s3_pct_encode(const char *in, const char *keep, char *out, size_t n);

#endif

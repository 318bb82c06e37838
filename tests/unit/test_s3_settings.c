/* test_s3_settings.c — the settings of src/data/s3.c (docs/object-storage.md "Where the settings come
 * from"): precedence of the environment over the shared files, the profile's sections, the
 * endpoint and addressing style in the request URLs, and the refusals. No server: the requests
 * themselves are tested against a private s3rver by tests/s3/test_s3.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "data/s3.h"
#include "tap.h"

static char dir[] = "/tmp/tessera-test-s3.XXXXXX";

static void write_file(const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
}

static void clear_env(void) {
    const char *vars[] = {"AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                          "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
                          "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_S3_ADDRESSING_STYLE",
                          "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    setenv("HOME", dir, 1); /* no ~/.aws of the person running the tests */
}

/* The URL of object `name` under url, or "" when s3_open refuses (*rc its status). */
static const char *url_of(const char *url, const char *name, int *rc) {
    static char out[4096];
    tsr_s3 *c;
    out[0] = '\0';
    *rc = s3_open(&c, url);
    if (!*rc) s3_object_url(c, name, out, sizeof out);
    s3_close(c);
    return out;
}

/* Checks that object `name` under url has the request URL want. */
static void url_is(const char *url, const char *name, const char *want, const char *what) {
    int rc;
    const char *u = url_of(url, name, &rc);
    tap_ok(!rc && !strcmp(u, want), "%s (%s)", what, u);
}

int main(void) {
    tap_plan(10);
    if (!mkdtemp(dir)) return 1;
    tsr_log_mute(1);
    int rc;
    clear_env();
    setenv("AWS_ACCESS_KEY_ID", "K", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    url_is("s3://bkt/data/train/", "shard-00001.bin",
           "https://bkt.s3.us-east-1.amazonaws.com/data/train/shard-00001.bin",
           "no endpoint: AWS's regional one, virtual-host style, trailing slash dropped");
    setenv("AWS_REGION", "eu-north-1", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/", 1);
    url_is("s3://bkt/a b+c", "index.tsv", "http://127.0.0.1:9000/bkt/a%20b%2Bc/index.tsv",
           "AWS_ENDPOINT_URL: path style by default, the key percent-encoded");
    setenv("AWS_S3_ADDRESSING_STYLE", "virtual", 1);
    setenv("AWS_ENDPOINT_URL_S3", "https://gw.example.org", 1);
    url_is("s3://bkt", "x", "https://bkt.gw.example.org/x",
           "AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL; virtual style on request");
    setenv("AWS_S3_ADDRESSING_STYLE", "sideways", 1);
    url_of("s3://bkt", "x", &rc);
    tap_ok(rc == TSR_EXIT_USAGE, "an unknown addressing style: refused with exit 1 (%d)", rc);

    clear_env(); /* the shared files, profile lumi */
    char cred[256], conf[256];
    snprintf(cred, sizeof cred, "%s/credentials", dir);
    snprintf(conf, sizeof conf, "%s/config", dir);
    write_file("credentials", "[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
                              "[lumi]\naws_access_key_id = L\naws_secret_access_key = LS\n");
    write_file("config", "[default]\nregion = r0\n[profile lumi]\nregion = lumi\n"
                         "endpoint_url = https://lumidata.eu\ns3 =\n  addressing_style = virtual\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    setenv("AWS_CONFIG_FILE", conf, 1);
    setenv("AWS_PROFILE", "lumi", 1);
    url_is("s3://corpora/fw", "index.tsv", "https://corpora.lumidata.eu/fw/index.tsv",
           "profile lumi: endpoint_url and the nested addressing_style from AWS_CONFIG_FILE");
    unsetenv("AWS_PROFILE");
    url_is("s3://corpora/fw", "index.tsv", "https://corpora.s3.r0.amazonaws.com/fw/index.tsv",
           "profile default: [default] of the config file (region r0), no endpoint");
    setenv("AWS_PROFILE", "nobody", 1);
    url_of("s3://corpora/fw", "index.tsv", &rc);
    tap_ok(rc == TSR_EXIT_USAGE, "a profile without credentials: refused with exit 1 (%d)", rc);
    setenv("AWS_ACCESS_KEY_ID", "E", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ES", 1);
    url_of("s3://corpora/fw", "index.tsv", &rc);
    tap_ok(rc == 0, "the environment's keys win over a profile that has none (%d)", rc);
    int bad = 0;
    const char *urls[] = {"s3://", "s3:///x", "http://b/x"};
    for (int i = 0; i < 3; i++) bad += url_of(urls[i], "x", &rc)[0] != '\0' || rc != TSR_EXIT_USAGE;
    tap_ok(!bad, "s3://, s3:///x and http://b/x refused as locations with exit 1");
    const char *parts[] = {"0", "abc", "1x", "6000", "-2"}; /* TSR_S3_PART_MB: MiB in (0, 5120] */
    bad = 0;
    for (int i = 0; i < 5; i++) {
        setenv("TSR_S3_PART_MB", parts[i], 1);
        bad += url_of("s3://corpora/fw", "x", &rc)[0] != '\0' || rc != TSR_EXIT_USAGE;
    }
    setenv("TSR_S3_PART_MB", "0.002", 1);
    url_of("s3://corpora/fw", "x", &rc);
    bad += rc != 0;
    unsetenv("TSR_S3_PART_MB");
    tap_ok(!bad, "TSR_S3_PART_MB 0, abc, 1x, 6000 and -2 refused with exit 1; 0.002 taken");
    remove(cred);
    remove(conf);
    rmdir(dir);
    return tap_done();
}

/* test_s3_settings.c — the settings of src/data/s3.c (docs/object-storage.md "Where the settings come
 * from"): precedence of the environment over the shared files, the profile's sections, the
 * endpoint and addressing style in the request URLs, and the refusals: endpoints that are not
 * http(s), buckets outside S3's naming rules, "." and ".." key segments, values longer than the
 * client holds, shared files that are not regular files. No server: the requests themselves are
 * tested against private stores by tests/s3/test_s3*.sh. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* The URL of object `name` under url, or "" when s3_open refuses (*rc its status) or the key is
 * refused ("-"). */
static const char *url_of(const char *url, const char *name, int *rc) {
    static char out[8192];
    tsr_s3 *c;
    out[0] = '\0';
    *rc = s3_open(&c, url);
    if (!*rc && s3_object_url(c, name, out, sizeof out)) snprintf(out, sizeof out, "-");
    s3_close(c);
    return out;
}

/* How many of the n values of `var` s3_open refuses with exit 1 (want_ok: takes instead). */
static int refused(const char *var, const char *const *vals, int n, const char *url) {
    int k = 0, rc;
    for (int i = 0; i < n; i++) {
        setenv(var, vals[i], 1);
        url_of(url, "x", &rc);
        k += rc == TSR_EXIT_USAGE;
        if (rc != TSR_EXIT_USAGE) printf("# %s=\"%.60s\": exit %d\n", var, vals[i], rc);
    }
    return k;
}

/* How many of the n urls s3_open refuses with exit 1. */
static int urls_refused(const char *const *urls, int n) {
    int k = 0, rc;
    for (int i = 0; i < n; i++) {
        url_of(urls[i], "x", &rc);
        k += rc == TSR_EXIT_USAGE;
        if (rc != TSR_EXIT_USAGE) printf("# %s: exit %d\n", urls[i], rc);
    }
    return k;
}

/* Checks that object `name` under url has the request URL want. */
static void url_is(const char *url, const char *name, const char *want, const char *what) {
    int rc;
    const char *u = url_of(url, name, &rc);
    tap_ok(!rc && !strcmp(u, want), "%s (%s)", what, u);
}

/* Item 1: only http and https; plain http to another machine said once. */
static void check_endpoints(void) {
    int rc;
    clear_env();
    setenv("AWS_ACCESS_KEY_ID", "K", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    const char *eps[] = {"ftp://gw.example.org", "FTP://gw.example.org", "file:///etc",
                         "gopher://gw.example.org", "ldap://gw.example.org", "gw.example.org",
                         "http://user:pw@gw.example.org", "http://gw.example.org?x=1",
                         "http://gw.example.org#x", "https://"};
    int n = (int)(sizeof eps / sizeof eps[0]);
    tap_ok(refused("AWS_ENDPOINT_URL", eps, n, "s3://bkt/p") == n,
           "endpoints ftp://, FTP://, file://, gopher://, ldap://, none, with a user, '?', '#', no "
           "host: refused with exit 1");
    setenv("AWS_ENDPOINT_URL", "HTTPS://GW.example.org:8443/", 1);
    url_is("s3://bkt/p", "x", "https://GW.example.org:8443/bkt/p/x", "HTTPS:// taken as https");
    /* the warning, once: stderr into a file for two opens */
    char path[256];
    snprintf(path, sizeof path, "%s/stderr", dir);
    fflush(stderr);
    int saved = dup(2);
    FILE *f = freopen(path, "w", stderr);
    tsr_log_mute(0);
    setenv("AWS_ENDPOINT_URL", "http://localhost:9000", 1);
    url_of("s3://bkt/p", "x", &rc);
    setenv("AWS_ENDPOINT_URL", "http://gw.example.org:9000", 1);
    url_of("s3://bkt/p", "x", &rc);
    url_of("s3://bkt/p", "x", &rc);
    tsr_log_mute(1);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[4096] = "";
    f = fopen(path, "r");
    size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
    text[got] = '\0';
    if (f) fclose(f);
    remove(path);
    const char *said = "http://gw.example.org:9000 is plain http to another machine";
    const char *w = strstr(text, said);
    if (text[0]) printf("# %s", text); /* the warning, one line */
    tap_ok(w && !strstr(w + strlen(said), "plain http") && !strstr(text, "localhost"),
           "plain http to gw.example.org said once in two opens, not for localhost");
}

/* Item 2: S3's bucket naming rules; "." and ".." segments; the key encoded by SigV4's rules. */
static void check_locations(void) {
    int rc;
    clear_env();
    setenv("AWS_ACCESS_KEY_ID", "K", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000", 1);
    setenv("AWS_S3_ADDRESSING_STYLE", "virtual", 1);
    const char *bad[] = {"s3://b/x", "s3://ab/x", "s3://127.0.0.1:9000#/x", "s3://My-Bucket/x",
                         "s3://a..b/x", "s3://-ab/x", "s3://ab-/x", "s3://a.-b/x", "s3://192.168.0.1/x",
                         "s3://under_score/x",
                         "s3://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/x"};
    int n = (int)(sizeof bad / sizeof bad[0]);
    tap_ok(urls_refused(bad, n) == n,
           "buckets b, ab, 127.0.0.1:9000#, My-Bucket, a..b, -ab, ab-, a.-b, 192.168.0.1, "
           "under_score and 64 characters: refused with exit 1");
    url_is("s3://my.bucket-2/p", "x", "http://my.bucket-2.127.0.0.1:9000/p/x",
           "bucket my.bucket-2 taken (virtual-host style)");
    const char *dots[] = {"s3://tsr/../x", "s3://tsr/a/./b", "s3://tsr/..", "s3://tsr/a/../../x/"};
    n = (int)(sizeof dots / sizeof dots[0]);
    tap_ok(urls_refused(dots, n) == n, "prefixes ../x, a/./b, .., a/../../x/: refused with exit 1");
    unsetenv("AWS_S3_ADDRESSING_STYLE");
    url_is("s3://tsr/a..b/.../x", "i", "http://127.0.0.1:9000/tsr/a..b/.../x/i",
           "segments a..b and ... are plain names: taken");
    char key[1100];
    memset(key, 'k', 1030);
    key[1030] = '\0';
    int ok = !strcmp(url_of("s3://tsr/p", "../x", &rc), "-") && !strcmp(url_of("s3://tsr/p", key, &rc), "-");
    key[1022] = '\0'; /* p/ + 1022 = 1024 bytes */
    ok = ok && url_of("s3://tsr/p", key, &rc)[0] == 'h';
    tap_ok(ok, "an object name ../x, a key over 1024 bytes: no URL; 1024 bytes: one");
    url_is("s3://tsr/sp ace", "\xc3\xbc+~!*'()=&$@,;:?#%[]/a.b",
           "http://127.0.0.1:9000/tsr/sp%20ace/%C3%BC%2B~%21%2A%27%28%29%3D%26%24%40%2C%3B%3A%3F%23%25%5B%5D/a.b",
           "a key with UTF-8 and reserved characters encoded by SigV4's rules (but '/')");
}

/* Item 6: values are held whole up to their bound, refused by name beyond it. */
static void check_long_values(void) {
    int rc;
    static char tok[9000];
    clear_env();
    setenv("AWS_ACCESS_KEY_ID", "K", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S", 1);
    memset(tok, 'T', 8192);
    tok[8192] = '\0';
    setenv("AWS_SESSION_TOKEN", tok, 1);
    url_of("s3://tsr/p", "x", &rc);
    int ok = rc == 0;
    strcat(tok, "U");
    setenv("AWS_SESSION_TOKEN", tok, 1);
    url_of("s3://tsr/p", "x", &rc);
    tap_ok(ok && rc == TSR_EXIT_USAGE, "AWS_SESSION_TOKEN of 8,192 bytes taken, 8,193 refused with exit 1");
    unsetenv("AWS_SESSION_TOKEN");
    const char *vars[] = {"AWS_ACCESS_KEY_ID", "AWS_REGION", "AWS_PROFILE", "AWS_ENDPOINT_URL"};
    int k = 0;
    memset(tok, 'v', 1000);
    tok[1000] = '\0';
    for (int i = 0; i < 4; i++) {
        const char *one[] = {tok};
        k += refused(vars[i], one, 1, "s3://tsr/p");
        unsetenv(vars[i]);
        setenv("AWS_ACCESS_KEY_ID", "K", 1);
    }
    tap_ok(k == 4, "AWS_ACCESS_KEY_ID, AWS_REGION, AWS_PROFILE, AWS_ENDPOINT_URL of 1,000 bytes: "
           "refused with exit 1, not cut");
}

/* Item 6: the shared files: a long token whole, a FIFO, a directory or a huge file refused. */
static void check_shared_files(void) {
    int rc;
    char cred[256], text[8400];
    clear_env();
    snprintf(cred, sizeof cred, "%s/credentials", dir);
    memset(text, 0, sizeof text);
    strcpy(text, "[default]\naws_access_key_id = K\naws_secret_access_key = S\naws_session_token = ");
    memset(text + strlen(text), 'T', 6000); /* a line longer than the 4,096 bytes once read */
    strcat(text, "\n");
    write_file("credentials", text);
    setenv("AWS_SHARED_CREDENTIALS_FILE", cred, 1);
    url_is("s3://tsr/p", "x", "https://tsr.s3.us-east-1.amazonaws.com/p/x",
           "a credentials file with a 6,000-byte aws_session_token: taken");
    remove(cred);
    alarm(20); /* a FIFO that blocks fails the test instead of hanging it */
    int ok = mkfifo(cred, 0600) == 0;
    url_of("s3://tsr/p", "x", &rc);
    ok = ok && rc == TSR_EXIT_USAGE;
    remove(cred);
    alarm(0);
    mkdir(cred, 0700);
    url_of("s3://tsr/p", "x", &rc);
    ok = ok && rc == TSR_EXIT_USAGE;
    rmdir(cred);
    FILE *f = fopen(cred, "w");
    for (int i = 0; f && i < 20000; i++) fputs("# a comment line of sixty bytes or so, many of them....\n", f);
    if (f) fclose(f);
    url_of("s3://tsr/p", "x", &rc);
    ok = ok && rc == TSR_EXIT_USAGE;
    remove(cred);
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    tap_ok(ok, "AWS_SHARED_CREDENTIALS_FILE a FIFO, a directory, a file over 1 MiB: refused with "
           "exit 1 at once");
}

int main(void) {
    tap_plan(24);
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
    const char *counts[] = {"0", "abc", "3x", "-1", "100000"}; /* whole numbers in range */
    bad = 0;
    for (int v = 0; v < 2; v++) {
        const char *var = v ? "TSR_S3_CONNECTIONS" : "TSR_S3_RETRIES";
        for (int i = 0; i < 5; i++) {
            setenv(var, counts[i], 1);
            bad += url_of("s3://corpora/fw", "x", &rc)[0] != '\0' || rc != TSR_EXIT_USAGE;
        }
        setenv(var, "4", 1);
        url_of("s3://corpora/fw", "x", &rc);
        bad += rc != 0 || (v && s3_connections() != 4);
        unsetenv(var);
    }
    tap_ok(!bad, "TSR_S3_RETRIES and TSR_S3_CONNECTIONS 0, abc, 3x, -1 and 100000 refused with "
           "exit 1; 4 taken");
    remove(cred);
    remove(conf);
    check_endpoints();
    check_locations();
    check_long_values();
    check_shared_files();
    rmdir(dir);
    return tap_done();
}

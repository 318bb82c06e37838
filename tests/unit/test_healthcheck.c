/* test_healthcheck.c — the health checker's pure parts on canned facts: judge verdicts, verdict
 * line format, drain reasons and their sanitising, drain decisions from `scontrol show node`
 * output, threshold files (the shipped one and broken ones), fault specs. No measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "hc.h"
#include "hc_config.h"
#include "hc_drain.h"
#include "hc_fault.h"
#include "tap.h"

static char tmpdir[] = "/tmp/tessera-hc-unit.XXXXXX";

static const char *write_cfg(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    if (!f) exit(2);
    fputs(text, f);
    fclose(f);
    return path;
}

/* silence tsr_error while a failure is expected */
static int quiet_load(const char *path, int gpu, const char *dev, hc_thresholds *t) {
    fflush(stderr);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    int rc = hc_config_load(path, gpu, dev, t);
    fclose(stderr);
    stderr = saved;
    return rc;
}

static hc_thresholds canned_thresholds(void) {
    hc_thresholds t;
    memset(&t, 0, sizeof t);
    for (int k = 0; k < HC_CHECK_COUNT; k++) t.lim[k].set = 1;
    t.lim[HC_SGEMM].expected = 100, t.lim[HC_SGEMM].tolerance = 0.2; /* limit 80 */
    t.lim[HC_DGEMM].expected = 50, t.lim[HC_DGEMM].tolerance = 0.0;
    t.lim[HC_MEMBW].expected = 10, t.lim[HC_MEMBW].tolerance = 0.5;  /* limit 5 */
    t.lim[HC_ALLREDUCE].expected = 2, t.lim[HC_ALLREDUCE].tolerance = 0.0;
    return t;
}

static void test_judge(void) {
    hc_thresholds t = canned_thresholds();
    hc_facts f;
    memset(&f, 0, sizeof f);
    snprintf(f.node, sizeof f.node, "n01");
    hc_fact_set(&f, HC_SGEMM, 80.0);       /* exactly at the limit: passes */
    hc_fact_set(&f, HC_SGEMM_VERIFY, 0);
    hc_fact_set(&f, HC_MEMBW, 4.99);       /* below 10 * (1 - 0.5) */
    hc_verdict v[HC_CHECK_COUNT];
    int failed = -1, n = hc_judge(&f, &t, v, &failed);
    tap_ok(n == 3 && failed == 1 && v[0].check == HC_SGEMM && v[0].ok && v[1].ok &&
               v[2].check == HC_MEMBW && !v[2].ok && v[2].limit == 5.0,
           "judge: only measured checks, in order; at the limit passes; below fails (n=%d failed=%d)", n, failed);
    hc_fact_set(&f, HC_SGEMM_VERIFY, 1);
    hc_fact_set(&f, HC_MEMBW, 6);
    n = hc_judge(&f, &t, v, &failed);
    tap_ok(failed == 1 && !v[1].ok && v[1].limit == 0, "judge: one wrong GEMM element fails the verify check");
    hc_fact_set(&f, HC_SGEMM_VERIFY, 0);
    hc_fact_set(&f, HC_SGEMM, 0.0 / 0.0);
    n = hc_judge(&f, &t, v, &failed);
    tap_ok(failed == 1 && !v[0].ok, "judge: a NaN measurement fails");
    t.lim[HC_MEMBW].set = 0;
    hc_fact_set(&f, HC_SGEMM, 90);
    n = hc_judge(&f, &t, v, &failed);
    tap_ok(failed == 1 && !v[2].ok, "judge: a measured check without a threshold fails");

    char line[256];
    hc_verdict ok = {HC_SGEMM, 1, 123.456, 80.0}, bad = {HC_ALLREDUCE, 0, 0.123, 2.0},
               ver = {HC_DGEMM_VERIFY, 0, 3, 0};
    hc_verdict_line(line, sizeof line, "n01", &ok);
    tap_ok(!strcmp(line, "n01 sgemm OK 123.5 80.0 GFLOP/s"), "verdict line: '%s'", line);
    hc_verdict_line(line, sizeof line, "gpu-a.12", &bad);
    tap_ok(!strcmp(line, "gpu-a.12 allreduce FAIL 0.12 2.00 GB/s"), "verdict line: '%s'", line);
    char tok[6][64];
    int k = sscanf(line, "%63s %63s %63s %63s %63s %63s", tok[0], tok[1], tok[2], tok[3], tok[4], tok[5]);
    tap_ok(k == 6 && !strcmp(tok[2], "FAIL") && !strcmp(tok[0], "gpu-a.12"),
           "verdict line: 6 fields, $1 = node, $3 = FAIL (what tessera-job.sh's awk reads)");
    hc_verdict vs[3] = {ok, bad, ver};
    char reason[256];
    int rc = hc_drain_reason(reason, sizeof reason, vs, 3);
    tap_ok(rc == 0 && !strcmp(reason, "tessera-hc: allreduce 0.12<2.00 GB/s (+1 more)"), "drain reason: '%s'", reason);
    rc = hc_drain_reason(reason, sizeof reason, &vs[2], 1);
    tap_ok(rc == 0 && !strcmp(reason, "tessera-hc: dgemm_verify 3>0 errors"), "drain reason of a count check: '%s'", reason);
    tap_ok(hc_drain_reason(reason, sizeof reason, &ok, 1) == 1, "drain reason: none when nothing failed");
}

static void test_sanitize(void) {
    char s[] = "tessera-hc: a\"b'c`d\\e\n\tf\x01g\xc3\xa9h;$(rm -rf /)";
    hc_sanitize_reason(s);
    tap_ok(!strcmp(s, "tessera-hc: a_b_c_d_efgh;$(rm -rf /)"), "sanitise: quotes -> _, control and non-ASCII dropped: '%s'", s);
    tap_ok(hc_node_name_ok("node-01.cluster_a") && !hc_node_name_ok("a b") && !hc_node_name_ok("-rf") &&
               !hc_node_name_ok("") && !hc_node_name_ok("n;reboot") && !hc_node_name_ok("x=y"),
           "node names: [A-Za-z0-9._-]+, no leading '-'");
}

static void test_drain_decide(void) {
    char state[64], reason[256];
    const char *show =
        "NodeName=n01 Arch=x86_64 CoresPerSocket=1\n   State=IDLE+DRAIN ThreadsPerCore=1\n"
        "   Reason=tessera-hc: sgemm 1.0<10.0 GFLOP/s [root@2024-05-01T10:00:00]\n   Comment=(null)\n";
    hc_parse_show_node(show, state, sizeof state, reason, sizeof reason);
    tap_ok(!strcmp(state, "IDLE+DRAIN") && !strcmp(reason, "tessera-hc: sgemm 1.0<10.0 GFLOP/s"),
           "scontrol show node: state '%s', reason '%s' (user@time dropped)", state, reason);
    tap_ok(hc_drain_decide(0, 1, 1, state, reason) == HC_ACT_RESUME, "healthy + own reason + drained -> resume");
    tap_ok(hc_drain_decide(1, 1, 1, state, reason) == HC_ACT_DRAIN, "unhealthy + own reason -> drain (reason refreshed)");
    tap_ok(hc_drain_decide(0, 1, 0, state, reason) == HC_ACT_NONE, "healthy without --resume-own -> nothing");
    hc_parse_show_node("NodeName=n02 State=DRAIN\n   Reason=disk replaced by Bob [bob@2024-05-01T09:00:00]\n",
                       state, sizeof state, reason, sizeof reason);
    tap_ok(!strcmp(reason, "disk replaced by Bob") && hc_drain_decide(1, 1, 0, state, reason) == HC_ACT_FOREIGN &&
               hc_drain_decide(0, 1, 1, state, reason) == HC_ACT_NONE,
           "someone else's reason: never overwritten, never resumed");
    hc_parse_show_node("NodeName=n03 State=IDLE ThreadsPerCore=1\n", state, sizeof state, reason, sizeof reason);
    tap_ok(reason[0] == '\0' && hc_drain_decide(1, 1, 0, state, reason) == HC_ACT_DRAIN &&
               hc_drain_decide(1, 0, 1, state, reason) == HC_ACT_NONE,
           "no reason: an unhealthy node is drained with --drain only");
    hc_parse_show_node("NodeName=n04 State=IDLE\n   Reason=tessera-hc: old [root@x]\n", state, sizeof state,
                       reason, sizeof reason);
    tap_ok(hc_drain_decide(0, 1, 1, state, reason) == HC_ACT_NONE, "own reason but not drained: no resume");
}

static void test_config(void) {
    hc_thresholds t;
    const char *root = getenv("TSR_ROOT");
    char shipped[1024];
    snprintf(shipped, sizeof shipped, "%s/healthcheck/healthcheck.cfg", root ? root : ".");
    int rc = hc_config_load(shipped, 0, "Intel(R) Xeon(R) Processor", &t);
    tap_ok(rc == 0 && !strcmp(t.section, "CPU") && !t.gpu && t.params.gemm_n > 0 && t.lim[HC_SGEMM_VERIFY].max == 0,
           "shipped healthcheck.cfg loads; a CPU run gets section \"CPU\" (got '%s')", t.section);
    rc = hc_config_load(shipped, 1, "NVIDIA H100 80GB HBM3", &t);
    tap_ok(rc == 0 && !strcmp(t.section, "H100") && t.gpu, "shipped: a GPU run on an H100 gets section \"H100\"");
    const char *base =
        "format = 1;\ndevices = ( { name = \"CPU\"; mode = \"cpu\"; match = \"\";\n"
        "  params = { gemm_n = 256; quick_burn_s = 1.0; full_burn_s = 2; membw_mib = 8; membw_reps = 2;\n"
        "             allreduce_mib = 1; allreduce_iters = 3; };\n"
        "  sgemm = { expected = 100; tolerance = 0.25; }; sgemm_verify = { max = 0; };\n"
        "  dgemm = { expected = 50.0; tolerance = 0.0; }; dgemm_verify = { max = 0; };\n"
        "  membw = { expected = 1.0; tolerance = 0.0; }; allreduce = { expected = 1.0; tolerance = 0.0; }; },\n"
        "  { name = \"Fast\"; mode = \"cpu\"; match = \"EPYC\";\n"
        "  params = { gemm_n = 256; quick_burn_s = 1.0; full_burn_s = 2; membw_mib = 8; membw_reps = 2;\n"
        "             allreduce_mib = 1; allreduce_iters = 3; };\n"
        "  sgemm = { expected = 1000; tolerance = 0.1; }; sgemm_verify = { max = 0; };\n"
        "  dgemm = { expected = 500.0; tolerance = 0.1; }; dgemm_verify = { max = 0; };\n"
        "  membw = { expected = 100.0; tolerance = 0.1; }; allreduce = { expected = 1.0; tolerance = 0.0; }; } );\n";
    rc = hc_config_load(write_cfg("ok.cfg", base), 0, "AMD EPYC 9654", &t);
    tap_ok(rc == 0 && !strcmp(t.section, "Fast") && hc_limit_value(&t, HC_SGEMM) == 900.0,
           "a matching section wins over the default; limit = expected * (1 - tolerance) = 900");
    rc = hc_config_load(write_cfg("ok.cfg", base), 0, "Intel Xeon", &t);
    tap_ok(rc == 0 && !strcmp(t.section, "CPU") && hc_limit_value(&t, HC_SGEMM) == 75.0 &&
               t.params.full_burn_s == 2.0 && t.params.allreduce_iters == 3,
           "no match: the default section; integers accepted for seconds");
    struct { const char *from, *to, *why; } bad[] = {
        {"tolerance = 0.25", "tolerance = 1.5", "tolerance out of range"},
        {"gemm_n = 256", "gemm_n = 99999", "gemm_n too large for exact results"},
        {"sgemm = { expected = 100; tolerance = 0.25; };", "", "missing check"},
        {"membw_reps = 2;", "membw_reps = 2; bogus = 1;", "unknown key in params"},
        {"sgemm_verify = { max = 0; }", "sgemm_verify = { maximum = 0; }", "unknown key in a check"},
        {"mode = \"cpu\"; match = \"\"", "mode = \"tpu\"; match = \"\"", "bad mode"},
        {"format = 1;", "format = 2;", "wrong format version"},
        {"expected = 50.0;", "expected = \"fifty\";", "string instead of a number"},
        {"devices = (", "devices = ( syntax error", "syntax error"},
    };
    int n_bad = (int)(sizeof bad / sizeof bad[0]), rejected = 0;
    for (int i = 0; i < n_bad; i++) {
        char text[4096];
        const char *at = strstr(base, bad[i].from);
        if (!at) {
            tap_diag("fixture text not found: %s", bad[i].from);
            continue;
        }
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, bad[i].to, at + strlen(bad[i].from));
        rc = quiet_load(write_cfg("bad.cfg", text), 0, "Intel Xeon", &t);
        if (rc == 2) rejected++;
        else tap_diag("not rejected (rc %d): %s", rc, bad[i].why);
    }
    tap_ok(rejected == n_bad, "%d of %d broken configs rejected with status 2", rejected, n_bad);
    rc = quiet_load(write_cfg("gpuonly.cfg", base), 1, "Intel", &t);
    tap_ok(rc == 2, "no section for the mode (GPU run, CPU-only file) -> status 2");
    tap_ok(quiet_load("/nonexistent/hc.cfg", 0, "x", &t) == 2, "a missing file -> status 2");
}

static void test_faults(void) {
    unsigned m = 99;
    tap_ok(hc_fault_parse(NULL, "n1", 0, &m) == 0 && m == 0, "TSR_HC_FAULT unset: no fault");
    hc_fault_parse("slow_gemm:n2,low_membw,corrupt_gemm:rank=1", "n1", 0, &m);
    tap_ok(m == (1u << HC_FAULT_LOW_MEMBW), "faults: only untargeted ones apply to another node (0x%x)", m);
    hc_fault_parse("slow_gemm:n2,low_busbw:rank=1", "n2", 1, &m);
    tap_ok(m == ((1u << HC_FAULT_SLOW_GEMM) | (1u << HC_FAULT_LOW_BUSBW)), "faults: by node name and by rank (0x%x)", m);
    fflush(stderr);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    int r1 = hc_fault_parse("melt_cpu", "n1", 0, &m), r2 = hc_fault_parse("slow_gemm:rank=x", "n1", 0, &m),
        r3 = hc_fault_parse("slow_gemm:", "n1", 0, &m);
    fclose(stderr);
    stderr = saved;
    tap_ok(r1 == 2 && r2 == 2 && r3 == 2, "faults: unknown kind, bad rank, empty target -> status 2");
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 2;
    tap_plan(30);
    test_judge();
    test_sanitize();
    test_drain_decide();
    test_config();
    test_faults();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) tap_diag("could not remove %s", tmpdir);
    return tap_done();
}

/* test_healthcheck.c — the health checker's pure parts on canned facts: judge verdicts, verdict
 * line format, drain reasons and their sanitising, drain decisions from `scontrol show node`
 * output, threshold files (the shipped one and broken ones), fault specs; the GPU mode's per-GPU
 * facts (as libtessera-hc-gpu.so and NVML would give them) folded into node verdicts against the
 * shipped H100/H200/A100 sections. No measurement, no GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "hc.h"
#include "hc_config.h"
#include "hc_drain.h"
#include "hc_fault.h"
#include "hc_measure.h"
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

/* a broken variant of a config: its text `from` replaced by `to` */
typedef struct hc_edit {
    const char *from, *to, *why;
} hc_edit;

/* how many of the n edits of base hc_config_load refuses with status 2 (for a GPU run or not, on
 * the device dev); each one it takes, and each `from` not in base, said in a diagnostic */
static int rejected_edits(const char *base, const hc_edit *bad, int n, int gpu, const char *dev) {
    int rejected = 0;
    for (int i = 0; i < n; i++) {
        char text[4096];
        const char *at = strstr(base, bad[i].from);
        if (!at) {
            tap_diag("fixture text not found: %s", bad[i].from);
            continue;
        }
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, bad[i].to, at + strlen(bad[i].from));
        hc_thresholds t;
        int rc = quiet_load(write_cfg("bad.cfg", text), gpu, dev, &t);
        if (rc == 2) rejected++;
        else tap_diag("not rejected (rc %d): %s", rc, bad[i].why);
    }
    return rejected;
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

/* `scontrol -o show node` lines as Slurm 22.05+ prints them (src/api/node_info.c), with the fields
 * before State= shortened; TAIL is what follows State= up to where Reason= would be. */
#define SHOW_HEAD "NodeName=n01 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 CPULoad=0.01 " \
                  "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=n01 " \
                  "NodeHostName=n01 Version=22.05.8 OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian " \
                  "6.1.76-1 (2024-02-01)  RealMemory=1000 AllocMem=0 FreeMem=900 Sockets=2 Boards=1 "
#define SHOW_TAIL " ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  " \
                  "BootTime=2024-05-01T08:00:00 SlurmdStartTime=2024-05-01T08:01:00 " \
                  "LastBusyTime=2024-05-01T09:00:00 ResumeAfterTime=None CfgTRES=cpu=2,mem=1000M,billing=2 " \
                  "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 " \
                  "ExtSensorsTemp=n/s"

static hc_node_state parsed(const char *line, int *rc) {
    hc_node_state ns;
    *rc = hc_parse_show_node(line, &ns);
    return ns;
}

static void test_drain_decide(void) {
    int rc;
    hc_node_state ns = parsed(SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL
                              " Reason=tessera-hc: sgemm 1.0<10.0 GFLOP/s [root@2024-05-01T10:00:00]\n", &rc);
    tap_ok(rc == 0 && !strcmp(ns.state, "IDLE+DRAIN") && ns.has_reason &&
               !strcmp(ns.reason, "tessera-hc: sgemm 1.0<10.0 GFLOP/s"),
           "scontrol -o show node: state '%s', reason '%s' (user@time dropped)", ns.state, ns.reason);
    tap_ok(hc_drain_decide(0, 1, 1, &ns) == HC_ACT_RESUME, "healthy + own reason + drained -> resume");
    tap_ok(hc_drain_decide(1, 1, 1, &ns) == HC_ACT_DRAIN, "unhealthy + own reason -> drain (reason refreshed)");
    tap_ok(hc_drain_decide(0, 1, 0, &ns) == HC_ACT_NONE, "healthy without --resume-own -> nothing");
    ns = parsed(SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=disk replaced by Bob [bob@2024-05-01T09:00:00] "
                "Comment=rack 4\n", &rc);
    tap_ok(rc == 0 && !strcmp(ns.reason, "disk replaced by Bob") && hc_drain_decide(1, 1, 0, &ns) == HC_ACT_FOREIGN &&
               hc_drain_decide(0, 1, 1, &ns) == HC_ACT_NONE,
           "someone else's reason: never overwritten, never resumed");
    ns = parsed(SHOW_HEAD "State=IDLE" SHOW_TAIL "\n", &rc);
    tap_ok(rc == 0 && !ns.has_reason && hc_drain_decide(1, 1, 0, &ns) == HC_ACT_DRAIN &&
               hc_drain_decide(1, 0, 1, &ns) == HC_ACT_NONE,
           "no Reason= field: an unhealthy node is drained with --drain only");
    ns = parsed(SHOW_HEAD "State=IDLE" SHOW_TAIL " Reason=tessera-hc: old [root@2024-05-01T09:00:00]\n", &rc);
    tap_ok(rc == 0 && hc_drain_decide(0, 1, 1, &ns) == HC_ACT_NONE, "own reason but not drained: no resume");
    /* a node a run found corrupting data (--sdc-report): only an admin clears it */
    ns = parsed(SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=tessera-hc: sdc step 11 model/wte "
                "outvoted [root@2024-05-01T09:00:00]\n", &rc);
    tap_ok(rc == 0 && hc_drain_decide(0, 1, 1, &ns) == HC_ACT_NONE &&
               hc_drain_decide(1, 1, 0, &ns) == HC_ACT_NONE &&
               hc_drain_decide(HC_FAILED_SDC, 1, 0, &ns) == HC_ACT_DRAIN,
           "an sdc drain: never resumed, never replaced by a failed check's reason, refreshed by "
           "another sdc report");
    ns = parsed(SHOW_HEAD "State=IDLE" SHOW_TAIL "\n", &rc);
    tap_ok(rc == 0 && hc_drain_decide(HC_FAILED_SDC, 1, 0, &ns) == HC_ACT_DRAIN &&
               hc_drain_decide(HC_FAILED_SDC, 0, 0, &ns) == HC_ACT_NONE,
           "an sdc report names a node without a reason: drained with --drain only");

    /* the probe's fooling cases: each is a human's reason, so --drain leaves it and --resume-own
     * never resumes */
    static const char *const human[] = {
        SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=fan noise; was Reason=tessera-hc: sgemm 1<2 GFLOP/s "
                  "[bob@2024-05-01T09:00:00]\n",
        SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=cable [bob@2024-05-01T09:00:00] "
                  "Comment=see Reason=tessera-hc: x\n",
        SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=none [bob@2024-05-01T09:00:00]\n",
        SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=(null) [bob@2024-05-01T09:00:00]\n",
        SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=None\n",
        SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Reason=see State=IDLE Reason=tessera-hc: y [bob@2024-05-01T09:00:00]\n",
    };
    int fooled = 0;
    for (size_t i = 0; i < sizeof human / sizeof *human; i++) {
        ns = parsed(human[i], &rc);
        if (rc || !ns.has_reason || strcmp(ns.state, "IDLE+DRAIN") || hc_drain_decide(1, 1, 0, &ns) != HC_ACT_FOREIGN ||
            hc_drain_decide(0, 0, 1, &ns) != HC_ACT_NONE) {
            fooled++;
            tap_diag("fooled by case %zu: rc %d state '%s' has_reason %d reason '%s'", i, rc, ns.state,
                     ns.has_reason, ns.reason);
        }
    }
    tap_ok(fooled == 0, "a reason quoting \"Reason=tessera-hc:\", a Comment that does, \"none\", \"(null)\": "
                        "all human reasons (%d fooled)", fooled);
    /* no reason, but a Comment (free text after it) that looks like one of ours */
    ns = parsed(SHOW_HEAD "State=IDLE+DRAIN" SHOW_TAIL " Comment=x Reason=tessera-hc: old\n", &rc);
    tap_ok(rc == 0 && !ns.has_reason && hc_drain_decide(0, 0, 1, &ns) == HC_ACT_NONE,
           "a Comment containing Reason=tessera-hc: is not a reason: no resume");
    /* what the parser refuses: nothing is decided on text it does not know */
    int refused = 0;
    static const char *const bad[] = {
        "State=IDLE Reason=x\n",                                  /* no NodeName= */
        "NodeName=n1 Arch=x86_64\n",                              /* no State= */
        "NodeName=n1 State=IDLE\nNodeName=n2 State=IDLE\n",       /* two records */
        "NodeName=n1 State=IDLE\n   Reason=tessera-hc: x\n",      /* the multi-line format */
        "NodeName=n1 State=IDLE garbage Reason=tessera-hc: x\n",  /* not Key=Value before Reason= */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        if (hc_parse_show_node(bad[i], &ns) == -1) refused++;
        else tap_diag("not refused: %s", bad[i]);
    }
    tap_ok(refused == (int)(sizeof bad / sizeof *bad), "%d of %zu malformed node records refused", refused,
           sizeof bad / sizeof *bad);
    ns = parsed("NodeName=n1 State=MIXED+DRAINING Reason=tessera-hc: x [root@2024-05-01T09:00:00]\n", &rc);
    hc_node_state ns2 = parsed("NodeName=n1 State=IDLE+NOT_RESPONDING Reason=tessera-hc: x [root@t]\n", &rc);
    tap_ok(hc_drain_decide(0, 0, 1, &ns) == HC_ACT_RESUME && hc_drain_decide(0, 0, 1, &ns2) == HC_ACT_NONE,
           "drained means a DRAIN, DRAINED or DRAINING word of State=");
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
    const hc_edit bad[] = {
        {"tolerance = 0.25", "tolerance = 1.5", "tolerance out of range"},
        {"gemm_n = 256", "gemm_n = 99999", "gemm_n too large for exact results"},
        {"gemm_n = 256", "gemm_n = 8192", "gemm_n above 4096 in a cpu section (inexact fp32 burn)"},
        {"sgemm_verify = { max = 0; };", "sgemm_verify = { max = 0; }; gemm_bf16_verify = { max = 0; };",
         "a GPU check in a cpu section"},
        {"sgemm = { expected = 100; tolerance = 0.25; };", "", "missing check"},
        {"membw_reps = 2;", "membw_reps = 2; bogus = 1;", "unknown key in params"},
        {"sgemm_verify = { max = 0; }", "sgemm_verify = { maximum = 0; }", "unknown key in a check"},
        {"mode = \"cpu\"; match = \"\"", "mode = \"tpu\"; match = \"\"", "bad mode"},
        {"format = 1;", "format = 2;", "wrong format version"},
        {"expected = 50.0;", "expected = \"fifty\";", "string instead of a number"},
        {"devices = (", "devices = ( syntax error", "syntax error"},
    };
    int n_bad = (int)(sizeof bad / sizeof bad[0]), rejected = rejected_edits(base, bad, n_bad, 0, "Intel Xeon");
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
    hc_fault_parse("missing_gpu:n2,corrupt_gemm", "n2", 0, &m);
    tap_ok(m == ((1u << HC_FAULT_MISSING_GPU) | (1u << HC_FAULT_CORRUPT_GEMM)), "faults: missing_gpu (0x%x)", m);
    fflush(stderr);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    int r1 = hc_fault_parse("melt_cpu", "n1", 0, &m), r2 = hc_fault_parse("slow_gemm:rank=x", "n1", 0, &m),
        r3 = hc_fault_parse("slow_gemm:", "n1", 0, &m);
    fclose(stderr);
    stderr = saved;
    tap_ok(r1 == 2 && r2 == 2 && r3 == 2, "faults: unknown kind, bad rank, empty target -> status 2");
}


/* ---- GPU mode, on canned facts ---- */

/* A healthy 8 x H100 node as the GPU library and NVML report it: NVML gives no retired-page facts
 * on Hopper (row remapping replaced page retirement: "not supported", so unmeasured). */
static void h100_node(hc_facts *f, int n_gpus) {
    memset(f, 0, sizeof *f);
    snprintf(f->node, sizeof f->node, "n01");
    f->gpu_mode = 1;
    f->n_gpus = n_gpus;
    hc_fact_set(f, HC_GPU_COUNT, n_gpus);
    for (int d = 0; d < n_gpus; d++) {
        hc_gpu_dev *g = &f->gpus[d];
        snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
        hc_gpu_set(g, HC_ECC_UNCORRECTED, 0);
        hc_gpu_set(g, HC_REMAP_PENDING, 0);
        hc_gpu_set(g, HC_REMAP_FAILED, 0);
        hc_gpu_set(g, HC_THROTTLE_HW, 0);
        hc_gpu_set(g, HC_THROTTLE_THERMAL, 2.5);
        hc_gpu_set(g, HC_POWER_VIOLATION, 60); /* at the power cap: normal during a burn */
        hc_gpu_set(g, HC_THERMAL_VIOLATION, 0);
        hc_gpu_set(g, HC_GEMM_BF16, 800 - d);
        hc_gpu_set(g, HC_GEMM_BF16_VERIFY, 0);
        hc_gpu_set(g, HC_GEMM_FP32, 52);
        hc_gpu_set(g, HC_GEMM_FP32_VERIFY, 0);
        hc_gpu_set(g, HC_GEMM_FP8, 1450 - d);
        hc_gpu_set(g, HC_GEMM_FP8_VERIFY, 0);
        hc_gpu_set(g, HC_HBM_BW, 3050 + d);
    }
    hc_fact_set(f, HC_NCCL_NODE, 470);
    hc_fact_set(f, HC_NCCL_PAIRS, 370);
}

/* Summarize + judge; the FAIL lines joined by '|' into `fails` (for exact comparisons). */
static int judge_gpu(hc_facts *f, const hc_thresholds *t, char *fails, size_t n, int *n_verdicts) {
    hc_verdict v[HC_CHECK_COUNT];
    int failed = 0;
    hc_gpu_summarize(f);
    *n_verdicts = hc_judge(f, t, v, &failed);
    fails[0] = '\0';
    for (int i = 0; i < *n_verdicts; i++) {
        char line[256];
        if (v[i].ok) continue;
        hc_verdict_line(line, sizeof line, f->node, &v[i]);
        size_t len = strlen(fails);
        snprintf(fails + len, n - len, "%s%s", len ? "|" : "", line);
    }
    return failed;
}

static void test_gpu_judge(void) {
    const char *root = getenv("TSR_ROOT");
    char shipped[1024], fails[1024];
    snprintf(shipped, sizeof shipped, "%s/healthcheck/healthcheck.cfg", root ? root : ".");
    hc_thresholds t;
    int rc = hc_config_load(shipped, 1, "NVIDIA H100 80GB HBM3", &t), n = 0;
    hc_facts f;
    h100_node(&f, 8);
    int failed = judge_gpu(&f, &t, fails, sizeof fails, &n);
    tap_ok(rc == 0 && failed == 0 && n == 17 && !(f.measured & (1u << HC_RETIRED_PAGES)) &&
               !(f.measured & (1u << HC_RETIRED_PENDING)),
           "GPU: healthy 8 x H100 facts: %d verdicts, all OK; retired pages not applicable on Hopper "
           "(no verdict) (failed %d: %s)", n, failed, fails);
    tap_ok(f.value[HC_GEMM_BF16] == 793 && f.worst_gpu[HC_GEMM_BF16] == 7 && f.value[HC_HBM_BW] == 3050 &&
               f.worst_gpu[HC_HBM_BW] == 0 && f.value[HC_REMAP_PENDING] == 0 && f.worst_gpu[HC_REMAP_PENDING] == -1,
           "GPU: node value = the worst GPU's (lowest rate, and which GPU); flag checks count GPUs");

    /* each bad fact alone: exactly its FAIL line, and the worst GPU named */
    struct { hc_check c; int gpu; double v; const char *line; } bad[] = {
        {HC_ECC_UNCORRECTED, 3, 2, "n01 ecc_uncorrected FAIL 2 0 errors"},
        {HC_REMAP_PENDING, 5, 1, "n01 remap_pending FAIL 1 0 GPUs"},
        {HC_REMAP_FAILED, 0, 1, "n01 remap_failed FAIL 1 0 GPUs"},
        {HC_RETIRED_PENDING, 2, 1, "n01 retired_pending FAIL 1 0 GPUs"},
        {HC_RETIRED_PAGES, 1, 63, "n01 retired_pages FAIL 63 62 pages"},
        {HC_THROTTLE_HW, 7, 40, "n01 throttle_hw FAIL 40.0 10.0 %"},
        {HC_THROTTLE_THERMAL, 6, 25, "n01 throttle_thermal FAIL 25.0 10.0 %"},
        {HC_THERMAL_VIOLATION, 4, 30, "n01 thermal_violation FAIL 30.0 10.0 %"},
        {HC_GEMM_BF16_VERIFY, 4, 1, "n01 gemm_bf16_verify FAIL 1 0 errors"},
        {HC_GEMM_FP32_VERIFY, 2, 3, "n01 gemm_fp32_verify FAIL 3 0 errors"},
        {HC_GEMM_BF16, 6, 400, "n01 gemm_bf16 FAIL 400.0 592.5 TFLOP/s"},
        {HC_GEMM_FP32, 1, 20, "n01 gemm_fp32 FAIL 20.0 35.0 TFLOP/s"},
        {HC_GEMM_FP8, 5, 700, "n01 gemm_fp8 FAIL 700.0 910.0 TFLOP/s"}, /* FP8 slow, bf16 fine */
        {HC_GEMM_FP8_VERIFY, 3, 1, "n01 gemm_fp8_verify FAIL 1 0 errors"},
        {HC_HBM_BW, 3, 1500, "n01 hbm_bw FAIL 1500 2400 GB/s"},
        {HC_ECC_UNCORRECTED, 1, 0.0 / 0.0, "n01 ecc_uncorrected FAIL nan 0 errors"}, /* unreadable */
        {HC_NCCL_NODE, -1, 100, "n01 nccl_node FAIL 100.0 391.0 GB/s"},
        {HC_NCCL_PAIRS, -1, 50, "n01 nccl_pairs FAIL 50.0 245.0 GB/s"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        h100_node(&f, 8);
        if (bad[i].gpu >= 0) hc_gpu_set(&f.gpus[bad[i].gpu], bad[i].c, bad[i].v);
        else hc_fact_set(&f, bad[i].c, bad[i].v);
        failed = judge_gpu(&f, &t, fails, sizeof fails, &n);
        int who = bad[i].gpu < 0 || f.worst_gpu[bad[i].c] == bad[i].gpu;
        tap_ok(failed == 1 && !strcmp(fails, bad[i].line) && who, "GPU: bad %s%s: '%s' (got '%s', worst GPU %d)",
               hc_checks[bad[i].c].name, bad[i].gpu >= 0 ? " on one GPU" : "", bad[i].line, fails,
               bad[i].gpu >= 0 ? f.worst_gpu[bad[i].c] : -1);
    }

    /* power-capped time is reported, not judged, by the shipped sections; a site may judge it */
    h100_node(&f, 8);
    hc_thresholds strict = t;
    strict.lim[HC_POWER_VIOLATION].max = 50;
    failed = judge_gpu(&f, &strict, fails, sizeof fails, &n);
    tap_ok(failed == 1 && !strcmp(fails, "n01 power_violation FAIL 60.0 50.0 %"),
           "GPU: power violation growth above a site's limit: '%s'", fails);

    /* missing device: the fault drops the last GPU before anything is measured */
    unsigned faults = 0;
    hc_fault_parse("missing_gpu:n01", "n01", 0, &faults);
    int used = hc_gpu_select(8, faults);
    h100_node(&f, used);
    failed = judge_gpu(&f, &t, fails, sizeof fails, &n);
    tap_ok(used == 7 && failed == 1 && !strcmp(fails, "n01 gpu_count FAIL 7 8 GPUs"),
           "GPU: missing_gpu on 8 GPUs -> 7 measured -> '%s'", fails);
    tap_ok(hc_gpu_select(8, 0) == 8 && hc_gpu_select(1, faults) == 0 && hc_gpu_select(0, faults) == 0 &&
               hc_gpu_select(20, 0) == HC_MAX_GPUS,
           "GPU: device selection: all, one fewer with missing_gpu, never below 0, at most %d", HC_MAX_GPUS);

    /* a GPU that could not finish its burn: rate 0, errors unknown (NaN): both fail */
    h100_node(&f, 8);
    hc_gpu_set(&f.gpus[2], HC_GEMM_BF16, 0.0);
    hc_gpu_set(&f.gpus[2], HC_GEMM_BF16_VERIFY, 0.0 / 0.0);
    failed = judge_gpu(&f, &t, fails, sizeof fails, &n);
    tap_ok(failed == 2 && !strcmp(fails, "n01 gemm_bf16 FAIL 0.0 592.5 TFLOP/s|n01 gemm_bf16_verify FAIL nan 0 errors"),
           "GPU: a GPU whose burn failed fails rate and verify: '%s'", fails);

    /* a node of a GPU run without a usable GPU: only gpu_count, and it fails */
    memset(&f, 0, sizeof f);
    snprintf(f.node, sizeof f.node, "n01");
    hc_fact_set(&f, HC_GPU_COUNT, 0);
    failed = judge_gpu(&f, &t, fails, sizeof fails, &n);
    tap_ok(n == 1 && failed == 1 && !strcmp(fails, "n01 gpu_count FAIL 0 8 GPUs"), "GPU: no GPU at all: '%s'", fails);

    hc_verdict v = {HC_REMAP_PENDING, 0, 1, 0};
    char reason[256];
    hc_drain_reason(reason, sizeof reason, &v, 1);
    tap_ok(!strcmp(reason, "tessera-hc: remap_pending 1>0 GPUs"), "GPU: drain reason '%s'", reason);

    /* a node whose FP8 burn runs slowly is drained like any other: the judge's first FAIL names it */
    h100_node(&f, 8);
    hc_gpu_set(&f.gpus[6], HC_GEMM_FP8, 400);
    hc_verdict vs[HC_CHECK_COUNT];
    hc_gpu_summarize(&f);
    int nv = hc_judge(&f, &t, vs, &failed);
    hc_drain_reason(reason, sizeof reason, vs, nv);
    tap_ok(failed == 1 && !strcmp(reason, "tessera-hc: gemm_fp8 400.0<910.0 TFLOP/s"), "GPU: slow FP8 drain reason '%s'",
           reason);
}

static void test_gpu_config(void) {
    const char *root = getenv("TSR_ROOT");
    char shipped[1024];
    snprintf(shipped, sizeof shipped, "%s/healthcheck/healthcheck.cfg", root ? root : ".");
    struct { const char *device, *section; double bf16_limit; } match[] = {
        {"NVIDIA H100 80GB HBM3", "H100", 592.5},
        {"NVIDIA H200", "H200", 570.0},
        {"NVIDIA A100-SXM4-80GB", "A100", 187.5},
        {"NVIDIA L40S", "GPU", 10.0},
    };
    int ok = 0;
    for (size_t i = 0; i < sizeof match / sizeof match[0]; i++) {
        hc_thresholds t;
        int rc = hc_config_load(shipped, 1, match[i].device, &t);
        if (rc == 0 && !strcmp(t.section, match[i].section) && t.gpu &&
            hc_limit_value(&t, HC_GEMM_BF16) == match[i].bf16_limit && t.params.gemm_n % 16 == 0)
            ok++;
        else
            tap_diag("'%s' -> section '%s' (want %s), bf16 limit %g", match[i].device, t.section,
                     match[i].section, hc_limit_value(&t, HC_GEMM_BF16));
    }
    tap_ok(ok == 4, "GPU sections by device name: H100, H200, A100; an unknown GPU gets the GPU default (%d/4)", ok);

    const char *base =
        "format = 1;\ndevices = ( { name = \"G\"; mode = \"gpu\"; match = \"\";\n"
        "  params = { gemm_n = 1024; quick_burn_s = 1.0; full_burn_s = 2; membw_mib = 8; membw_reps = 2;\n"
        "             allreduce_mib = 1; allreduce_iters = 3; };\n"
        "  gpu_count = { expected = 1; tolerance = 0.0; }; ecc_uncorrected = { max = 0; };\n"
        "  retired_pages = { max = 62; }; retired_pending = { max = 0; }; remap_pending = { max = 0; };\n"
        "  remap_failed = { max = 0; }; throttle_hw = { max = 10; }; throttle_thermal = { max = 10; };\n"
        "  power_violation = { max = 100; }; thermal_violation = { max = 10; };\n"
        "  gemm_bf16 = { expected = 10; tolerance = 0.0; }; gemm_bf16_verify = { max = 0; };\n"
        "  gemm_fp32 = { expected = 1; tolerance = 0.0; }; gemm_fp32_verify = { max = 0; };\n"
        "  gemm_fp8 = { expected = 10; tolerance = 0.0; }; gemm_fp8_verify = { max = 0; };\n"
        "  hbm_bw = { expected = 100; tolerance = 0.0; }; nccl_node = { expected = 1; tolerance = 0.0; };\n"
        "  nccl_pairs = { expected = 1; tolerance = 0.0; }; } );\n";
    hc_thresholds t;
    int rc = hc_config_load(write_cfg("gpu.cfg", base), 1, "Some GPU", &t);
    tap_ok(rc == 0 && !strcmp(t.section, "G") && t.params.gemm_n == 1024, "a minimal GPU-only config loads");
    const hc_edit bad[] = {
        {"gemm_n = 1024;", "gemm_n = 1000;", "gpu gemm_n not a multiple of 16"},
        {"hbm_bw = { expected = 100; tolerance = 0.0; };", "", "missing GPU check"},
        {"ecc_uncorrected = { max = 0; };", "ecc_uncorrected = { max = 0; }; sgemm = { expected = 1; tolerance = 0.0; };",
         "a CPU check in a gpu section"},
        {"remap_failed = { max = 0; }", "remap_failed = { expected = 0; tolerance = 0.0; }", "count check with rate keys"},
    };
    int n_bad = (int)(sizeof bad / sizeof bad[0]), rejected = rejected_edits(base, bad, n_bad, 1, "Some GPU");
    tap_ok(rejected == n_bad, "%d of %d broken GPU configs rejected with status 2", rejected, n_bad);
}

int main(void) {
    if (!mkdtemp(tmpdir)) return 2;
    tap_plan(67);
    test_judge();
    test_sanitize();
    test_drain_decide();
    test_config();
    test_faults();
    test_gpu_judge();
    test_gpu_config();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) tap_diag("could not remove %s", tmpdir);
    return tap_done();
}

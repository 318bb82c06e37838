/* hc_judge.c — the pure half of the health checker: facts + thresholds -> verdicts, and the
 * strings made from verdicts (verdict lines, drain reasons). No measurement, no I/O. */
#include "hc.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const hc_check_info hc_checks[HC_CHECK_COUNT] = {
    [HC_SGEMM] = {"sgemm", "GFLOP/s", HC_AT_LEAST, 1, 0, HC_PER_NODE},
    [HC_SGEMM_VERIFY] = {"sgemm_verify", "errors", HC_AT_MOST, 0, 0, HC_PER_NODE},
    [HC_DGEMM] = {"dgemm", "GFLOP/s", HC_AT_LEAST, 1, 0, HC_PER_NODE},
    [HC_DGEMM_VERIFY] = {"dgemm_verify", "errors", HC_AT_MOST, 0, 0, HC_PER_NODE},
    [HC_MEMBW] = {"membw", "GB/s", HC_AT_LEAST, 1, 0, HC_PER_NODE},
    [HC_ALLREDUCE] = {"allreduce", "GB/s", HC_AT_LEAST, 2, 0, HC_PER_NODE},
    [HC_GPU_COUNT] = {"gpu_count", "GPUs", HC_AT_LEAST, 0, 1, HC_PER_NODE},
    [HC_ECC_UNCORRECTED] = {"ecc_uncorrected", "errors", HC_AT_MOST, 0, 1, HC_WORST_GPU},
    [HC_RETIRED_PAGES] = {"retired_pages", "pages", HC_AT_MOST, 0, 1, HC_WORST_GPU},
    [HC_RETIRED_PENDING] = {"retired_pending", "GPUs", HC_AT_MOST, 0, 1, HC_GPUS_WITH},
    [HC_REMAP_PENDING] = {"remap_pending", "GPUs", HC_AT_MOST, 0, 1, HC_GPUS_WITH},
    [HC_REMAP_FAILED] = {"remap_failed", "GPUs", HC_AT_MOST, 0, 1, HC_GPUS_WITH},
    [HC_THROTTLE_HW] = {"throttle_hw", "%", HC_AT_MOST, 1, 1, HC_WORST_GPU},
    [HC_THROTTLE_THERMAL] = {"throttle_thermal", "%", HC_AT_MOST, 1, 1, HC_WORST_GPU},
    [HC_POWER_VIOLATION] = {"power_violation", "%", HC_AT_MOST, 1, 1, HC_WORST_GPU},
    [HC_THERMAL_VIOLATION] = {"thermal_violation", "%", HC_AT_MOST, 1, 1, HC_WORST_GPU},
    [HC_GEMM_BF16] = {"gemm_bf16", "TFLOP/s", HC_AT_LEAST, 1, 1, HC_WORST_GPU},
    [HC_GEMM_BF16_VERIFY] = {"gemm_bf16_verify", "errors", HC_AT_MOST, 0, 1, HC_WORST_GPU},
    [HC_GEMM_FP32] = {"gemm_fp32", "TFLOP/s", HC_AT_LEAST, 1, 1, HC_WORST_GPU},
    [HC_GEMM_FP32_VERIFY] = {"gemm_fp32_verify", "errors", HC_AT_MOST, 0, 1, HC_WORST_GPU},
    [HC_GEMM_FP8] = {"gemm_fp8", "TFLOP/s", HC_AT_LEAST, 1, 1, HC_WORST_GPU, 1},
    [HC_GEMM_FP8_VERIFY] = {"gemm_fp8_verify", "errors", HC_AT_MOST, 0, 1, HC_WORST_GPU, 1},
    [HC_HBM_BW] = {"hbm_bw", "GB/s", HC_AT_LEAST, 0, 1, HC_WORST_GPU},
    [HC_NCCL_NODE] = {"nccl_node", "GB/s", HC_AT_LEAST, 1, 1, HC_PER_NODE},
    [HC_NCCL_PAIRS] = {"nccl_pairs", "GB/s", HC_AT_LEAST, 1, 1, HC_PER_NODE},
};
_Static_assert(sizeof hc_checks / sizeof hc_checks[0] == HC_CHECK_COUNT, "one entry per check");

const char *const hc_mode_names[HC_MODE_COUNT] = {"quick", "full"};
_Static_assert(sizeof hc_mode_names / sizeof hc_mode_names[0] == HC_MODE_COUNT, "one per mode");

double hc_limit_value(const hc_thresholds *t, hc_check c) {
    const hc_limit *l = &t->lim[c];
    return hc_checks[c].sense == HC_AT_LEAST ? l->expected * (1.0 - l->tolerance) : l->max;
}

int hc_judge(const hc_facts *f, const hc_thresholds *t, hc_verdict *out, int *n_failed) {
    int n = 0, failed = 0;
    for (int c = 0; c < HC_CHECK_COUNT; c++) {
        if (!(f->measured & (1u << c))) continue;
        hc_verdict v = {.check = (hc_check)c, .actual = f->value[c], .limit = NAN, .ok = 0};
        if (t->lim[c].set) {
            v.limit = hc_limit_value(t, (hc_check)c);
            /* written so that a NaN actual (or limit) fails */
            v.ok = hc_checks[c].sense == HC_AT_LEAST ? v.actual >= v.limit : v.actual <= v.limit;
        }
        failed += !v.ok;
        out[n++] = v;
    }
    if (n_failed) *n_failed = failed;
    return n;
}

void hc_note_skipped(hc_facts *f, const char *what) {
    size_t len = strlen(f->skipped);
    if (len + 3 >= sizeof f->skipped) return;
    snprintf(f->skipped + len, sizeof f->skipped - len, "%s%s", len ? "; " : "", what);
}

int hc_verdict_line(char *buf, size_t n, const char *node, const hc_verdict *v) {
    const hc_check_info *ci = &hc_checks[v->check];
    /* a NaN (a fact that could not be read) prints as "nan" whatever its sign bit */
    double actual = isnan(v->actual) ? NAN : v->actual, limit = isnan(v->limit) ? NAN : v->limit;
    int k = snprintf(buf, n, "%s %s %s %.*f %.*f %s", node, ci->name, v->ok ? "OK" : "FAIL",
                     ci->decimals, actual, ci->decimals, limit, ci->unit);
    return k < 0 || (size_t)k >= n;
}

int hc_drain_reason(char *buf, size_t n, const hc_verdict *v, int n_verdicts) {
    int first = -1, more = 0;
    for (int i = 0; i < n_verdicts; i++) {
        if (v[i].ok) continue;
        if (first < 0) first = i;
        else more++;
    }
    if (first < 0 || n == 0) return 1;
    const hc_verdict *f = &v[first];
    const hc_check_info *ci = &hc_checks[f->check];
    char extra[32] = "";
    if (more) snprintf(extra, sizeof extra, " (+%d more)", more);
    snprintf(buf, n, "tessera-hc: %s %.*f%s%.*f %s%s", ci->name, ci->decimals, isnan(f->actual) ? NAN : f->actual,
             ci->sense == HC_AT_LEAST ? "<" : ">", ci->decimals, f->limit, ci->unit, extra);
    hc_sanitize_reason(buf);
    return 0;
}

size_t hc_sanitize_reason(char *s) {
    size_t w = 0;
    for (size_t r = 0; s[r]; r++) {
        unsigned char ch = (unsigned char)s[r];
        if (ch < 0x20 || ch > 0x7e) continue;
        s[w++] = (ch == '"' || ch == '\'' || ch == '`' || ch == '\\') ? '_' : (char)ch;
    }
    s[w] = '\0';
    return w;
}

int hc_node_name_ok(const char *s) {
    if (!s || !*s || strlen(s) > 63 || s[0] == '-') return 0;
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

/* test_cudnn_attn.c — cuDNN's fused attention on a machine without a GPU (kernels/cuda/
 * tcu_cudnn*.c; docs/cuda.md "cuDNN attention"). With the installed libcudnn.so.9, no mock:
 *  - TSR_ATTENTION's values; the default (own) never opens the library, an unknown value ends the
 *    process naming it;
 *  - a library that cannot be loaded (TSR_CUDNN_LIB) is reported, and a forced cudnn falls back
 *    to the own kernels with one line, said once;
 *  - the version gate on faked versions;
 *  - each refusal's reason, and none for the phase-1 shapes;
 *  - the packed-qkv tensor table against one computed by hand, and the view of K that dQ reads
 *    (K's memory, dims 2 and 3 swapped);
 *  - a model whose attention phase 1 refuses (ALiBi) sizes nothing and opens nothing;
 *  - a device pointer off 16 bytes is named before anything runs; a refused shape has no plan info;
 *  - both operation graphs build and finalize for every phase-1 configuration (hs 32/64/128, GQA
 *    ratios 1/2/4, three B,T), and a malformed one (NH 4 on KVH 3) is refused by cuDNN itself;
 *  - without a GPU the real library loads but a forced cudnn falls back (cudnnCreate fails).
 * The checks that need the library skip where it cannot be loaded. The GPU half (the ops against
 * the CPU oracle, the bits twice) is in tests/gpu/test_gpu_ops.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tap.h"
#include "tcu_cudnn.h"

static void check_parse(void) {
    tcu_att_backend b = TCU_ATT_AUTO;
    int ok = !tcu_cudnn_parse_backend(NULL, &b) && b == TCU_ATT_OWN;
    ok &= !tcu_cudnn_parse_backend("cudnn", &b) && b == TCU_ATT_CUDNN;
    ok &= !tcu_cudnn_parse_backend("auto", &b) && b == TCU_ATT_AUTO;
    ok &= !tcu_cudnn_parse_backend("own", &b) && b == TCU_ATT_OWN;
    ok &= tcu_cudnn_parse_backend("cuDNN", &b) == -1 && b == TCU_ATT_OWN;
    tap_ok(ok, "TSR_ATTENTION parses own, cudnn, auto (unset: own) and refuses \"cuDNN\"");
}

/* the default: nothing opened, nothing run on cuDNN (this process has TSR_ATTENTION unset) */
static void check_default(void) {
    const tcu_cudnn_shape sh = {2, 64, 4, 2, 64};
    const int ran = tcu_cudnn_forward(NULL, NULL, NULL, NULL, NULL, NULL, sh, NULL) +
                    tcu_cudnn_backward(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, sh,
                                       TSR_GRAD_SET, NULL);
    const size_t sb = tcu_cudnn_scratch_bytes(sh);
    tcu_cudnn_release(); /* tcu_shutdown's: with nothing built, opens nothing */
    tap_ok(tcu_cudnn_backend() == TCU_ATT_OWN && !ran && !sb && !tap_lib_mapped("libcudnn"),
           "TSR_ATTENTION unset: own; the calls decline, need no scratch, the release has nothing "
           "to free, and no libcudnn is opened");
}

/* runs fn in a child with TSR_ATTENTION=att and TSR_CUDNN_LIB=lib (NULL: unset), its stderr
 * into err: the child's exit status */
static int in_child(const char *att, const char *lib, int (*fn)(void), char *err, size_t n) {
    int fd[2];
    if (pipe(fd)) return -1;
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        setenv("TSR_ATTENTION", att, 1);
        if (lib) setenv("TSR_CUDNN_LIB", lib, 1);
        _exit(fn());
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fd[0], err + got, n - 1 - got)) > 0) got += (size_t)r;
    err[got] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* in the child: the library does not load, and a forced cudnn falls back twice */
static int missing_child(void) {
    const tcu_cudnn_shape sh = {2, 64, 4, 2, 64};
    const char *why = tcu_cudnn_load();
    if (!why || !strstr(why, "/nonexistent/libcudnn.so.9")) return 10;
    for (int i = 0; i < 2; i++)
        if (tcu_cudnn_forward(NULL, NULL, NULL, NULL, NULL, NULL, sh, NULL)) return 11;
    return tcu_cudnn_scratch_bytes(sh) ? 12 : 0;
}

static int backend_child(void) { return (int)tcu_cudnn_backend(); }

/* in the child: a forced cudnn for a model with ALiBi gets the own kernels (the trainer sets
 * tcu_cudnn_model_backend's answer), so it sizes nothing, builds nothing, opens nothing and runs
 * every call on the own kernels */
static int model_child(void) {
    const tcu_cudnn_shape sh = {2, 64, 4, 2, 64};
    const char *why = NULL;
    tcu_cudnn_set_backend(tcu_cudnn_model_backend(TCU_ATT_CUDNN, 0, 1, 0, &why));
    if (!why || !strstr(why, "the model's ALiBi")) return 14;
    if (tcu_cudnn_backend() != TCU_ATT_OWN) return 15;
    if (tcu_cudnn_scratch_bytes(sh)) return 12;
    if (tcu_cudnn_forward(NULL, NULL, NULL, NULL, NULL, NULL, sh, NULL)) return 11;
    return tap_lib_mapped("libcudnn") ? 13 : 0;
}

/* M5: what the model uses reaches the sizing (tcu_cudnn_model_backend: each refusal's reason,
 * the backend asked for a model that uses none) */
static void check_model(void) {
    char err[4096];
    const char *w[4];
    const int rc = in_child("cudnn", NULL, model_child, err, sizeof err);
    const int own = tcu_cudnn_model_backend(TCU_ATT_AUTO, 1, 0, 0, &w[0]) == TCU_ATT_OWN &&
                    tcu_cudnn_model_backend(TCU_ATT_CUDNN, 0, 0, 1, &w[1]) == TCU_ATT_OWN &&
                    tcu_cudnn_model_backend(TCU_ATT_CUDNN, 0, 1, 1, &w[2]) == TCU_ATT_OWN;
    const int kept = tcu_cudnn_model_backend(TCU_ATT_AUTO, 0, 0, 0, &w[3]) == TCU_ATT_AUTO && !w[3];
    tap_ok(rc == 0 && !strstr(err, "libcudnn") && own && kept && strstr(w[0], "document mask") &&
               strstr(w[1], "variants") && strstr(w[2], "ALiBi"),
           "a model with ALiBi under TSR_ATTENTION=cudnn: the own kernels, no scratch, no plan, no "
           "libcudnn opened (exit %d, stderr: %.200s); a document mask, a variant: own with the "
           "reason; none: the backend asked for", rc, err);
}

static void check_missing(void) {
    char err[4096];
    if (!tcu_cudnn_built()) {
        tap_skip("TSR_CUDNN_LIB=/nonexistent/...: the fallback", "this build has no cuDNN headers");
        return;
    }
    const int rc = in_child("cudnn", "/nonexistent/libcudnn.so.9", missing_child, err, sizeof err);
    const char *line = strstr(err, "runs on the own kernels");
    tap_ok(rc == 0 && line && !strstr(line + 1, "runs on the own kernels") &&
               strstr(err, "cannot load /nonexistent/libcudnn.so.9"),
           "TSR_CUDNN_LIB=/nonexistent/...: unavailable, the forced cudnn falls back, said once "
           "(exit %d, stderr: %.200s)", rc, err);
}

static void check_bad_value(void) {
    char err[4096];
    const int bad = in_child("cuDNN", NULL, backend_child, err, sizeof err);
    tap_ok(bad == 2 && strstr(err, "TSR_ATTENTION = \"cuDNN\""),
           "TSR_ATTENTION=cuDNN ends the process naming the value (exit %d)", bad);
}

static void check_versions(void) {
    char why[256];
    static const struct {
        size_t v, rt;
        int ok;
    } c[] = {{91900, 13010, 1}, {91501, 13000, 1}, {91500, 13010, 0}, {91000, 13010, 0},
             {81000, 13010, 0}, {100100, 13010, 0}, {91900, 12080, 0}};
    int good = 1;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        why[0] = 0;
        const int ok = tcu_cudnn_version_ok(c[i].v, c[i].rt, why, sizeof why);
        if (ok != c[i].ok || (!ok && !why[0])) {
            good = 0;
            tap_diag("version %zu, cudart %zu: %d, expected %d (%s)", c[i].v, c[i].rt, ok,
                     c[i].ok, why);
        }
    }
    tap_ok(good, "the version gate: 9.19 and 9.15.1 pass; 9.15.0, 9.10, 8.x, 10.x and a CUDA 12 "
           "build are refused with a reason");
}

/* refusal of one case: its reason holds `word` (NULL: no refusal) */
static int refused_for(const char *r, const char *word) {
    if (!word) return r == NULL;
    return r && strstr(r, word);
}

static void check_refusals(void) {
    const tcu_cudnn_shape sh = {2, 64, 8, 2, 64}, h256 = {2, 64, 8, 2, 256},
                          h96 = {2, 64, 8, 2, 96}, t1 = {2, 1, 8, 2, 64};
    const int32_t seq[1] = {0};
    const float slopes[1] = {0.5f};
    const tsr_attn_var win = {.window = 16}, sink = {.sinks = slopes}, cap = {.softcap = 30},
                       scl = {.scale = 0.1f}, off = {0};
    int ok = refused_for(tcu_cudnn_refusal(sh, NULL, NULL, NULL, 1, TSR_GRAD_SET), NULL);
    ok &= refused_for(tcu_cudnn_refusal(sh, NULL, NULL, &off, 0, TSR_GRAD_ADD), NULL);
    ok &= refused_for(tcu_cudnn_refusal(sh, NULL, seq, NULL, 0, TSR_GRAD_SET), "document mask");
    ok &= refused_for(tcu_cudnn_refusal(sh, slopes, NULL, NULL, 0, TSR_GRAD_SET), "ALiBi");
    ok &= refused_for(tcu_cudnn_refusal(sh, NULL, NULL, &win, 0, TSR_GRAD_SET), "window");
    ok &= refused_for(tcu_cudnn_refusal(sh, NULL, NULL, &sink, 0, TSR_GRAD_SET), "sinks");
    ok &= refused_for(tcu_cudnn_refusal(sh, NULL, NULL, &cap, 0, TSR_GRAD_SET), "soft cap");
    ok &= refused_for(tcu_cudnn_refusal(sh, NULL, NULL, &scl, 0, TSR_GRAD_SET), "scale");
    ok &= refused_for(tcu_cudnn_refusal(h256, NULL, NULL, NULL, 0, TSR_GRAD_SET), "hs 256");
    ok &= refused_for(tcu_cudnn_refusal(h96, NULL, NULL, NULL, 0, TSR_GRAD_SET), "head size");
    ok &= refused_for(tcu_cudnn_refusal(sh, NULL, NULL, NULL, 1, TSR_GRAD_ADD), "gradient mode");
    ok &= refused_for(tcu_cudnn_refusal(t1, NULL, NULL, NULL, 1, TSR_GRAD_SET), "T = 1");
    tap_ok(ok, "refusals: document mask, ALiBi, window, sinks, soft cap, scale, hs 256 and 96, "
           "gradient mode add and T = 1 (backward) each give their reason; phase 1 none");
}

/* 1 when two rows agree field by field (not memcmp: the struct has padding) */
static int same_row(const tcu_cudnn_tensor *a, const tcu_cudnn_tensor *b) {
    int same = a->uid == b->uid && a->fp32 == b->fp32 && a->buf == b->buf && a->offset == b->offset;
    for (int d = 0; d < 4; d++) same &= a->dim[d] == b->dim[d] && a->stride[d] == b->stride[d];
    return same;
}

/* the table of B 2, T 8, NH 4, KVH 2, hs 32 by hand: QKV = (4 + 2 2) 32 = 256 a row */
static void check_table(void) {
    static const tcu_cudnn_tensor want[] = {
        {TCU_CD_Q, 0, {2, 4, 8, 32}, {2048, 32, 256, 1}, TCU_BUF_QKV, 0},
        {TCU_CD_K, 0, {2, 2, 32, 8}, {2048, 32, 1, 256}, TCU_BUF_QKV, 128},
        {TCU_CD_V, 0, {2, 2, 32, 8}, {2048, 32, 1, 256}, TCU_BUF_QKV, 192},
        {TCU_CD_O, 0, {2, 4, 8, 32}, {1024, 32, 128, 1}, TCU_BUF_OUT, 0},
        {TCU_CD_STATS, 1, {2, 4, 8, 1}, {32, 8, 1, 1}, TCU_BUF_LSE, 0},
        {TCU_CD_SCALE, 1, {1, 1, 1, 1}, {1, 1, 1, 1}, TCU_BUF_HOST, 0},
        {TCU_CD_NEG_INF, 1, {1, 1, 1, 1}, {1, 1, 1, 1}, TCU_BUF_HOST, 1},
        {TCU_CD_DO, 0, {2, 4, 8, 32}, {1024, 32, 128, 1}, TCU_BUF_DOUT, 0},
        {TCU_CD_DQ, 0, {2, 4, 8, 32}, {2048, 32, 256, 1}, TCU_BUF_DQKV, 0},
        {TCU_CD_DK, 0, {2, 2, 8, 32}, {2048, 32, 256, 1}, TCU_BUF_DQKV, 128},
        {TCU_CD_DV, 0, {2, 2, 8, 32}, {2048, 32, 256, 1}, TCU_BUF_DQKV, 192},
        {TCU_CD_ONE, 1, {1, 1, 1, 1}, {1, 1, 1, 1}, TCU_BUF_HOST, 2},
        {TCU_CD_SOFTMAX_SUM, 1, {2, 4, 8, 1}, {32, 8, 1, 1}, TCU_BUF_SCRATCH, 0},
    };
    const tcu_cudnn_tensor vf = {TCU_CD_V, 0, {2, 2, 8, 32}, {2048, 32, 256, 1}, TCU_BUF_QKV, 192};
    tcu_cudnn_tensor got[TCU_CD_UID_COUNT];
    const tcu_cudnn_shape sh = {2, 8, 4, 2, 32};
    const int nb = tcu_cudnn_tensors(sh, 1, got);
    int bad = nb != 13 ? nb + 100 : 0;
    for (int i = 0; !bad && i < nb; i++)
        if (!same_row(&got[i], &want[i])) bad = i + 1;
    tap_ok(!bad, "the backward's tensor table (B 2, T 8, 4 on 2 heads, hs 32) is the hand-computed "
           "one (first difference: row %d)", bad - 1);
    const int nf = tcu_cudnn_tensors(sh, 0, got);
    bad = nf != 7 || !same_row(&got[2], &vf);
    for (int i = 0; !bad && i < nf; i++)
        if (i != 2 && !same_row(&got[i], &want[i])) bad = 1;
    tap_ok(!bad, "the forward's tensor table: the backward's first 7 rows with V untransposed");
}

/* H1: the K that dQ = dS K reads is K's memory with dims 2, 3 swapped, never a packed view */
static void check_k_view(void) {
    static const tcu_cudnn_shape shs[] = {
        {2, 8, 4, 2, 32}, {1, 130, 8, 2, 64}, {4, 384, 8, 8, 128}};
    const tcu_cudnn_tensor want = {
        TCU_CD_K, 0, {2, 2, 8, 32}, {2048, 32, 256, 1}, TCU_BUF_QKV, 128};
    tcu_cudnn_tensor tab[TCU_CD_UID_COUNT];
    tcu_cudnn_tensor v = tcu_cudnn_k_view(shs[0]);
    int ok = same_row(&v, &want);
    for (size_t i = 0; i < sizeof shs / sizeof shs[0]; i++) {
        tcu_cudnn_tensors(shs[i], 1, tab);
        const tcu_cudnn_tensor *k = &tab[TCU_CD_K - 1];
        v = tcu_cudnn_k_view(shs[i]);
        ok &= v.buf == k->buf && v.offset == k->offset && v.fp32 == k->fp32;
        for (int d = 0; d < 4; d++) {
            const int e = d == 2 ? 3 : d == 3 ? 2 : d;
            ok &= v.dim[d] == k->dim[e] && v.stride[d] == k->stride[e];
        }
    }
    tap_ok(ok, "dQ's view of K: K's table row with dims and strides 2, 3 swapped (B 2, T 8, 4 on 2 "
           "heads, hs 32: strides 2048 32 256 1, not the packed 512 256 32 1)");
}

/* L2: a device pointer off 16 bytes is named before anything runs */
static void check_misaligned(void) {
    static _Alignas(256) char mem[TCU_BUF_COUNT][256];
    void *buf[TCU_BUF_COUNT];
    for (int i = 0; i < TCU_BUF_COUNT; i++) buf[i] = mem[i];
    const tcu_cudnn_shape sh = {2, 8, 4, 2, 32};
    int ok = !tcu_cudnn_misaligned(sh, 0, buf, NULL) && !tcu_cudnn_misaligned(sh, 1, buf, mem[0]);
    const char *w = tcu_cudnn_misaligned(sh, 1, buf, mem[0] + 8);
    ok &= w && strstr(w, "workspace");
    buf[TCU_BUF_LSE] = mem[TCU_BUF_LSE] + 4;
    w = tcu_cudnn_misaligned(sh, 0, buf, NULL);
    ok &= w && strstr(w, "(lse)");
    buf[TCU_BUF_LSE] = mem[TCU_BUF_LSE], buf[TCU_BUF_DOUT] = mem[TCU_BUF_DOUT] + 2;
    ok &= !tcu_cudnn_misaligned(sh, 0, buf, NULL); /* the forward reads no dout */
    w = tcu_cudnn_misaligned(sh, 1, buf, NULL);
    ok &= w && strstr(w, "(dout)");
    buf[TCU_BUF_DOUT] = mem[TCU_BUF_DOUT], buf[TCU_BUF_QKV] = mem[TCU_BUF_QKV] + 2;
    w = tcu_cudnn_misaligned(sh, 0, buf, NULL);
    ok &= w && strstr(w, "(q)");
    tap_ok(ok, "alignment: 16-byte aligned buffers pass; lse + 4, dout + 2 (backward only), "
           "qkv + 2 and the workspace + 8 are each named (last: %s)", w ? w : "none");
}

/* M7: a refused shape has no plan to report (the bench would time the own kernels as cuDNN's) */
static void check_info_refused(void) {
    const tcu_cudnn_shape h96 = {2, 64, 8, 2, 96}, t1 = {2, 1, 8, 2, 64};
    tcu_cudnn_plan_info in;
    char why[256] = "", why2[256] = "";
    const int rc = tcu_cudnn_plan_info_of(h96, 0, &in, why, sizeof why);
    const int rc2 = tcu_cudnn_plan_info_of(t1, 1, &in, why2, sizeof why2);
    tap_ok(rc == -1 && strstr(why, "head size") && rc2 == -1 && strstr(why2, "T = 1"),
           "tcu_cudnn_plan_info_of gives the refusal: hs 96 \"%s\", a backward at T 1 \"%s\"",
           why, why2);
}

/* every phase-1 configuration's graph (direction bwd, head size hs, GQA ratio r) finalizes */
static void check_graphs(int bwd, int hs, int r) {
    static const int BT[3][2] = {{1, 64}, {2, 128}, {4, 384}};
    char why[512] = "";
    int ops = 0, ok = 1, want = bwd ? (r > 1 ? 23 : 21) : 14;
    for (int i = 0; i < 3 && ok; i++) {
        const tcu_cudnn_shape sh = {BT[i][0], BT[i][1], 8, 8 / r, hs};
        ok = !tcu_cudnn_graph_check(sh, bwd, &ops, why, sizeof why) && ops == want;
    }
    tap_ok(ok, "%s graph, hs %d, 8 query heads on %d: finalizes at B,T = 1,64 2,128 4,384 "
           "(%d operations, expected %d) %s", bwd ? "backward" : "forward", hs, 8 / r, ops, want,
           why);
}

/* in the child: the real library, no GPU: the forced cudnn falls back (cudnnCreate fails) */
static int nogpu_child(void) {
    const tcu_cudnn_shape sh = {2, 64, 4, 2, 64};
    tcu_cudnn_set_backend(TCU_ATT_CUDNN); /* this process read TSR_ATTENTION (unset) already */
    if (tcu_cudnn_load()) return 10;
    if (tcu_cudnn_forward(NULL, NULL, NULL, NULL, NULL, NULL, sh, NULL)) return 11;
    return tcu_cudnn_scratch_bytes(sh) ? 12 : 0;
}

static void check_nogpu(void) {
    char err[4096];
    if (tcu_device_count() > 0) {
        tap_skip("without a GPU a forced cudnn falls back", "this machine has a GPU");
        return;
    }
    const int rc = in_child("cudnn", NULL, nogpu_child, err, sizeof err);
    tap_ok(rc == 0 && strstr(err, "runs on the own kernels: cudnnCreate"),
           "no GPU: the library loads, a forced cudnn falls back naming cudnnCreate, no scratch "
           "(exit %d, stderr: %.200s)", rc, err);
}

static void check_malformed(void) {
    char why[512] = "";
    int ops = 0;
    const tcu_cudnn_shape sh = {2, 64, 4, 3, 64};
    const int rc = tcu_cudnn_graph_check(sh, 0, &ops, why, sizeof why);
    tap_ok(rc == -1 && strstr(why, "matmul"), "cuDNN refuses a malformed graph (4 query heads on "
           "3): \"%.160s\"", why);
}

int main(void) {
    static const int hss[3] = {32, 64, 128}, ratios[3] = {1, 2, 4};
    unsetenv("TSR_ATTENTION"); /* check_default's premise, whatever the caller exported */
    tap_plan(14 + 18);
    check_missing(); /* first, these three: their children inherit this process's state */
    check_bad_value();
    if (tcu_cudnn_built()) check_model();
    else tap_skip("a model with ALiBi sizes nothing", "this build has no cuDNN headers");
    check_default();
    check_parse();
    check_versions();
    check_refusals();
    check_table();
    check_k_view();
    check_misaligned();
    const char *why = tcu_cudnn_load();
    if (why) tap_diag("cuDNN cannot be loaded here: %s", why);
    else tap_diag("cuDNN %zu", tcu_cudnn_version());
    if (!tcu_cudnn_built()) tap_skip("plan info of a refused shape", "no cuDNN headers");
    else check_info_refused();
    if (why) tap_skip("a malformed graph is refused", "no usable libcudnn.so.9");
    else check_malformed();
    if (why) tap_skip("without a GPU a forced cudnn falls back", "no usable libcudnn.so.9");
    else check_nogpu();
    for (int b = 0; b < 2; b++)
        for (int h = 0; h < 3; h++)
            for (int r = 0; r < 3; r++)
                if (why) tap_skip("phase-1 graph finalizes", "no usable libcudnn.so.9");
                else check_graphs(b, hss[h], ratios[r]);
    return tap_done();
}

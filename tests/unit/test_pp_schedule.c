/* test_pp_schedule.c — the pipeline schedules as data (src/pipeline/pp_schedule.h), without MPI:
 * every schedule at P up to 8 (V up to 4) builds, covers every action once in dependency order
 * and runs to the end in the simulator; 1F1B's and interleaved's bubbles equal their formulas,
 * the zero-bubble ones beat 1F1B within its memory; the refusals and the simulator's faults
 * (a backward before its forward, a repeat, a deadlock) are caught. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/pp_schedule.h"
#include "tap.h"

static const pp_costs unit = {1, 1, 1}, uneven = {2, 3, 1};

typedef struct layout {
    pp_kind k;
    int P, V, M;
} layout;

/* every layout the table checks: P 1..8, M from P to 4P, V 2..4 for interleaved */
static int layouts(layout *out) {
    static const int Ps[] = {1, 2, 3, 4, 8};
    int n = 0;
    for (int i = 0; i < 5; i++)
        for (int mm = 1; mm <= 4; mm++) {
            const int P = Ps[i], M = P * mm;
            out[n++] = (layout){PP_1F1B, P, 1, M};
            out[n++] = (layout){PP_ZB, P, 1, M};
            for (int V = 2; V <= 4; V++) out[n++] = (layout){PP_INTERLEAVED, P, V, M};
        }
    return n;
}

/* the bubble the schedule's formula gives at any costs: 1F1B (P-1)/(M+P-1), interleaved
 * (P-1)/(VM+P-1); -1 for the zero-bubble ones (compared with 1F1B instead) */
static double formula(const layout *l) {
    if (l->k == PP_1F1B) return (double)(l->P - 1) / (l->M + l->P - 1);
    if (l->k == PP_INTERLEAVED) return (double)(l->P - 1) / (l->V * l->M + l->P - 1);
    return -1;
}

/* the most microbatch chunks a rank of the schedule may hold in flight: 1F1B's P - r
 * (interleaved: its warm-up plus one); and with W pending: P (the cap on pending Ws, P - 1,
 * plus the B just done) */
static int peak_bound(const layout *l, int r) {
    if (l->k == PP_INTERLEAVED) return (l->P - r - 1) * 2 + (l->V - 1) * l->P + 1;
    return l->P - r < l->M ? l->P - r : l->M;
}

static int peak_w_bound(const layout *l) {
    return l->k == PP_ZB ? l->P : 0;
}

static double bubble_1f1b(int P, int M, pp_costs c) {
    pp_schedule s;
    pp_timing t;
    char why[512];
    if (pp_schedule_build(&s, PP_1F1B, P, 1, M, why, sizeof why)) return -1;
    double b = pp_simulate(&s, c, &t, why, sizeof why) ? -1 : pp_bubble(&s, &t);
    if (b >= 0) pp_timing_free(&t);
    pp_schedule_free(&s);
    return b;
}

/* one layout at costs c: built, simulated, the bubble and the peaks as they must be; the
 * zero-bubble lists (made at one tick an action) strictly under 1F1B's bubble when strict,
 * else not above it */
static int layout_ok(const layout *l, pp_costs c, int strict, char *why, size_t n) {
    pp_schedule s;
    pp_timing t;
    if (pp_schedule_build(&s, l->k, l->P, l->V, l->M, why, n)) return 0;
    int ok = !pp_simulate(&s, c, &t, why, n);
    if (ok) {
        const double b = pp_bubble(&s, &t), f = formula(l), base = bubble_1f1b(l->P, l->M, c);
        ok = f >= 0 ? fabs(b - f) < 1e-12 : l->P == 1 ? b == 0 : strict ? b < base : b <= base;
        for (int r = 0; r < l->P; r++)
            ok &= t.peak[r] <= peak_bound(l, r) && t.peak_w[r] <= peak_w_bound(l);
        if (!ok)
            snprintf(why, n, "bubble %.6f (formula %.6f, 1f1b %.6f), peak of rank 0 %d", b, f,
                     base, t.peak[0]);
        pp_timing_free(&t);
    }
    pp_schedule_free(&s);
    return ok;
}

static void check_table(void) {
    layout l[200];
    const int n = layouts(l);
    char why[1024];
    for (int pass = 0; pass < 2; pass++) {
        const pp_costs c = pass ? uneven : unit;
        int bad = 0;
        for (int i = 0; i < n && !bad; i++)
            if (!layout_ok(&l[i], c, !pass, why, sizeof why)) {
                bad = 1;
                tap_diag("%s P %d V %d M %d: %s", pp_kind_name(l[i].k), l[i].P, l[i].V, l[i].M,
                         why);
            }
        tap_ok(!bad, "%d layouts at costs F %d B %d W %d: built, every action once in order, no "
               "deadlock, bubbles as their formulas (zero bubble %s 1F1B's), peaks bounded",
               n, c.f, c.b, c.w, pass ? "at most" : "under");
    }
}

/* the published ZB-H1 figure at F = B = W: its bubble is a third of 1F1B's in ticks */
static void check_zb_third(void) {
    pp_schedule s;
    pp_timing t;
    char why[512];
    pp_schedule_build(&s, PP_ZB, 4, 1, 8, why, sizeof why);
    pp_simulate(&s, unit, &t, why, sizeof why);
    const int64_t idle = 4 * t.makespan - 4 * 3 * 8, idle_1f1b = 4 * 3 * 3;
    tap_ok(idle * 3 <= idle_1f1b, "zb at P 4, M 8: %lld idle ticks, 1F1B's %lld (a third or less)",
           (long long)idle, (long long)idle_1f1b);
    pp_timing_free(&t);
    pp_schedule_free(&s);
}

static void check_refusals(void) {
    char why[512];
    tap_ok(pp_layout_check(PP_1F1B, 4, 1, 3, why, sizeof why) && strstr(why, "at least as many"),
           "1f1b refuses 3 microbatches for 4 stages: %s", why);
    tap_ok(pp_layout_check(PP_INTERLEAVED, 4, 2, 6, why, sizeof why) && strstr(why, "4 or 8"),
           "interleaved refuses 6 microbatches for 4 ranks, naming 4 and 8: %s", why);
    tap_ok(pp_layout_check(PP_INTERLEAVED, 4, 1, 8, why, sizeof why) && strstr(why, "1f1b"),
           "interleaved refuses 1 chunk a rank: %s", why);
    tap_ok(pp_layout_check(PP_ZB, 4, 2, 8, why, sizeof why) && strstr(why, "1 chunk a rank"),
           "zb refuses 2 chunks a rank: %s", why);
    pp_kind k;
    tap_ok(!pp_kind_parse("zb", &k) && k == PP_ZB && pp_kind_parse("gpipe", &k),
           "the names parse, another is refused");
}

/* a schedule of P 2, M 2 whose lists are replaced by hand */
static void check_broken(const char *what, const char *expect, const pp_action *r0,
                         const pp_action *r1) {
    pp_schedule s;
    pp_timing t;
    char why[512] = "";
    pp_schedule_build(&s, PP_1F1B, 2, 1, 2, why, sizeof why);
    memcpy(s.act, r0, 4 * sizeof *r0);
    memcpy(s.act + 4, r1, 4 * sizeof *r1);
    const int rc = pp_simulate(&s, unit, &t, why, sizeof why);
    tap_ok(rc && strstr(why, expect), "%s is refused: %s", what, why);
    if (!rc) pp_timing_free(&t);
    pp_schedule_free(&s);
}

static void check_faults(void) {
    const pp_action ok0[] = {{PP_F, 0, 0}, {PP_F, 0, 1}, {PP_BW, 0, 0}, {PP_BW, 0, 1}};
    const pp_action fine[] = {{PP_F, 0, 0}, {PP_BW, 0, 0}, {PP_F, 0, 1}, {PP_BW, 0, 1}};
    const pp_action early[] = {{PP_BW, 0, 0}, {PP_F, 0, 0}, {PP_F, 0, 1}, {PP_BW, 0, 1}};
    const pp_action twice[] = {{PP_F, 0, 0}, {PP_F, 0, 0}, {PP_BW, 0, 0}, {PP_BW, 0, 1}};
    const pp_action cross[] = {{PP_F, 0, 1}, {PP_F, 0, 0}, {PP_BW, 0, 0}, {PP_BW, 0, 1}};
    const pp_action lockstep0[] = {{PP_F, 0, 0}, {PP_BW, 0, 0}, {PP_F, 0, 1}, {PP_BW, 0, 1}};
    check_broken("a backward before its forward", "before its F", ok0, early);
    check_broken("a forward twice", "repeats F", twice, fine);
    check_broken("crossing orders", "deadlocks", lockstep0, cross);
}

static void check_print(void) {
    pp_schedule s;
    pp_timing t;
    char why[512], *buf = NULL;
    size_t len = 0;
    pp_schedule_build(&s, PP_1F1B, 4, 1, 8, why, sizeof why);
    pp_simulate(&s, unit, &t, why, sizeof why);
    FILE *f = open_memstream(&buf, &len);
    pp_schedule_print(&s, &t, unit, f);
    fclose(f);
    int lines = 0;
    for (char *p = buf; *p; p++) lines += *p == '\n';
    tap_ok(lines == 5 && strstr(buf, "bubble 27.3 %") && strstr(buf, "rank  3 |"),
           "the grid: a header and a row a rank, the bubble (3/11)");
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) tap_diag("%s", line);
    free(buf);
    pp_timing_free(&t);
    pp_schedule_free(&s);
}

int main(void) {
    tap_plan(12);
    check_table();
    check_zb_third();
    check_refusals();
    check_faults();
    check_print();
    return tap_done();
}

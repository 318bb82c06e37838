/* test_account.c — what a run cost, the parts a real run cannot show here (src/telemetry/account.h,
 * energy.h, src/report/account_read.h; the real runs: tests/train/test_account.sh):
 *  - the powercap (RAPL) package counters: a tree laid out as the kernel's (intel-rapl:N packages,
 *    intel-rapl:N:M sub-domains that must not be counted twice, a non-package entry); the sum in
 *    joules and the wrap range; a counter that went down since the last read wrapped; an
 *    unreadable counter and a missing tree give NAN and say why (TSR_POWERCAP_ROOT);
 *  - reading metrics.jsonl back: a start with its record, one killed before it (estimated from
 *    its lines: wall to its last record, startup to its first step, its saves), the steps it ran
 *    past the step the next start resumed from counted as lost, the sums, the hours and energy;
 *    a file from before accounting; a line that is not JSON is refused naming file:line;
 *  - the one-line summary (the Slurm comment) and no GPU: energy NAN with the reason. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"
#include "report/account_read.h"
#include "telemetry/account.h"
#include "telemetry/energy.h"

static char dir[256];

static void put(const char *rel, const char *text) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    FILE *f = fopen(p, "w");
    if (f) fputs(text, f), fclose(f);
}

static void sub(const char *rel) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    mkdir(p, 0755);
}

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1); }

static void test_rapl(void) {
    sub("intel-rapl:0"), sub("intel-rapl:0:0"), sub("intel-rapl:1"), sub("intel-rapl-mmio:0");
    put("intel-rapl:0/energy_uj", "1500000\n"), put("intel-rapl:0/max_energy_range_uj", "10000000\n");
    put("intel-rapl:0:0/energy_uj", "900000\n"), put("intel-rapl:0:0/max_energy_range_uj", "5000\n");
    put("intel-rapl:1/energy_uj", "2500000\n"), put("intel-rapl:1/max_energy_range_uj", "20000000\n");
    put("intel-rapl-mmio:0/energy_uj", "7\n");
    char why[256] = "";
    double j[TSR_RAPL_MAX], range[TSR_RAPL_MAX];
    int k = energy_rapl_read(dir, j, range, why, sizeof why);
    tap_ok(k == 2 && near(j[0], 1.5) && near(j[1], 2.5) && near(range[0], 10) && near(range[1], 20),
           "packages intel-rapl:0 and :1 read (%d): %g and %g J, ranges %g and %g J; sub-domains "
           "and mmio not counted", k, j[0], j[1], range[0], range[1]);
    setenv("TSR_POWERCAP_ROOT", dir, 1);
    tsr_energy e;
    energy_start(&e, -1, 1);
    put("intel-rapl:0/energy_uj", "3500000\n"); /* +2 J */
    double g, c;
    energy_read(&e, &g, &c);
    tap_ok(near(c, 2.0) && isnan(g) && strstr(e.gpu_why, "device = cpu"),
           "2 J later the run read 2 J (%g); no GPU: NAN, '%s'", c, e.gpu_why);
    put("intel-rapl:1/energy_uj", "500000\n"); /* wrapped at its 20 J: 2.5 -> 20 -> 0.5, +18 J */
    energy_read(&e, &g, &c);
    tap_ok(near(c, 20.0), "package 1 went down: it wrapped once at its own range, 2 + 18 = %g J "
           "(want 20)", c);
    energy_start(&e, -1, 0);
    tap_ok(!e.cpu_on && strstr(e.cpu_why, "first rank"), "not the node's first rank: not read");
    sub("intel-rapl:2"); /* energy_uj a directory: unreadable */
    sub("intel-rapl:2/energy_uj"), put("intel-rapl:2/max_energy_range_uj", "1\n");
    k = energy_rapl_read(dir, j, range, why, sizeof why);
    tap_ok(k == -1 && strstr(why, "intel-rapl:2/energy_uj: not readable"), "an unreadable "
           "counter: none read, '%s'", why);
    k = energy_rapl_read("/nonexistent/powercap", j, range, why, sizeof why);
    tap_ok(k == -1 && strstr(why, "no powercap"), "no powercap tree: none read, '%s'", why);
    unsetenv("TSR_POWERCAP_ROOT");
}

/* start 1 recorded (steps 1..4, exit 85 at 4); start 2 killed after step 7, its last save at 6;
 * start 3 resumed at 6 and recorded; every figure by hand */
static const char *const run_lines[] = {
    "{\"event\": \"start\", \"step\": 0, \"world\": 2, \"started\": 1000.0, \"ranks\": 2, \"gpus\": 2, \"threads\": 4, \"job\": \"77\", \"time\": 1002.0}",
    "{\"step\": 1, \"loss\": 5, \"step_time_s\": 1.0, \"time\": 1003.0}",
    "{\"event\": \"account\", \"step\": 4, \"exit\": 85, \"wall_s\": 10, \"startup_s\": 2, \"steps_s\": 4, \"save_s\": 1, \"load_s\": 0, \"eval_s\": 1, \"lost_s\": 0, \"idle_s\": 2, \"gpu_energy_j\": 3600, \"cpu_energy_j\": null, \"time\": 1010.0}",
    "{\"event\": \"start\", \"step\": 4, \"world\": 2, \"started\": 1100.0, \"ranks\": 2, \"gpus\": 2, \"threads\": 4, \"job\": \"77\", \"time\": 1103.0}",
    "{\"step\": 4, \"checkpoint\": \"resume\", \"path\": \"x\", \"seconds\": 0.5, \"time\": 1103.0}",
    "{\"step\": 5, \"loss\": 4, \"step_time_s\": 1.5, \"time\": 1105.0}",
    "{\"step\": 6, \"loss\": 4, \"step_time_s\": 1.0, \"time\": 1106.0}",
    "{\"step\": 6, \"checkpoint\": \"save\", \"path\": \"y\", \"seconds\": 0.25, \"time\": 1106.5}",
    "{\"step\": 7, \"loss\": 4, \"step_time_s\": 2.0, \"time\": 1108.5}",
    "{\"event\": \"start\", \"step\": 6, \"world\": 2, \"started\": 1200.0, \"ranks\": 2, \"gpus\": 2, \"threads\": 4, \"job\": \"78\", \"time\": 1201.0}",
    "{\"event\": \"account\", \"step\": 8, \"exit\": 0, \"wall_s\": 20, \"startup_s\": 5, \"steps_s\": 10, \"save_s\": 2, \"load_s\": 1, \"eval_s\": 0, \"lost_s\": 0, \"idle_s\": 2, \"gpu_energy_j\": 7200, \"cpu_energy_j\": null, \"time\": 1220.0}",
};

static void test_read(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    for (size_t i = 0; i < sizeof run_lines / sizeof *run_lines; i++) fprintf(f, "%s\n", run_lines[i]);
    fclose(f);
    acc_run r;
    int rc = account_read(&r, path);
    tap_ok(rc == 0 && r.n == 3 && r.starts[0].recorded && !r.starts[1].recorded &&
           r.starts[2].recorded && !strcmp(r.starts[2].job, "78"), "three starts read, the "
           "second without its record (rc %d, n %zu)", rc, r.n);
    const acc_start *k = &r.starts[1];
    /* wall 1108.5 - 1100; startup: first step ended 1105 after 1.5 s, less the 0.5 s load: 3;
     * steps 1.5 + 1 + 2 = 4.5, of which step 7 (2 s) lost to the restart at 6 */
    tap_ok(near(k->wall, 8.5) && near(k->s[ACC_STARTUP], 3.0) && near(k->s[ACC_LOAD], 0.5) &&
           near(k->s[ACC_SAVE], 0.25) && near(k->s[ACC_STEPS], 2.5) && near(k->s[ACC_LOST], 2.0) &&
           near(k->s[ACC_IDLE], 0.25), "the killed start estimated: wall %g, startup %g, load %g, "
           "save %g, steps %g, lost %g, idle %g", k->wall, k->s[ACC_STARTUP], k->s[ACC_LOAD],
           k->s[ACC_SAVE], k->s[ACC_STEPS], k->s[ACC_LOST], k->s[ACC_IDLE]);
    tap_ok(near(r.wall, 38.5) && near(r.s[ACC_STEPS], 16.5) && near(r.s[ACC_LOST], 2.0) &&
           near(r.gpu_h, 2 * 38.5 / 3600) && near(r.cpu_h, 2 * 38.5 / 3600) &&
           near(r.core_h, 8 * 38.5 / 3600) && near(r.gpu_j, 10800) && isnan(r.cpu_j),
           "sums: wall %g, steps %g, lost %g, GPU-h %g, core-h %g, GPU energy %g J, CPU NAN",
           r.wall, r.s[ACC_STEPS], r.s[ACC_LOST], r.gpu_h, r.core_h, r.gpu_j);
    char line[400];
    account_line(&r, 8, line, sizeof line);
    tap_ok(strstr(line, "tessera: 8 steps, 3 starts, 0.02139 GPU-h") && strstr(line, "goodput 42.9%")
           && strstr(line, "lost 5.2%"), "one line: '%s'", line);
    account_free(&r);
    f = fopen(path, "w");
    fprintf(f, "{\"event\": \"start\", \"step\": 0, \"world\": 1, \"time\": 5.0}\n{\"step\": 1, "
               "\"loss\": 3, \"step_time_s\": 1, \"time\": 6.0}\nnot json\n");
    fclose(f);
    rc = account_read(&r, path);
    tap_ok(rc == 2, "a line that is not JSON: exit 2 naming file:3 (above)");
}

int main(void) {
    tap_plan(11);
    snprintf(dir, sizeof dir, "/tmp/tsr_test_account.XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_rapl();
    test_read();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) != 0 ? 1 : tap_done();
}

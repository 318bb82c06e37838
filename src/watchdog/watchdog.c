/* watchdog.c — see watchdog.h. */
#include "watchdog/watchdog.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "jsonl.h"

static const char *const phase_names[WD_PHASES] = {
    "between steps", "loading the batch", "forward/backward", "gradient reduction",
    "optimizer update", "evaluation", "checkpoint save", "rollout generation", "reward scoring",
    "rollout exchange (waiting for the ranks' rollouts)", "the wait for its data",
    "the pipeline's wait for a neighbouring stage"};
_Static_assert(sizeof phase_names / sizeof *phase_names == WD_PHASES, "a name per phase");

typedef struct {
    double compute, wall; /* this rank's means over the window, seconds per step */
} wd_sample;

static struct {
    /* hang thread */
    atomic_int phase;
    atomic_llong step, since_ns; /* since_ns: when the phase began (CLOCK_MONOTONIC) */
    double timeout;
    int rank, world, running;
    pthread_t thread;
    atomic_int quit;
    /* straggler/MFU windows: the config's keys, this window's sums */
    int64_t window, patience;
    double slow_factor, min_mfu;
    double compute_sum, wall_sum;
    int64_t tokens_sum, n;
    int *strikes, mfu_strikes;
    char (*hosts)[64];
    /* what the phase waits for (watchdog_detail), "" for nothing; under detail_mu */
    pthread_mutex_t detail_mu;
    char detail[512];
} wd;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void watchdog_phase(tsr_wd_phase phase, int64_t step) {
    atomic_store(&wd.since_ns, now_ns());
    atomic_store(&wd.step, (long long)step);
    atomic_store(&wd.phase, (int)phase);
}

void watchdog_detail(const char *what) {
    pthread_mutex_lock(&wd.detail_mu);
    snprintf(wd.detail, sizeof wd.detail, "%s", what);
    pthread_mutex_unlock(&wd.detail_mu);
}

void watchdog_slow_fault(const char *kind, int rank) {
    long long ms, r;
    const char *f = tsr_fault(kind);
    if (f && sscanf(f, "%lld:%lld", &ms, &r) == 2 && r == rank && ms > 0)
        usleep((useconds_t)(ms * 1000));
}

void watchdog_hang_fault(const char *kind, int64_t step, int rank) {
    long long s, r;
    const char *f = tsr_fault(kind);
    if (f && sscanf(f, "%lld:%lld", &s, &r) == 2 && r == rank && s == step)
        for (;;) pause();
}

int watchdog_saving_or_evaluating(void) {
    int ph = atomic_load(&wd.phase);
    return ph == WD_CHECKPOINT || ph == WD_EVAL;
}

/* A rank that waits in a collective (gradient reduction, the rollout exchange) for a peer waits
 * longer than the timeout: 2 s or a tenth of it more, so the stuck peer, whose own watchdog fires
 * first, is the one that names its phase before the abort ends every rank (docs/tessera-train.md
 * "Hang"); a peer whose node died is still reported, by the waiters, that much later. */
static double hang_limit(int ph) {
    int waits_for_peer = ph == WD_REDUCE || ph == WD_EXCHANGE;
    return wd.timeout + (waits_for_peer ? fmax(2.0, 0.1 * wd.timeout) : 0.0);
}

static void *hang_thread(void *arg) {
    (void)arg;
    struct timespec nap = {0, 200 * 1000 * 1000};
    while (!atomic_load(&wd.quit)) {
        nanosleep(&nap, NULL);
        int ph = atomic_load(&wd.phase);
        double held = (double)(now_ns() - atomic_load(&wd.since_ns)) / 1e9;
        if (ph == WD_IDLE || held <= hang_limit(ph)) continue;
        char detail[sizeof wd.detail] = "";
        pthread_mutex_lock(&wd.detail_mu);
        if (ph == WD_DATA_WAIT || ph == WD_PIPE_WAIT) memcpy(detail, wd.detail, sizeof detail);
        pthread_mutex_unlock(&wd.detail_mu);
        /* stderr is unbuffered: the line is out before the abort */
        fprintf(stderr, "[rank %d %s] watchdog: step %lld stuck in %s for %.0f s "
                "(watchdog.hang_timeout = %g s)%s%s: aborting the run so Slurm can requeue it\n",
                wd.rank, wd.hosts ? wd.hosts[wd.rank] : "?", (long long)atomic_load(&wd.step) + 1,
                phase_names[ph], held, wd.timeout, detail[0] ? ": " : "", detail);
        dist_abort(TSR_EXIT_INTERNAL); /* MPI_Abort from this thread: the run is lost anyway */
    }
    return NULL;
}

void watchdog_start(const tsr_dist *d, const tsr_config *cfg, int64_t step) {
    memset(&wd, 0, sizeof wd);
    pthread_mutex_init(&wd.detail_mu, NULL);
    wd.rank = d->rank;
    wd.world = d->world;
    wd.timeout = cfg->watchdog.hang_timeout;
    wd.window = cfg->watchdog.window, wd.patience = cfg->watchdog.patience;
    wd.slow_factor = cfg->watchdog.slow_factor, wd.min_mfu = cfg->watchdog.min_mfu;
    int world = d->world;
    wd.hosts = tsr_calloc((size_t)world, sizeof *wd.hosts);
    dist_node_names(d, wd.hosts);
    wd.strikes = tsr_calloc((size_t)world, sizeof *wd.strikes);
    watchdog_phase(WD_IDLE, step);
    if (wd.timeout > 0) {
        /* stop requests (SIGUSR1/SIGTERM) must reach the main thread, never this one */
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGUSR1);
        sigaddset(&block, SIGTERM);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        if (pthread_create(&wd.thread, NULL, hang_thread, NULL) == 0) wd.running = 1;
        else tsr_warn("watchdog: cannot start the hang watchdog thread; running without it");
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
}

void watchdog_stop(void) {
    if (wd.running) {
        atomic_store(&wd.quit, 1);
        pthread_join(wd.thread, NULL);
        wd.running = 0;
    }
    free(wd.strikes);
    free(wd.hosts);
    wd.strikes = NULL;
    wd.hosts = NULL;
    pthread_mutex_destroy(&wd.detail_mu);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int watchdog_after_step(const watchdog_step *st, FILE *metrics) {
    watchdog_phase(WD_IDLE, st->step);
    const int64_t window = wd.window;
    if (window <= 0) return 0;
    wd.compute_sum += st->compute_time;
    wd.wall_sum += st->step_time;
    wd.tokens_sum += st->tokens;
    if (++wd.n < window) return 0;

    int world = wd.world;
    wd_sample me = {wd.compute_sum / (double)wd.n, wd.wall_sum / (double)wd.n};
    wd_sample *all = tsr_calloc((size_t)world, sizeof *all);
    dist_allgather(&me, all, sizeof me);
    double *sorted = tsr_calloc((size_t)world, sizeof *sorted), wall = 0;
    for (int r = 0; r < world; r++) {
        sorted[r] = all[r].compute;
        if (all[r].wall > wall) wall = all[r].wall; /* the same on every rank: they agree */
    }
    qsort(sorted, (size_t)world, sizeof *sorted, cmp_double);
    double median = sorted[(world - 1) / 2]; /* lower median: with 2 ranks, the faster one */
    const double factor = wd.slow_factor;
    const int64_t patience = wd.patience;
    int slow = -1;
    for (int r = 0; r < world; r++) {
        wd.strikes[r] = median > 0 && all[r].compute > factor * median ? wd.strikes[r] + 1 : 0;
        if (wd.strikes[r] >= patience && (slow < 0 || all[r].compute > all[slow].compute)) slow = r;
    }
    double tok_s = wall > 0 ? (double)wd.tokens_sum / ((double)wd.n * wall) : 0;
    double mfu = st->peak_flops > 0
                     ? st->flops_per_token * tok_s / (world * st->peak_flops) : 0;
    const double floor = wd.min_mfu;
    wd.mfu_strikes = floor > 0 && mfu < floor ? wd.mfu_strikes + 1 : 0;
    int stop = slow >= 0 || wd.mfu_strikes >= patience;
    if (stop && wd.rank == 0) {
        char why[512];
        if (slow >= 0)
            snprintf(why, sizeof why, "rank %d on %s computes %.1f ms per step, %.2fx the ranks' "
                     "median %.1f ms (watchdog.slow_factor %g), %d windows of %lld steps in a row",
                     slow, wd.hosts[slow], 1e3 * all[slow].compute, all[slow].compute / median,
                     1e3 * median, factor, wd.strikes[slow], (long long)window);
        else
            snprintf(why, sizeof why, "MFU %.1f%% under watchdog.min_mfu %.1f%% for %d windows of "
                     "%lld steps in a row", 100 * mfu, 100 * floor, wd.mfu_strikes, (long long)window);
        printf("watchdog: %s: checkpoint, then exit %d = sweep the nodes and requeue\n", why,
               TSR_EXIT_SLOW);
        if (metrics) {
            fprintf(metrics, "{\"step\": %lld, \"event\": \"watchdog\", \"slow_rank\": %d, "
                    "\"slow_host\": \"%s\", \"mfu\": %.6g, \"reason\": \"%s\"",
                    (long long)st->step, slow, slow >= 0 ? wd.hosts[slow] : "", mfu,
                    slow >= 0 ? "straggler" : "mfu");
            jsonl_end_record(metrics);
        }
    }
    free(all);
    free(sorted);
    wd.compute_sum = wd.wall_sum = 0;
    wd.tokens_sum = wd.n = 0;
    return stop;
}

/* stop.c — the stop requests' signals: see stop.h. */
#include "watchdog/stop.h"

#include <math.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "watchdog/watchdog.h"

static volatile sig_atomic_t stop_signal;

/* A SIGTERM while steps run also arms a timer of stop_grace seconds (stop_step_done: 3
 * steps, 5 s at least; 0 before the first step): a rank that reaches no step boundary in that time
 * cannot honour the stop, typically because it waits in a collective for a rank that died (srun's
 * --kill-on-bad-exit SIGTERMs the survivors of a crashed rank). It exits 143 at once instead of
 * hanging until Slurm's SIGKILL: a step that holds its slurmstepd for KillWait seconds outlives
 * slurmctld's MessageTimeout, and the retried signal later cancels the requeued start's step of the
 * same id. A checkpoint save or an evaluation in progress re-arms the timer: those are not cut. */
static volatile sig_atomic_t stop_grace;
static double step_mean; /* seconds per step, a running mean */

static void on_stop_signal(int sig) { /* a flag (and the timer) only: never save here */
    stop_signal = sig;
    if (sig == SIGTERM && stop_grace > 0) alarm((unsigned)stop_grace);
}

static void on_stop_overdue(int sig) {
    (void)sig;
    if (watchdog_saving_or_evaluating()) {
        alarm((unsigned)stop_grace);
        return;
    }
    static const char msg[] = "tessera-train: SIGTERM and no step boundary reached within the stop's "
                              "grace time: this rank is stuck (a peer rank gone?); exiting 143 "
                              "without a checkpoint (the last committed one stands)\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(128 + SIGTERM);
}

void stop_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = on_stop_overdue;
    sigaction(SIGALRM, &sa, NULL);
}

void stop_step_done(double step_seconds) {
    step_mean = step_mean > 0 ? 0.9 * step_mean + 0.1 * step_seconds : step_seconds;
    double grace = ceil(3.0 * step_mean);
    stop_grace = (sig_atomic_t)(grace < 5.0 ? 5.0 : grace > 3600.0 ? 3600.0 : grace);
}


int stop_signalled(void) { return stop_signal != 0; }

void stop_proceed(void) { alarm(0); }

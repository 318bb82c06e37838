/* gpu_profile.c — TSR_PROFILE=1: per-op device time from timed events (gpu_profile.h). */
#include "gpu/gpu_profile.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

#define PROF_PAIRS 2048  /* event pairs in flight before they are read */
#define PROF_ENTRIES 256 /* distinct (name, shape) rows */

typedef struct {
    const char *name; /* a string literal of the caller */
    int a, b, c;
    long calls;
    double ms;
} prof_entry;

enum { SLOT_FREE = 0, SLOT_OPEN, SLOT_ENDED };

static struct {
    int on; /* -1: TSR_PROFILE not read yet */
    tcu_event start[PROF_PAIRS], end[PROF_PAIRS];
    int entry[PROF_PAIRS], state[PROF_PAIRS];
    int free_slots[PROF_PAIRS], nfree, created; /* a stack of free slots; events made (0 or all) */
    prof_entry e[PROF_ENTRIES];
    int n, overflow; /* rows; ops not counted for want of a row */
    int steps;       /* steps begun (the first one dropped once a second begins) */
} P = {.on = -1};

int gpu_prof_on(void) {
    if (P.on < 0) {
        const char *v = getenv("TSR_PROFILE");
        P.on = v && strcmp(v, "1") == 0;
    }
    return P.on;
}

static int entry_of(const char *name, int a, int b, int c) {
    for (int i = 0; i < P.n; i++)
        if (P.e[i].a == a && P.e[i].b == b && P.e[i].c == c &&
            (P.e[i].name == name || strcmp(P.e[i].name, name) == 0))
            return i;
    if (P.n == PROF_ENTRIES) return -1;
    P.e[P.n] = (prof_entry){.name = name, .a = a, .b = b, .c = c};
    return P.n++;
}

/* reads every ended pair into its row (waiting for each one's end) and frees its slot; open
 * pairs (a phase still running) keep theirs: a slot is the caller's until gpu_prof_end */
static void flush(void) {
    for (int i = 0; i < P.created; i++) {
        if (P.state[i] != SLOT_ENDED) continue;
        const float ms = tcu_event_elapsed_ms(P.start[i], P.end[i]);
        const int k = P.entry[i];
        if (k >= 0) P.e[k].calls++, P.e[k].ms += ms;
        else P.overflow++;
        P.state[i] = SLOT_FREE;
        P.free_slots[P.nfree++] = i;
    }
}

int gpu_prof_begin(tcu_stream s, const char *name, int a, int b, int c) {
    if (!gpu_prof_on()) return -1;
    if (!P.created) { /* every pair at once: a slot's events never move */
        for (int i = 0; i < PROF_PAIRS; i++) {
            P.start[i] = tcu_event_create_timed(), P.end[i] = tcu_event_create_timed();
            P.free_slots[i] = PROF_PAIRS - 1 - i;
        }
        P.created = P.nfree = PROF_PAIRS;
    }
    if (!P.nfree) flush();
    if (!P.nfree) tsr_die(TSR_EXIT_INTERNAL, "TSR_PROFILE: %d timings open at once", PROF_PAIRS);
    const int i = P.free_slots[--P.nfree];
    P.entry[i] = entry_of(name, a, b, c);
    P.state[i] = SLOT_OPEN;
    tcu_event_record(P.start[i], s);
    return i;
}

void gpu_prof_end(tcu_stream s, int slot) {
    if (slot < 0) return;
    tcu_event_record(P.end[slot], s);
    P.state[slot] = SLOT_ENDED;
}

void gpu_prof_step_begin(void) {
    if (!gpu_prof_on()) return;
    if (++P.steps == 2) { /* the first step is done: drop it (warm-up) */
        flush();
        for (int i = 0; i < P.n; i++) P.e[i].calls = 0, P.e[i].ms = 0.0;
        P.overflow = 0;
    }
}

static int by_time(const void *x, const void *y) {
    const prof_entry *a = x, *b = y;
    return (a->ms < b->ms) - (a->ms > b->ms);
}

void gpu_prof_report(FILE *f, const char *who) {
    if (!gpu_prof_on()) return;
    flush();
    const int steps = P.steps > 1 ? P.steps - 1 : P.steps; /* one step: it is all there is */
    prof_entry *r = tsr_malloc((size_t)(P.n ? P.n : 1) * sizeof *r);
    memcpy(r, P.e, (size_t)P.n * sizeof *r);
    qsort(r, (size_t)P.n, sizeof *r, by_time);
    double fb = 0.0;
    for (int i = 0; i < P.n; i++)
        if (strcmp(r[i].name, "step: forward+backward") == 0) fb = r[i].ms;
    fprintf(f, "%s: TSR_PROFILE device time per op (CUDA events) over %d step%s%s\n", who, steps,
            steps == 1 ? "" : "s", P.steps > 1 ? " (the first, warm-up, dropped)" : "");
    fprintf(f, "%-28s %-20s %9s %12s %12s %8s\n", "op", "shape", "calls", "ms/step", "us/call",
            "% f+b");
    for (int i = 0; i < P.n; i++) {
        char shape[64] = "-";
        if (r[i].c) snprintf(shape, sizeof shape, "%dx%dx%d", r[i].a, r[i].b, r[i].c);
        else if (r[i].b) snprintf(shape, sizeof shape, "%dx%d", r[i].a, r[i].b);
        else if (r[i].a) snprintf(shape, sizeof shape, "%d", r[i].a);
        fprintf(f, "%-28s %-20s %9ld %12.3f %12.1f %8.1f\n", r[i].name, shape, r[i].calls,
                steps ? r[i].ms / steps : 0.0, r[i].calls ? 1e3 * r[i].ms / r[i].calls : 0.0,
                fb > 0.0 ? 100.0 * r[i].ms / fb : 0.0);
    }
    if (P.overflow)
        fprintf(f, "(%d timings not counted: more than %d distinct ops)\n", P.overflow,
                PROF_ENTRIES);
    free(r);
}

void gpu_prof_free(void) {
    for (int i = 0; i < P.created; i++) tcu_event_destroy(P.start[i]), tcu_event_destroy(P.end[i]);
    P.created = P.nfree = 0;
    memset(P.state, 0, sizeof P.state);
}

/* trainer_faults.c — the trainer's test-only faults (TSR_FAULT, src/base/common.h tsr_fault):
 * a corrupt data window, a straggler or a hang in a step's compute, a NaN in a rank's gradients,
 * a device on which the activations do not fit, a kill or a stop signal after a step
 * (train/trainer_int.h). */
#include <math.h>
#include <signal.h>
#include <stdio.h>

#include "common.h"
#include "train/trainer_int.h"
#include "watchdog/watchdog.h"

static uint64_t hash64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Test hook (docs/spike-guard.md): TSR_FAULT="garbage:LO:HI": the rows data batches LO..HI-1
 * loaded are replaced by pseudo-random tokens (a corrupt data window), each a function of the
 * batch, its global row and position, so every rank count sees the same batch. */
void trainer_fault_garbage(tsr_trainer *t, int64_t d) {
    const char *f = tsr_fault("garbage");
    long long lo, hi;
    if (!f || sscanf(f, "%lld:%lld", &lo, &hi) != 2 || d < lo || d >= hi) return;
    const int64_t row0 = t->mesh.data.rank * t->per_rank; /* (the data rank's rows) */
    for (int64_t i = 0; i < t->per_rank; i++) {
        int32_t *in = t->data.inputs + i * t->T, *tg = t->data.targets + i * t->T;
        const uint64_t row = (uint64_t)d * (uint64_t)t->cfg.global_batch + (uint64_t)(row0 + i);
        for (int j = 0; j < t->T; j++) {
            uint64_t h = hash64(row * (uint64_t)(t->T + 1) + (uint64_t)j);
            in[j] = (int32_t)(h % (uint64_t)t->model.V);
            if (tg[j] >= 0) tg[j] = (int32_t)((h >> 32) % (uint64_t)t->model.V);
        }
    }
}

/* Test-only faults inside a step's compute (TSR_FAULT, see trainer_fault_signal): "slow:MS:RANK"
 * makes RANK sleep MS ms in every step (a straggler); "hang:STEP:RANK" makes it stop for good in
 * step STEP. */
void trainer_fault_compute(const tsr_trainer *t) {
    watchdog_slow_fault("slow", t->dist.rank);
    watchdog_hang_fault("hang", t->step + 1, t->dist.rank);
}

/* Test-only (TSR_FAULT="nan:STEP:RANK" or "nan:FROM-TO:RANK"): RANK's gradient gets a NaN in
 * step STEP (1-based), or in every step FROM..TO. */
void trainer_fault_nan(tsr_trainer *t) {
    const char *f = tsr_fault("nan");
    long long from, to, rank;
    if (!f) return;
    if (sscanf(f, "%lld-%lld:%lld", &from, &to, &rank) != 3) {
        if (sscanf(f, "%lld:%lld", &from, &rank) != 2) return;
        to = from;
    }
    if (t->step + 1 >= from && t->step + 1 <= to && rank == t->dist.rank) {
        if (t->part.lora_on) t->part.lora.g[t->part.lora.n / 2] = NAN;
        else if (t->part.fsdp_on) t->part.fsdp.grads[t->part.fsdp.shard_n / 2] = NAN;
        else t->model.grads[t->model.n_params / 2] = NAN;
    }
}

/* Test hook (tests/train/test_auto_micro.sh): TSR_FAULT="oom:MICRO:RANK" (RANK -1: every rank) makes
 * RANK's CPU backend behave like a device on which the activations of more than MICRO sequences
 * do not fit: try_alloc fails past what is live now plus 1.5x the activations of MICRO sequences,
 * so MICRO fits and 2 x MICRO fails partway through allocating (a real failed allocation, not a
 * flag). MICRO 0: no activations fit at all. */
void trainer_fault_oom(const tsr_trainer *t) {
    long long micro, rank;
    const char *f = tsr_fault("oom");
    if (!f || sscanf(f, "%lld:%lld", &micro, &rank) != 2 || micro < 0) return;
    if (rank != -1 && rank != t->dist.rank) return;
    size_t acts = model_acts_bytes(&t->model, (int)micro, t->T);
    cpu_ops_set_mem_limit(cpu_ops_live_bytes() + acts + acts / 2);
}

/* Test-only fault injection (tests/resume/test_resume.sh): TSR_FAULT="kill:STEP:RANK" makes that rank
 * SIGKILL itself right after that step, with no warning to anyone; "usr1:STEP:RANK" sends it
 * SIGUSR1 (a stop request, as Slurm's --signal would) at exactly that point; "term:STEP:RANK"
 * sends SIGTERM (what scancel and a requeue send). */
void trainer_fault_signal(const tsr_trainer *t) {
    static const char *const kinds[] = {"kill", "usr1", "term"};
    static const int sigs[] = {SIGKILL, SIGUSR1, SIGTERM};
    for (int i = 0; i < 3; i++) {
        const char *f = tsr_fault(kinds[i]);
        long long step = -1, rank = -1;
        if (f && sscanf(f, "%lld:%lld", &step, &rank) == 2 && step == t->step && rank == t->dist.rank)
            raise(sigs[i]);
    }
}

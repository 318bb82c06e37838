/* train_icl.c — the recipe's icl_tasks scored at the trainer's evaluations (train_icl.h). */
#include "train/train_icl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "eval/icl_score.h"
#include "train/tboard.h"
#include "train/metrics.h"
#include "train/trainer.h"

int train_icl_open(tsr_trainer *t) {
    if (t->cfg.n_icl == 0) return 0;
    /* micro_batch rows of seq_len: the activations allocated for training fit the ICL passes,
     * so nothing beyond the suite's own token buffers is allocated */
    int B = icl_rows(t->micro);
    icl_suite *s = tsr_calloc(1, sizeof *s);
    int rc = icl_suite_open(s, t->cfg.icl, t->cfg.n_icl, t->cfg.data.tokenizer, ICL_DEFAULT_SEED,
                            t->model.V, B, t->T);
    if (rc) {
        free(s);
        return rc;
    }
    t->icl = s;
    return 0;
}

void train_icl_close(tsr_trainer *t) {
    if (!t->icl) return;
    icl_suite_close(t->icl);
    free(t->icl);
    t->icl = NULL;
}

/* A JSON number, or null when not finite (JSON has no NaN). */
static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

/* {"event": "icl", "step": S, "tasks": {"<label>": {"accuracy": A, "rescaled": R, "correct": C,
 * "examples": N}, ...}, "gauntlet": G, "seconds": X}; labels are [A-Za-z0-9_.-] (config_icl.c), so
 * they need no escaping. */
static void log_jsonl(const tsr_trainer *t, const icl_scores *sc, double seconds) {
    FILE *f = t->metrics;
    fprintf(f, "{\"event\": \"icl\", \"step\": %lld, \"tasks\": {", (long long)t->step);
    for (int i = 0; i < sc->n; i++) {
        fprintf(f, "%s\"%s\": {\"accuracy\": ", i ? ", " : "", t->icl->tasks[i].cfg.label);
        json_num(f, sc->accuracy[i]);
        fprintf(f, ", \"rescaled\": ");
        json_num(f, sc->rescaled[i]);
        fprintf(f, ", \"correct\": %.0f, \"examples\": %.0f}", sc->correct[i], sc->examples[i]);
    }
    fprintf(f, "}, \"gauntlet\": ");
    json_num(f, sc->gauntlet);
    fprintf(f, ", \"seconds\": %.6g", seconds);
    metrics_end_record(f);
}

void train_icl_run(tsr_trainer *t) {
    double t0 = tsr_now();
    icl_scores sc;
    trainer_ensure_acts(t);
    /* micro_batch = auto may have lowered the rows the activations hold since the suite opened;
     * fewer rows per pass give the same scores (the padding rows count for nothing) */
    if (t->icl->B > trainer_acts_B(t)) t->icl->B = trainer_acts_B(t);
    icl_suite_score(t->icl, &t->model, &t->dist, &sc);
    double seconds = tsr_now() - t0;
    if (t->dist.rank != 0) return;
    printf("eval step %lld | icl", (long long)t->step);
    for (int i = 0; i < sc.n; i++) printf(" %s %.4f", t->icl->tasks[i].cfg.label, sc.accuracy[i]);
    printf(" | gauntlet %.4f | %.2f s\n", sc.gauntlet, seconds);
    fflush(stdout);
    if (t->metrics) log_jsonl(t, &sc, seconds);
    char tag[128];
    for (int i = 0; i < sc.n; i++) {
        snprintf(tag, sizeof tag, "icl/%s/accuracy", t->icl->tasks[i].cfg.label);
        tboard_scalar(t->tb, tag, sc.accuracy[i]);
    }
    tboard_scalar(t->tb, "icl/gauntlet", sc.gauntlet);
    tboard_write_step(t->tb, t->step);
}

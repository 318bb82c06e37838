/* train_icl.c — the recipe's icl_tasks scored at the trainer's evaluations (train_icl.h). */
#include "eval/train_icl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"
#include "eval/icl_score.h"
#include "telemetry/tboard.h"
#include "telemetry/metrics.h"

int train_icl_open(icl_suite **out, const tsr_config *cfg, const tsr_tokenizer *tok, int V,
                   int micro, int T) {
    *out = NULL;
    if (cfg->n_icl == 0) return 0;
    for (int i = 0; i < cfg->n_icl; i++) /* the batched generator reads full weights on the CPU */
        if (cfg->icl[i].type == TSR_ICL_GEN &&
            (cfg->sharding == TSR_SHARD_ZERO3 || cfg->sharding == TSR_SHARD_HSDP ||
             cfg->device == TSR_DEVICE_CUDA || cfg->expert > 1 || cfg->pipeline > 1)) {
            tsr_error("icl_tasks[%d] (%s): generation_task_with_answers is scored by the trainer "
                      "on the CPU with full weights only: not under parallel.sharding = zero3 / "
                      "hsdp, device = \"cuda\", expert or pipeline parallelism; score it with "
                      "`tessera eval` on a checkpoint (docs/eval.md)", i, cfg->icl[i].label);
            return TSR_EXIT_USAGE;
        }
    /* micro_batch rows of seq_len: the activations allocated for training fit the ICL passes,
     * so nothing beyond the suite's own token buffers is allocated */
    icl_suite *s = tsr_calloc(1, sizeof *s);
    int rc = icl_suite_open(s, cfg->icl, cfg->n_icl, tok, cfg->data.tokenizer, ICL_DEFAULT_SEED,
                            V, icl_rows(micro), T);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void train_icl_close(icl_suite **s) {
    if (!*s) return;
    icl_suite_close(*s);
    free(*s);
    *s = NULL;
}

/* A JSON number, or null when not finite (JSON has no NaN). */
static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fputs("null", f);
}

/* {"event": "icl", "step": S, "tasks": {"<label>": {"accuracy": A, "rescaled": R, "correct": C,
 * "examples": N}, ...}, "gauntlet": G, "seconds": X}; labels are [A-Za-z0-9_.-] (config_icl.c), so
 * they need no escaping. */
static void log_jsonl(FILE *f, const icl_suite *s, int64_t step, const icl_scores *sc,
                      double seconds) {
    fprintf(f, "{\"event\": \"icl\", \"step\": %lld, \"tasks\": {", (long long)step);
    for (int i = 0; i < sc->n; i++) {
        fprintf(f, "%s\"%s\": {\"accuracy\": ", i ? ", " : "", s->tasks[i].cfg.label);
        json_num(f, sc->accuracy[i]);
        fprintf(f, ", \"rescaled\": ");
        json_num(f, sc->rescaled[i]);
        fprintf(f, ", \"correct\": %.0f, \"examples\": %.0f}", sc->correct[i], sc->examples[i]);
    }
    fprintf(f, "}, \"gauntlet\": ");
    json_num(f, sc->gauntlet);
    fprintf(f, ", \"seconds\": %.6g", seconds);
    jsonl_end_record(f);
}

void train_icl_run(icl_suite *s, tsr_model *m, const tsr_dist *d, int acts_B, int64_t step,
                   FILE *metrics, struct tsr_tboard *tb) {
    double t0 = tsr_now();
    icl_scores sc;
    /* micro_batch = auto may have lowered the rows the activations hold since the suite opened;
     * fewer rows per pass give the same scores (the padding rows count for nothing) */
    if (s->B > acts_B) s->B = acts_B;
    icl_suite_score(s, m, d, &sc);
    double seconds = tsr_now() - t0;
    if (d->rank != 0) return;
    printf("eval step %lld | icl", (long long)step);
    for (int i = 0; i < sc.n; i++) printf(" %s %.4f", s->tasks[i].cfg.label, sc.accuracy[i]);
    printf(" | gauntlet %.4f | %.2f s\n", sc.gauntlet, seconds);
    fflush(stdout);
    if (metrics) log_jsonl(metrics, s, step, &sc, seconds);
    char tag[128];
    for (int i = 0; i < sc.n; i++) {
        snprintf(tag, sizeof tag, "icl/%s/accuracy", s->tasks[i].cfg.label);
        tboard_scalar(tb, tag, sc.accuracy[i]);
    }
    tboard_scalar(tb, "icl/gauntlet", sc.gauntlet);
    tboard_write_step(tb, step);
}

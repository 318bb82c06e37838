/* objectives.c — the choice of the run's objective table (objective.h) and language modelling's
 * row: the loss is the mean over the batch's counted target tokens, the trainer's own
 * microbatches compute it, an evaluation is the validation loss and its perplexity. */
#include "run/objective.h"

#include <math.h>

#include "data/dataloader.h"

const tsr_objective *objective_of(tsr_objective_kind kind) {
    switch (kind) {
    case TSR_OBJ_DPO: return &objective_dpo;
    case TSR_OBJ_GRPO: return &objective_grpo;
    default: return &objective_lm;
    }
}

static int64_t lm_denominator(const tsr_config *cfg, int64_t counted) {
    (void)cfg;
    return counted;
}

/* model_forward over rows whose segments begin at starts (NULL: at the eot_tokens) */
static double forward(void *m, const int32_t *inputs, const int32_t *targets,
                      const uint8_t *starts, int B, int T) {
    return model_forward_starts(m, inputs, targets, starts, B, T);
}

/* the mean loss over eval_samples of data.val (or the whole split) */
static double lm_eval(const tsr_run *r, void *s) {
    (void)s;
    const tsr_dataloader *dl = r->data;
    return dataloader_mean_loss(dl->val, r->cfg->data.val, *r->T, *r->micro, r->cfg->eval_samples,
                                &r->mesh->data, forward, r->model, dl->inputs, dl->targets,
                                r->model->cfg.attn_mask == TSR_MASK_DOCUMENT, NULL);
}

static void lm_eval_figures(const void *s, double val_loss, objective_eval_figure f[2]) {
    (void)s;
    f[0] = (objective_eval_figure){"val loss", 6, "val_loss", val_loss};
    f[1] = (objective_eval_figure){"val ppl", 4, "val_ppl", exp(val_loss)};
}

const tsr_objective objective_lm = {
    .name = "lm",
    .segment_starts = 1,
    .denominator = lm_denominator,
    .eval = lm_eval,
    .eval_figures = lm_eval_figures,
    .eval_json_plain = 1,
};

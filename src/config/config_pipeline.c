/* config_pipeline.c — parallel.pipeline and its keys against the model and the other keys
 * (config.h config_pipeline_*; docs/pipeline.md): the hand cut's spelling (Megatron's
 * --pipeline-model-parallel-layout), the stages a model has layers for, the modes the pipeline
 * does not run with yet; and a pipeline stage's layers in the whole model (config_layer_at).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "config/config.h"

int config_layer_at(const tsr_model_config *m, int l) {
    const tsr_model_part *p = &m->part;
    for (int i = 0, at = 0; i < p->n; at += p->len[i++])
        if (l < at + p->len[i]) return p->first[i] + (l - at);
    return l;
}

/* ---- the hand cut ------------------------------------------------------------------------ */

#define LAYOUT_MAX 65536 /* characters of a layout with its groups written out */

/* a number at *s (1 .. 1000000), *s past it; -1 when none */
static long layout_count(const char **s) {
    long v = 0;
    if (!isdigit((unsigned char)**s)) return -1;
    while (isdigit((unsigned char)**s) && v <= 1000000) v = v * 10 + (*(*s)++ - '0');
    return v >= 1 && v <= 1000000 ? v : -1;
}

/* s written out into out (n, *at used): "(X)*N" as N copies of X, "t*N" as N t's, blanks
 * dropped; stops at end (the group's closing parenthesis) or the string's end. -1 with why. */
static int layout_expand(const char **s, char *out, size_t n, size_t *at, int depth, char *why,
                         size_t wn) {
    while (**s && **s != ')') {
        const char c = *(*s)++;
        if (isspace((unsigned char)c) || c == ',') continue;
        size_t from = *at;
        if (c == '(') {
            if (depth > 8 || layout_expand(s, out, n, at, depth + 1, why, wn) != 0) {
                if (depth > 8) snprintf(why, wn, "groups nested deeper than 8");
                return -1;
            }
            if (*(*s)++ != ')') {
                snprintf(why, wn, "a '(' without its ')'");
                return -1;
            }
        } else if (c == 'E' || c == 'L' || c == 't' || c == '|') {
            if (*at + 1 >= n) goto long_;
            out[(*at)++] = c;
        } else {
            snprintf(why, wn, "'%c' is none of E (the embedding), t (a layer), L (the final norm, "
                     "the head and the loss), | (the next stage), (...)*N, t*N", c);
            return -1;
        }
        if (**s != '*') continue;
        (*s)++;
        const long k = layout_count(s);
        const size_t len = *at - from;
        if (k < 0 || (c != '(' && c != 't')) {
            snprintf(why, wn, "'*' follows 't' or a ')' and takes a count of 1 to 1000000");
            return -1;
        }
        if (len * (size_t)k >= n - *at + len) goto long_;
        for (long r = 1; r < k; r++, *at += len) memcpy(out + *at, out + from, len);
    }
    return 0;
long_:
    snprintf(why, wn, "longer than %d items written out", LAYOUT_MAX);
    return -1;
}

/* the written-out layout's stages into cut (S + 1 entries): -1 with why when they are not S, a
 * stage has no layer, E is not the first stage's first item or L the last stage's last */
static int layout_stages(const char *x, int S, int *cut, int *layers, char *why, size_t wn) {
    int s = 0, in = 0; /* the stage, its layers so far */
    cut[0] = 0, *layers = 0;
    for (const char *c = x;; c++) {
        if (*c == '|' || !*c) {
            if (in == 0) {
                snprintf(why, wn, "stage %d has no layer (t): every stage runs at least one", s);
                return -1;
            }
            if (!*c) break;
            if (++s >= S) {
                snprintf(why, wn, "it has more than the %d stages of the pipeline", S);
                return -1;
            }
            cut[s] = *layers, in = 0;
        } else if (*c == 't') {
            in++, (*layers)++;
        } else if ((*c == 'E' && (c != x)) || (*c == 'L' && c[1] != '\0')) {
            snprintf(why, wn, "%s", *c == 'E' ? "E (the embedding) is the first stage's first item"
                                              : "L (the head and the loss) is the last stage's "
                                                "last item");
            return -1;
        }
    }
    if (s + 1 != S) {
        snprintf(why, wn, "it has %d stage%s, the pipeline %d", s + 1, s ? "s" : "", S);
        return -1;
    }
    cut[S] = *layers;
    return 0;
}

int config_pipeline_layout(const char *layout, int n_layer, int S, int *cut, char *why,
                           size_t n) {
    static char x[LAYOUT_MAX];
    size_t at = 0;
    const char *s = layout;
    if (layout_expand(&s, x, sizeof x, &at, 0, why, n) != 0) return -1;
    if (*s == ')') {
        snprintf(why, n, "a ')' without its '('");
        return -1;
    }
    x[at] = '\0';
    if (x[0] != 'E' || at < 2 || x[at - 1] != 'L') {
        snprintf(why, n, "it starts with E (the embedding) and ends with L (the head and the "
                 "loss)");
        return -1;
    }
    int layers;
    if (layout_stages(x, S, cut, &layers, why, n) != 0) return -1;
    if (layers != n_layer) {
        snprintf(why, n, "it places %d layers (t), the model has model.n_layer = %d", layers,
                 n_layer);
        return -1;
    }
    return 0;
}

/* ---- the keys ------------------------------------------------------------------------------ */

int config_pipeline_stages(const tsr_config *cfg) {
    const long long P = cfg->pipeline > 1 ? cfg->pipeline : 1;
    return (int)(P * (cfg->pipeline_virtual > 1 ? cfg->pipeline_virtual : 1));
}

/* a valid hand cut of L layers into S stages into out (n bytes): L / S layers a stage, the rest
 * on the last, "Et*2|t*2L"; a long one written as "(t*K|)*R" */
static void layout_example(int L, int S, char *out, size_t n) {
    const int k = L / S, last = L - k * (S - 1);
    if (S == 1) snprintf(out, n, "Et*%dL", L);
    else if (S == 2) snprintf(out, n, "Et*%d|t*%dL", k, last);
    else snprintf(out, n, "Et*%d|(t*%d|)*%dt*%dL", k, k, S - 2, last);
}

int config_pipeline_check(const tsr_config *cfg, const char **key, char *why, size_t n) {
    const long long P = cfg->pipeline, V = cfg->pipeline_virtual, L = cfg->model.n_layer;
    const int S = config_pipeline_stages(cfg);
    int cut[2 * TSR_PART_MAX * 64 + 1];
    if (P <= 1) return 0;
    if (cfg->pipeline_schedule == TSR_PP_INTERLEAVED && V < 2) {
        *key = "parallel.pipeline_virtual";
        snprintf(why, n, "parallel.pipeline_schedule = \"interleaved\" runs 2 or more model chunks a "
                 "rank: set parallel.pipeline_virtual = 2 (or more), or parallel.pipeline_schedule "
                 "= \"1f1b\"");
        return -1;
    }
    if (cfg->pipeline_schedule != TSR_PP_INTERLEAVED && V > 1) {
        *key = "parallel.pipeline_virtual";
        snprintf(why, n, "parallel.pipeline_virtual = %lld: model chunks a rank are the interleaved "
                 "schedule's; set parallel.pipeline_schedule = \"interleaved\", or "
                 "parallel.pipeline_virtual = 1", V);
        return -1;
    }
    if (cfg->pipeline_schedule == TSR_PP_ZB &&
        (cfg->sharding == TSR_SHARD_ZERO3 || cfg->sharding == TSR_SHARD_HSDP)) {
        *key = "parallel.pipeline_schedule";
        snprintf(why, n, "parallel.pipeline_schedule = \"zb\" with parallel.sharding = \"%s\": "
                 "the zero-bubble schedule computes a layer's weight gradients after its sharded "
                 "gradients are summed; set parallel.pipeline_schedule = \"1f1b\" or "
                 "\"interleaved\", or parallel.sharding = \"zero1\"",
                 cfg->sharding == TSR_SHARD_ZERO3 ? "zero3" : "hsdp");
        return -1;
    }
    if (cfg->pipeline_schedule == TSR_PP_INTERLEAVED && cfg->expert > 1 &&
        cfg->model.moe_experts > 0) {
        *key = "parallel.pipeline_schedule";
        snprintf(why, n, "parallel.pipeline_schedule = \"interleaved\" with parallel.expert = "
                 "%lld: a rank's experts are the MoE layers of one stage (their checkpoint one "
                 "run of each expert tensor); set parallel.pipeline_schedule = \"1f1b\" or "
                 "\"zb\", or parallel.expert = 1", (long long)cfg->expert);
        return -1;
    }
    if (S > L) {
        *key = "parallel.pipeline";
        snprintf(why, n, "parallel.pipeline = %lld x parallel.pipeline_virtual = %lld makes %d "
                 "stages, more than the model's %lld layers (model.n_layer): every stage runs at "
                 "least one; the most is parallel.pipeline = %lld", P, V, S, L, L / (V > 1 ? V : 1));
        return -1;
    }
    if (S > (int)(sizeof cut / sizeof cut[0]) - 1) {
        *key = "parallel.pipeline";
        snprintf(why, n, "%d stages: at most %d", S, (int)(sizeof cut / sizeof cut[0]) - 1);
        return -1;
    }
    if (cfg->pipeline_layout[0] &&
        config_pipeline_layout(cfg->pipeline_layout, (int)L, S, cut, why, n) != 0) {
        char inner[600], example[160];
        snprintf(inner, sizeof inner, "%s", why);
        layout_example((int)L, S, example, sizeof example);
        *key = "parallel.pipeline_layout";
        snprintf(why, n, "parallel.pipeline_layout = \"%s\": %s; for example \"%s\" (%d stages, "
                 "| between them), or \"\" for a cut balanced by cost", cfg->pipeline_layout,
                 inner, example, S);
        return -1;
    }
    return 0;
}

const char *config_pipeline_pair(const tsr_config *cfg, const char **value) {
    const tsr_cfg_pair pairs[] = {
        {cfg->micro_batch == 0, "micro_batch", "= \"auto\""},
        {cfg->objective == TSR_OBJ_GRPO, "objective", "= \"grpo\""},
        {cfg->sample.tokens > 0, "sample.tokens", "> 0"},
    };
    return cfg->pipeline > 1 ? config_first_pair(pairs, sizeof pairs / sizeof pairs[0], value)
                             : NULL;
}

const char *config_pipeline_cuda_pair(const tsr_config *cfg, const char **value) {
    const tsr_model_config *m = &cfg->model;
    const tsr_cfg_pair pairs[] = {
        {cfg->pipeline_schedule == TSR_PP_ZB, "parallel.pipeline_schedule", "= \"zb\""},
        {cfg->sharding == TSR_SHARD_ZERO1, "parallel.sharding", "= \"zero1\""},
        {cfg->sharding == TSR_SHARD_ZERO3, "parallel.sharding", "= \"zero3\""},
        {cfg->sharding == TSR_SHARD_HSDP, "parallel.sharding", "= \"hsdp\""},
        {cfg->context > 1, "parallel.context", "> 1"},
        {cfg->expert > 1, "parallel.expert", "> 1"},
        {cfg->tensor > 1, "parallel.tensor", "> 1"},
        {cfg->lora.rank > 0, "lora.rank", "> 0"},
        {cfg->objective == TSR_OBJ_DPO, "objective", "= \"dpo\""},
        {m->moe_experts > 0, "model.moe_experts", "> 0"},
        {m->num_nextn_predict_layers > 0, "model.num_nextn_predict_layers", "> 0"},
        {cfg->precision.fp8 != TSR_FP8_NONE, "precision.fp8", "other than \"none\""},
    };
    return cfg->pipeline > 1 && cfg->device == TSR_DEVICE_CUDA
               ? config_first_pair(pairs, sizeof pairs / sizeof pairs[0], value)
               : NULL;
}

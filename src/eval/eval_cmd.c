/* eval_cmd.c — `tessera eval`: a checkpoint's validation loss per dataset and its in-context-
 * learning accuracy per task, with LLM Foundry's gauntlet-style aggregate (docs/eval.md).
 *
 * Run by hand (one process) or under mpirun/srun (the examples and validation samples are split
 * over the ranks; every rank reads the model itself). The model and its architecture come from
 * the checkpoint's stored config; what to evaluate (data.val, eval_samples, icl_tasks,
 * data.tokenizer, micro_batch, threads) comes from --config when given, else from the stored
 * config, with --set applied to both. */
#include "eval/eval_cmd.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/ckpt_model.h"
#include "json.h"
#include "blas_env.h"
#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "data/data.h"
#include "data/dataloader.h"
#include "dist/dist.h"
#include "eval/icl_score.h"
#include "fsutil.h"
#include "hf/hf_importer.h"
#include "tokenizer/tokenizer.h"

static const cli_opt eval_opts[] = {
    {"ckpt", 'C', "PATH", "checkpoint: a step-*.h5 file, a run directory or its `latest`, or a "
                          "Hugging Face directory (required)"},
    {"config", 'c', "FILE", "what to evaluate (data.val, eval_samples, icl_tasks, "
                            "data.tokenizer, micro_batch; the model and seq_len are the "
                            "checkpoint's); default: the checkpoint's own config"},
    {"set", 's', "KEY=VALUE", "override a key of that config (repeatable), e.g. threads=4"},
    {"val", CLI_NO_SHORT('v'), "DIR", "another validation dataset (repeatable)"},
    {"out", 'o', "FILE", "write the JSON report here too (temp file + rename)"},
    {"seed", 'S', "SEED", "seed of the few-shot example choice (default 1234)"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd eval_cli = {
    "eval", "",
    "Scores a checkpoint: validation loss and perplexity per dataset, accuracy per in-context-\n"
    "learning task (multiple_choice, language_modeling, schema, generation_task_with_answers;\n"
    "LLM Foundry's JSONL), and the average of the tasks' accuracies above their random baselines.\n"
    "Under mpirun/srun the work is split over the ranks. Exit 0 ok, 1 usage or config error, 2\n"
    "checkpoint, data or task error.",
    eval_opts, (int)(sizeof eval_opts / sizeof eval_opts[0]), NULL,
};

#define MAX_SETS 64
#define MAX_VALS 16

typedef struct eval_args {
    const char *ckpt, *config, *out;
    const char *sets[MAX_SETS], *vals[MAX_VALS];
    int n_sets, n_vals;
    int64_t seed;
} eval_args;

static int on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    eval_args *a = ctx;
    switch (ch) {
    case 'C': a->ckpt = val; return 0;
    case 'c': a->config = val; return 0;
    case 'o': a->out = val; return 0;
    case 'S': return cli_number(c, ch, val, 0, INT64_MAX, &a->seed);
    case 's':
        if (a->n_sets == MAX_SETS) return cli_usage_error(c, "too many --set options", "");
        a->sets[a->n_sets++] = val;
        return 0;
    case CLI_NO_SHORT('v'):
        if (a->n_vals == MAX_VALS) return cli_usage_error(c, "too many --val options", "");
        a->vals[a->n_vals++] = val;
        return 0;
    }
    return TSR_EXIT_USAGE;
}

/* A batch of B sequences of T tokens for the validation passes: inputs, targets. */
typedef struct batch {
    int B, T;
    int32_t *in, *tg;
} batch;

static double forward(void *m, const int32_t *inputs, const int32_t *targets,
                      const uint8_t *starts, int B, int T) {
    return model_forward_starts(m, inputs, targets, starts, B, T);
}

/* A preference dataset (tessera prep --format preference; docs/dpo.md): how often the model
 * gives the chosen answer a higher log-probability (summed over the answer's target tokens)
 * than the rejected one, and the mean difference, over its first limit / 2 pairs (limit 0: all).
 * *pairs 0 when dir holds no pairs, or pairs packed for another seq_len (a warning). Pairs are
 * split over the ranks. */
static int pair_scores(tsr_model *m, batch *b, const char *dir, int64_t limit,
                       const tsr_dist *d, double *accuracy, double *margin, double *pairs) {
    uint64_t np = 0, T = 0;
    *pairs = 0, *accuracy = *margin = NAN;
    int found = dataset_pairs_for(dir, b->T, &np, &T);
    if (found == 0) return 0;
    if (found < 0) {
        tsr_warn("%s: its preference pairs are packed for seq_len %llu, the model's is %d: pairs "
                 "not scored", dir, (unsigned long long)T, b->T);
        return 0;
    }
    tsr_dataset *ds;
    TSR_CHECK(dataloader_open_split(&ds, dir, m->V));
    uint64_t n = dataset_n_samples(ds, b->T) / 2;
    if (limit > 0 && (uint64_t)limit / 2 < n) n = (uint64_t)limit / 2;
    double s[3] = {0, 0, 0}; /* chosen ahead, margin, pairs */
    for (uint64_t p = (uint64_t)d->rank; p < n; p += (uint64_t)d->world) {
        double lp[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            if (dataset_read_sample(ds, b->T, 2 * p + (uint64_t)k, b->in, b->tg) < 0)
                tsr_die(TSR_EXIT_DATA, "%s: cannot read sample %llu", dir,
                        (unsigned long long)(2 * p + (uint64_t)k));
            model_row_logprobs(m, b->in, b->tg, 1, b->T, &lp[k]);
        }
        s[0] += lp[0] > lp[1];
        s[1] += lp[0] - lp[1];
        s[2] += 1;
    }
    dist_allreduce_sum_f64(s, 3);
    dataset_close(ds);
    *pairs = s[2];
    if (s[2] > 0) *accuracy = s[0] / s[2], *margin = s[1] / s[2];
    return 0;
}

/* Mean loss of the dataset at dir (dataloader_mean_loss: the trainer's own evaluation). */
static int val_loss(tsr_model *m, batch *b, const char *dir, int64_t limit, const tsr_dist *d,
                    double *loss, double *samples) {
    tsr_dataset *ds;
    uint64_t packed = 0; /* examples packed whole into rows of packed tokens (tessera prep --pack) */
    if (dataset_index_note(dir, "packed_seq_len", &packed) == 1 && packed != (uint64_t)b->T) {
        tsr_error("eval: %s is packed for seq_len %llu (its index.tsv), the model is evaluated at "
                  "seq_len %d (the checkpoint's): rows would cut its examples; give --set "
                  "seq_len=%llu", dir, (unsigned long long)packed, b->T, (unsigned long long)packed);
        return TSR_EXIT_USAGE;
    }
    TSR_CHECK(dataloader_open_split(&ds, dir, m->V));
    uint64_t n = 0;
    *loss = dataloader_mean_loss(ds, dir, b->T, b->B, limit, d, forward, m, b->in, b->tg,
                                 m->cfg.attn_mask == TSR_MASK_DOCUMENT, &n);
    *samples = (double)n;
    dataset_close(ds);
    return 0;
}


static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.9g", v);
    else fprintf(f, "null");
}

typedef struct report {
    const char *ckpt;
    int64_t step;
    int n_val;
    const char *val_dir[MAX_VALS + 1];
    double val_loss[MAX_VALS + 1], val_samples[MAX_VALS + 1];
    double pairs[MAX_VALS + 1], pair_acc[MAX_VALS + 1], pair_margin[MAX_VALS + 1];
    const icl_suite *icl; /* its tasks, and their scores in `scores` */
    icl_scores scores;
} report;

static void write_report(FILE *f, const report *r) {
    fprintf(f, "{\n  \"checkpoint\": ");
    json_fput_string(f, r->ckpt);
    fprintf(f, ",\n  \"step\": %lld,\n  \"val\": [", (long long)r->step);
    for (int i = 0; i < r->n_val; i++) {
        fprintf(f, "%s\n    {\"path\": ", i ? "," : "");
        json_fput_string(f, r->val_dir[i]);
        fprintf(f, ", \"loss\": ");
        json_num(f, r->val_loss[i]);
        fprintf(f, ", \"perplexity\": ");
        json_num(f, exp(r->val_loss[i]));
        fprintf(f, ", \"samples\": %.0f", r->val_samples[i]);
        if (r->pairs[i] > 0) { /* a preference dataset (docs/dpo.md) */
            fprintf(f, ", \"preference_pairs\": %.0f, \"preference_accuracy\": ", r->pairs[i]);
            json_num(f, r->pair_acc[i]);
            fprintf(f, ", \"preference_logp_margin\": ");
            json_num(f, r->pair_margin[i]);
        }
        fprintf(f, "}");
    }
    fprintf(f, "%s],\n  \"icl\": [", r->n_val ? "\n  " : "");
    const icl_scores *sc = &r->scores;
    for (int i = 0; i < sc->n; i++) {
        const icl_task *t = &r->icl->tasks[i];
        fprintf(f, "%s\n    {\"label\": ", i ? "," : "");
        json_fput_string(f, t->cfg.label);
        fprintf(f, ", \"type\": \"%s\", \"examples\": %.0f, \"fewshot\": %d, \"accuracy\": ",
                config_icl_type_name(t->cfg.type), sc->examples[i], t->cfg.fewshot);
        json_num(f, sc->accuracy[i]);
        fprintf(f, ", \"random_baseline\": ");
        json_num(f, t->baseline);
        fprintf(f, ", \"rescaled\": ");
        json_num(f, sc->rescaled[i]);
        fprintf(f, "}");
    }
    fprintf(f, "%s],\n  \"gauntlet\": {\"tasks\": %d, \"average_rescaled_accuracy\": ",
            sc->n ? "\n  " : "", sc->n);
    json_num(f, sc->gauntlet);
    fprintf(f, "}\n}\n");
}

static int save_report(const char *path, const report *r) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        tsr_error("%s: cannot write the report: %s", tmp, strerror(errno));
        return TSR_EXIT_DATA;
    }
    write_report(f, r);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        tsr_error("%s: cannot write the report: %s", path, strerror(errno));
        unlink(tmp);
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* The icl_tasks of ec, tokenized with the tokenizer `spec` (loaded here into *tok, once; the
 * caller frees it after scoring: generation tasks decode their completions with it). */
static int open_icl(icl_suite *icl, const tsr_config *ec, const char *spec, uint64_t seed,
                    int V, int B, int T, tsr_tokenizer **tok) {
    int rc = ec->n_icl && spec[0] ? tokenizer_open(tok, spec) : 0;
    if (rc) {
        tsr_error("  data.tokenizer = \"%s\": cannot load it (above); icl_tasks need it", spec);
        return rc;
    }
    return icl_suite_open(icl, ec->icl, ec->n_icl, *tok, spec, seed, V, B, T);
}

static int evaluate(const eval_args *a, const tsr_dist *d) {
    tsr_config mc, ec; /* the model's config (stored), the evaluation's */
    tsr_model m;
    char file[1200];
    TSR_CHECK(ckpt_model_load(&hf_model_importer, a->ckpt, a->sets, a->n_sets, 0, &mc, &m, file, sizeof file));
    /* --config says what to evaluate; the model (and its seq_len) is the checkpoint's */
    static const char *const pinned[] = {"model.", "lora.", "seq_len"};
    int rc = a->config ? config_load_over(&ec, a->config, a->sets, a->n_sets, &mc, file, pinned, 3)
                       : (ec = mc, 0);
    report *r = tsr_calloc(1, sizeof *r);
    icl_suite icl = {0};
    tsr_tokenizer *icl_tok = NULL;
    r->icl = &icl;
    r->scores.gauntlet = NAN;
    batch b = {.B = icl_rows(ec.micro_batch), .T = (int)mc.seq_len};
    if (!rc) {
        cpu_ops_set_threads(ec.threads > 0 ? ec.threads : (int)(sysconf(_SC_NPROCESSORS_ONLN) / (d->local_world ? d->local_world : 1)));
        model_alloc_acts(&m, b.B, b.T);
        b.in = tsr_malloc((size_t)b.B * b.T * sizeof *b.in);
        b.tg = tsr_malloc((size_t)b.B * b.T * sizeof *b.tg);
        r->ckpt = file;
        const char *base = strrchr(file, '/');
        long long step = -1;
        r->step = sscanf(base ? base + 1 : file, "step-%lld.h5", &step) == 1 ? step : -1;
        /* every task file is read before any scoring: a bad one stops the evaluation first */
        const char *tok = ec.data.tokenizer[0] ? ec.data.tokenizer : mc.data.tokenizer;
        rc = open_icl(&icl, &ec, tok, (uint64_t)a->seed, m.V, b.B, b.T, &icl_tok);
    }
    if (!rc && ec.data.val[0]) r->val_dir[r->n_val++] = ec.data.val;
    for (int i = 0; i < a->n_vals; i++) r->val_dir[r->n_val++] = a->vals[i];
    for (int i = 0; !rc && i < r->n_val; i++) {
        double t0 = tsr_now();
        if (!(rc = val_loss(&m, &b, r->val_dir[i], ec.eval_samples, d, &r->val_loss[i],
                            &r->val_samples[i])))
            rc = pair_scores(&m, &b, r->val_dir[i], ec.eval_samples, d, &r->pair_acc[i],
                             &r->pair_margin[i], &r->pairs[i]);
        if (!rc && d->rank == 0)
            fprintf(stderr, "eval: %s: loss %.6f over %.0f samples in %.2f s\n", r->val_dir[i],
                    r->val_loss[i], r->val_samples[i], tsr_now() - t0);
    }
    if (!rc && icl.n) {
        double t0 = tsr_now();
        icl_suite_score(&icl, &m, d, &r->scores);
        if (d->rank == 0)
            fprintf(stderr, "eval: icl_tasks: %d tasks, gauntlet %.4f in %.2f s\n", icl.n,
                    r->scores.gauntlet, tsr_now() - t0);
    }
    if (!rc && !r->n_val && !icl.n) {
        tsr_error("eval: nothing to evaluate: no data.val, --val or icl_tasks in %s",
                  a->config ? a->config : "the checkpoint's config");
        rc = TSR_EXIT_USAGE;
    }
    if (!rc && d->rank == 0) {
        write_report(stdout, r);
        if (a->out) rc = save_report(a->out, r);
    }
    icl_suite_close(&icl);
    if (icl_tok) tokenizer_free(icl_tok);
    free(r), free(b.in), free(b.tg);
    model_free(&m);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    blas_fix_coretype(argv);
    tsr_dist d;
    int launched = dist_launched();
    if (launched) dist_init(&d, &argc, &argv);
    else dist_init_single(&d);
    tsr_log_mute(d.rank != 0); /* every rank parses the same argv: report once */
    eval_args a = {.seed = ICL_DEFAULT_SEED};
    int rc = cli_parse(&eval_cli, argc, argv, on_opt, &a);
    if (rc == 0 && optind < argc) rc = cli_usage_error(&eval_cli, "unexpected operand: ", argv[optind]);
    if (rc == 0 && !a.ckpt) rc = cli_usage_error(&eval_cli, "--ckpt is required", "");
    if (rc == 0) rc = evaluate(&a, &d);
    tsr_log_mute(0);
    if (launched) dist_finalize();
    return rc < 0 ? 0 : rc; /* -1: --help */
}

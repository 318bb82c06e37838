/* grpo.c — objective = "grpo": the prompts, the rollouts, the groups and their advantages
 * (grpo.h; docs/rl.md). The objective's pass is in grpo_loss.c, the KL reference in grpo_ref.c.
 *
 * The step's story, in order:
 *   1. rollout    (rollout)      this data rank's prompts of a round, G completions each, generated
 *   2. reward     (reward)       their rewards, agreed over the ranks, the overlong penalty; the
 *                                round's groups all-gathered and kept (with dynamic sampling
 *                                the tied ones dropped, and further rounds drawn)
 *   3. advantage  (advantage)    each kept group's rewards normalised
 *   4. loss       (grpo_compute, grpo_loss.c) grpo.updates passes of the clipped objective
 * grpo_rollout runs 1-3, the step's batch; the trainer runs 4 as the objective's pass.
 */
#include "posttrain/grpo.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "crc32c.h"
#include "data/s3.h"
#include "fsutil.h"
#include "model/decoder.h"
#include "model/model_rollout.h"
#include "generate/gen_batch.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_eos.h"
#include "posttrain/grpo_int.h"
#include "metrics_units.h"
#include "data/dataloader.h"
#include "gpu/gpu_train.h"
#include "watchdog/watchdog.h"

#define REFILL_STREAM 0x7265666cull /* "refl": dynamic sampling's further prompts */
#define MAX_RECORDS_BYTES (1ull << 34)

/* ---- the ranks --------------------------------------------------------------------------------- */

/* The rollouts are a data rank's (docs/rl.md "Under tensor parallelism"): its prompts, its
 * completions, their rewards and its share of the policy's rows. A tensor group's ranks share a
 * data rank; its tensor rank 0 (the lead) generates and scores them, once, and sends them to the
 * others; the policy's passes run split on every rank. */
static int lead(const tsr_run *run) {
    return run->mesh->T <= 1 || mesh_group(run->mesh, TSR_MESH_TENSOR)->rank == 0;
}

/* the lead's rows (bytes) to the other ranks of its tensor group */
static void share_rows(const tsr_run *run, void *rows, size_t bytes) {
    if (run->mesh->T > 1) dist_group_bcast(mesh_group(run->mesh, TSR_MESH_TENSOR)->cpu, rows, bytes, 0);
}

/* every data rank's rows (bytes each) into all, in data-rank order; collective over the data
 * group (the world when it is the world) */
static void gather_rows(const tsr_run *run, const void *mine, void *all, size_t bytes) {
    if (run->mesh->data.view) dist_group_allgather(run->mesh->data.view, mine, all, bytes);
    else dist_allgather(mine, all, bytes);
}

/* ---- the prompts ----------------------------------------------------------------------------- */

/* SPLIT/prompts.jsonl: its lines checked against the notes (count, CRC32C), each a JSON object.
 * On an object store (s3://) it is fetched by rank 0 and broadcast, as the index is. Every rank. */
static int load_records(const tsr_run *run, const char *dir, const char *key, grpo_records *r,
                        uint64_t windows) {
    uint64_t n = 0, crc = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, DATASET_PROMPTS);
    if (dataset_index_note(dir, "prompts", &n) != 1 ||
        dataset_index_note(dir, "prompts_crc32c", &crc) != 1) {
        tsr_error("%s = \"%s\": objective = \"grpo\" needs prompts (tessera prep --format prompts "
                  "--pack P; docs/rl.md), and its index.tsv has no prompts note", key, dir);
        return TSR_EXIT_USAGE;
    }
    size_t len;
    if (s3_is_url(dir))
        TSR_CHECK(dataloader_fetch_shared(run->dist, dir, DATASET_PROMPTS, MAX_RECORDS_BYTES,
                                          &r->text, &len));
    else
        TSR_CHECK(fs_read_all(path, MAX_RECORDS_BYTES, &r->text, &len));
    uint32_t got = tsr_crc32c(0, r->text, len);
    r->at = tsr_malloc((size_t)(n + 1) * sizeof *r->at);
    uint64_t k = 0;
    for (size_t i = 0; i < len && k <= n; k++) {
        if (k < n) r->at[k] = i;
        const char *nl = memchr(r->text + i, '\n', len - i);
        i = nl ? (size_t)(nl - r->text) + 1 : len;
    }
    r->at[n < k ? n : k] = len;
    r->n = n;
    if (got != (uint32_t)crc || k != n || n != windows) {
        tsr_error("%s: %llu lines, CRC32C %u; its index.tsv notes %llu prompts, CRC32C %llu, and "
                  "the shards hold %llu: the record file does not belong to these prompts (prep "
                  "them again)", path, (unsigned long long)k, got, (unsigned long long)n,
                  (unsigned long long)crc, (unsigned long long)windows);
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* The stop ids: the end of text (the tokenizer's, else V - 1), and the ids the prompts' index
 * notes (stop_ids: a chat template's end of turn); once, at the first generation (the model's
 * layout is built after grpo_init) */
static void stop_ids(const tsr_run *run, tsr_grpo *g) {
    if (g->n_stop) return;
    uint32_t e = run->tok ? tokenizer_eos_id(run->tok, NULL, TOKENIZER_EOS_DOCUMENT) : UINT32_MAX;
    g->stop_ids[g->n_stop++] = e < (uint32_t)run->model->V ? (int32_t)e : run->model->V - 1;
    char ids[512];
    dataset_index_note_text(run->cfg->data.train, "stop_ids", ids, sizeof ids);
    for (char *s = ids, *end; *s && g->n_stop < 16; s = *end ? end + 1 : end) {
        long v = strtol(s, &end, 10);
        if (end == s) break;
        if (v >= 0 && v < run->model->V) g->stop_ids[g->n_stop++] = (int32_t)v;
    }
    reward_harmony_find(&g->harmony, run->tok, g->stop_ids, g->n_stop);
    if (run->dist->rank != 0) return;
    printf("grpo: a completion stops at id");
    for (int i = 0; i < g->n_stop; i++) printf("%s %d", i ? "," : "", g->stop_ids[i]);
    printf(" (end of text%s)\n", g->n_stop > 1 ? "; the prompts' stop_ids" : "");
    if (g->harmony.on)
        printf("grpo: the rewards read each completion's final channel (harmony: the text after "
               "its last <|channel|>final<|message|>; none: no answer, 0), a reward program gets "
               "it as \"final\" beside the whole completion\n");
    else
        printf("grpo: the rewards read the whole completion\n");
}

static int check_prompts(const tsr_run *run, tsr_grpo *g) {
    const tsr_config *c = run->cfg;
    uint64_t P = 0;
    if (dataset_index_note(c->data.train, "packed_seq_len", &P) != 1 || P < 2 || P > INT32_MAX) {
        if (run->dist->rank == 0)
            tsr_error("data.train = \"%s\": objective = \"grpo\" needs prompts (tessera prep "
                      "--format prompts --pack P; docs/rl.md)", c->data.train);
        return TSR_EXIT_USAGE;
    }
    g->P = (int)P, g->G = (int)c->grpo.group_size, g->N = (int)c->grpo.max_new_tokens;
    g->ctx_max = g->P + g->N;
    if (g->P - 1 + g->N > *run->T) {
        if (run->dist->rank == 0)
            tsr_error("seq_len = %d: a row holds a prompt (up to %d tokens: data.train's --pack "
                      "%d, less one) and grpo.max_new_tokens = %d: set seq_len >= %d", *run->T,
                      g->P - 1, g->P, g->N, g->P - 1 + g->N);
        return TSR_EXIT_USAGE;
    }
    uint64_t vP = 0;
    if (c->data.val[0] && (dataset_index_note(c->data.val, "packed_seq_len", &vP) != 1 || vP != P)) {
        if (run->dist->rank == 0)
            tsr_error("data.val = \"%s\": held-out prompts packed as data.train's (--pack %d) are "
                      "needed, its index notes --pack %llu", c->data.val, g->P,
                      (unsigned long long)vP);
        return TSR_EXIT_USAGE;
    }
    TSR_CHECK(load_records(run, c->data.train, "data.train", &g->recs[0],
                           dataset_n_samples(run->data->train, g->P)));
    if (run->data->val)
        TSR_CHECK(load_records(run, c->data.val, "data.val", &g->recs[1],
                               dataset_n_samples(run->data->val, g->P)));
    dataloader_set_samples(run->data, g->recs[0].n);
    return 0;
}

/* A hang watchdog that would fire before reward.timeout: a hung reward program then ends the run
 * as a hang (exit 3, which the job hook requeues, into the same hang) instead of exit 2 quoting
 * the exchange */
static void warn_hang_timeout(const tsr_run *run) {
    const tsr_config *c = run->cfg;
    if (run->dist->rank == 0 && c->reward.kind == TSR_REWARD_COMMAND &&
        c->watchdog.hang_timeout > 0 && c->watchdog.hang_timeout <= c->reward.timeout)
        tsr_warn("watchdog.hang_timeout = %g s is not above reward.timeout = %g s: a reward "
                 "program that hangs will abort the run as a hang (exit 3, requeued into the same "
                 "hang) instead of stopping it with exit 2 and the exchange quoted; set "
                 "watchdog.hang_timeout above reward.timeout (docs/rl.md \"Watchdogs\")",
                 c->watchdog.hang_timeout, c->reward.timeout);
}

int grpo_init(const tsr_run *run, tsr_grpo *g) {
    warn_hang_timeout(run);
    int rc = check_prompts(run, g);
    if (!rc && lead(run)) /* (one reward program a data rank) */
        rc = reward_open(&g->rw, run->cfg, run->mesh->data.rank, run->mesh->data.world);
    int worst = rc;
    dist_allreduce_max_int(&worst, 1);
    if (worst) return worst;
    g->rec = (sizeof(grpo_row) + (size_t)g->ctx_max * 4 + (size_t)g->N * 4 + 7) / 8 * 8;
    const size_t rows = (size_t)run->cfg->global_batch * (size_t)g->G;
    g->round = tsr_malloc(rows * g->rec);
    g->kept = tsr_malloc(rows * g->rec);
    const size_t mt = (size_t)*run->micro * (size_t)*run->T;
    g->in = tsr_malloc(mt * sizeof *g->in), g->tg = tsr_malloc(mt * sizeof *g->tg);
    g->losses = tsr_malloc(mt * sizeof *g->losses), g->dl = tsr_malloc(mt * sizeof *g->dl);
    g->ref = tsr_malloc(mt * sizeof *g->ref);
    return 0;
}

void grpo_free(tsr_grpo *g) {
    if (!g) return;
    grpo_ref_free(g);
    reward_close(&g->rw);
    for (int k = 0; k < 2; k++) free(g->recs[k].text), free(g->recs[k].at);
    free(g->round), free(g->kept), free(g->in), free(g->tg), free(g->losses), free(g->dl);
    free(g->ref);
    if (g->log) fclose(g->log);
    free(g);
}

/* ---- the weights the rollouts are drawn from --------------------------------------------------- */

/* The rollouts' weights (model/model_rollout.h): the training model's, full and merged; none on
 * device = cuda (the device's weights: gpu_train_generate) */
static void rollout_model(const tsr_run *run, model_rollout *w) {
    memset(w, 0, sizeof *w); /* (nothing to free on the device) */
    if (run->be->gpu) return;
    const tsr_train_part *p = run->part;
    model_rollout_open(w, run->model, p->fsdp_on ? &run->part->fsdp : NULL,
                       p->lora_on ? &p->lora : NULL, run->be->ops);
}

/* ---- one round of rollouts ------------------------------------------------------------------- */

/* the dataset index of the prompt at batch position j of round k of data batch d */
static uint64_t prompt_index(const tsr_run *run, int64_t d, int k, int64_t j) {
    if (k == 0) return dataloader_index(run->data, d, j);
    const uint64_t n = run->data->sampler.n;
    return sampler_permute((uint64_t)run->cfg->seed ^ REFILL_STREAM, (uint64_t)d * 64 + (uint64_t)k,
                           n, (uint64_t)j % n);
}

/* prompt idx of ds read into row r's context: the EOT before it, its tokens */
static void read_prompt(const tsr_grpo *g, const tsr_dataset *ds, const char *name, uint64_t idx,
                        grpo_row *r) {
    int32_t *in = tsr_malloc((size_t)g->P * 2 * sizeof *in), *tg = in + g->P;
    dataloader_read(ds, name, g->P, idx, in, tg);
    int32_t *ctx = grpo_ctx(r);
    int n = 0;
    while (n < g->P && tg[n] >= 0) n++;
    ctx[0] = in[0];
    memcpy(ctx + 1, tg, (size_t)n * sizeof *tg);
    r->prompt = idx, r->n_prompt = n;
    free(in);
}

/* once, rank 0: what the first generation's slots allocate (their caches keep a sliding layer's
 * window only: docs/decoder.md "Rolling window") */
static void say_kv(const tsr_run *run, tsr_grpo *g, const tsr_decoder *d, const gen_batch_opts *o) {
    if (g->kv_said++ || run->dist->rank != 0) return;
    char b[32];
    metrics_human_bytes(b, sizeof b, (double)gen_batch_bytes(d, o));
    printf("grpo: rollouts of %d slots of %d positions: %s of KV caches and buffers\n", o->batch,
           o->cap, b);
}

/* the rows' completions: G sequences per prompt row (rows r0, r0 + G, ...), sampled (or greedy
 * with temperature 0) on the rollout weights */
static int64_t generate(const tsr_run *run, tsr_grpo *g, const model_rollout *w, char *rows,
                        int n_rows, const gen_sampling *how, uint64_t d) {
    stop_ids(run, g);
    gen_seq *s = tsr_calloc((size_t)n_rows, sizeof *s);
    int maxp = 1;
    for (int i = 0; i < n_rows; i++) {
        grpo_row *r = grpo_row_at(g, rows, (size_t)i);
        s[i] = (gen_seq){.prompt = grpo_ctx(r), .n_prompt = 1 + r->n_prompt,
                         .key = gen_stream_key((uint64_t)run->cfg->seed, d, (uint64_t)r->pos,
                                               (uint64_t)r->sample),
                         .ids = grpo_ctx(r) + 1 + r->n_prompt, .logp = grpo_logp(g, r)};
        if (1 + r->n_prompt > maxp) maxp = 1 + r->n_prompt;
    }
    const gen_batch_opts o = {.sampling = *how, .max_new = g->N, .stop_ids = g->stop_ids,
                              .n_stop_ids = g->n_stop, .batch = (int)run->cfg->grpo.rollout_batch,
                              .cap = maxp + g->N};
    int64_t tokens;
    if (run->be->gpu) { /* on the device (docs/rl.md "On the GPU") */
        tokens = gpu_train_generate(run_gpu(run), &o, s, n_rows);
    } else {
        tsr_decoder dec;
        model_infer_decoder(&w->m, &dec);
        say_kv(run, g, &dec, &o);
        tokens = gen_batch_run(&dec, &o, s, n_rows);
    }
    for (int i = 0; i < n_rows; i++) {
        grpo_row *r = grpo_row_at(g, rows, (size_t)i);
        r->n = s[i].n, r->stop = (int32_t)s[i].stop, r->entropy = s[i].entropy;
    }
    free(s);
    return tokens;
}

/* row r's completion as text (valid UTF-8; "" without a tokenizer) and, harmony on, its final
 * channel's text (else NULL): what its reward sees (reward_texts); its stop id is not text */
static void row_texts(const tsr_run *run, tsr_grpo *g, grpo_row *r, char **text, char **final) {
    reward_texts(&g->harmony, run->tok, grpo_ctx(r) + 1 + r->n_prompt,
                 r->n - (r->stop == GEN_STOP_EOS), text, final);
}

/* the rows' rewards (rec: 0 train, 1 val records); 0, or TSR_EXIT_DATA with the reason in rw.err */
static int score(const tsr_run *run, tsr_grpo *g, char *rows, int n_rows, int rec, int64_t step) {
    reward_req *q = tsr_calloc((size_t)n_rows, sizeof *q);
    double *rw = tsr_malloc((size_t)n_rows * sizeof *rw);
    int *pass = tsr_malloc((size_t)n_rows * sizeof *pass);
    const grpo_records *R = &g->recs[rec];
    for (int i = 0; i < n_rows; i++) {
        grpo_row *r = grpo_row_at(g, rows, (size_t)i);
        q[i] = (reward_req){.id = (uint64_t)i, .record = R->text + R->at[r->prompt],
                            .record_len = R->at[r->prompt + 1] - R->at[r->prompt] - 1,
                            .harmony = g->harmony.on,
                            .ids = grpo_ctx(r) + 1 + r->n_prompt, .n = r->n,
                            .stop = gen_stop_names[r->stop], .step = step,
                            .prompt_index = r->prompt, .sample = r->sample};
        char *text, *final;
        row_texts(run, g, r, &text, &final);
        q[i].completion = text, q[i].final = final;
    }
    int rc = reward_score(&g->rw, q, n_rows, rw, pass);
    for (int i = 0; i < n_rows && !rc; i++) {
        grpo_row *r = grpo_row_at(g, rows, (size_t)i);
        r->reward = rw[i], r->pass = pass[i];
    }
    for (int i = 0; i < n_rows; i++) free((char *)q[i].completion), free((char *)q[i].final);
    free(q), free(rw), free(pass);
    return rc;
}

/* DAPO's soft overlong penalty: 0 up to N - buffer tokens, then linearly down to -penalty at N */
static double overlong(const tsr_config *c, int n) {
    const int64_t B = c->grpo.overlong_buffer, N = c->grpo.max_new_tokens;
    if (B <= 0 || n <= N - B) return 0.0;
    return -c->grpo.overlong_penalty * (double)(n - (N - B)) / (double)B;
}

/* Every rank's status agreed on; a failing rank prints its reason. Returns the worst status. */
static int agree(const tsr_grpo *g, int rc) {
    if (rc) tsr_error("%s", g->rw.err);
    int worst = rc;
    dist_allreduce_max_int(&worst, 1);
    return worst;
}

/* 1. rollout: this rank's prompts of round k (G rows each, from rows) read and their completions
 * generated on the rollout weights; *gen_tokens += the tokens generated */
static void rollout(const tsr_run *run, tsr_grpo *g, const model_rollout *w, int64_t d, int k,
                    char *rows, double *gen_tokens) {
    const int64_t per = *run->per_rank, G = g->G;
    for (int64_t p = 0; p < per; p++) {
        const int64_t j = run->mesh->data.rank * per + p;
        const uint64_t idx = prompt_index(run, d, k, j);
        for (int64_t s = 0; s < G; s++) {
            grpo_row *r = grpo_row_at(g, rows, (size_t)(p * G + s));
            memset(r, 0, g->rec);
            read_prompt(g, run->data->train, run->cfg->data.train, idx, r);
            r->pos = (int32_t)(k * run->cfg->global_batch + j), r->sample = (int32_t)s;
        }
    }
    const tsr_config *c = run->cfg;
    const gen_sampling how = {.temperature = c->grpo.temperature, .top_k = c->grpo.top_k,
                              .top_p = c->grpo.top_p};
    watchdog_phase(WD_ROLLOUT, *run->step);
    watchdog_slow_fault("slow_rollout", run->dist->rank);
    watchdog_hang_fault("hang_rollout", *run->step + 1, run->dist->rank);
    if (lead(run)) *gen_tokens += (double)generate(run, g, w, rows, (int)(per * G), &how, (uint64_t)d);
}

/* 2. reward: the rows' (mine of them) rewards, every rank's status agreed on, the overlong
 * penalty added. Returns 0 or the agreed failure. */
static int reward(const tsr_run *run, tsr_grpo *g, char *rows, size_t mine) {
    watchdog_phase(WD_REWARD, *run->step);
    int rc = lead(run) ? score(run, g, rows, (int)mine, 0, *run->step + 1) : 0;
    watchdog_phase(WD_EXCHANGE, *run->step);
    rc = agree(g, rc);
    for (size_t i = 0; i < mine && !rc; i++) {
        grpo_row *r = grpo_row_at(g, rows, i);
        r->reward += overlong(run->cfg, r->n);
    }
    return rc;
}

/* Round k's groups: this data rank's prompts of it rolled out and rewarded (by the lead of its
 * tensor group, which shares them), then every data rank's all-gathered into g->round. Returns 0
 * or the agreed failure. */
static int round_rows(const tsr_run *run, tsr_grpo *g, const model_rollout *w, int64_t d, int k,
                      double *gen_tokens) {
    const size_t mine = (size_t)(*run->per_rank * g->G);
    char *rows = tsr_malloc(mine * g->rec);
    rollout(run, g, w, d, k, rows, gen_tokens);
    int rc = reward(run, g, rows, mine);
    if (!rc) share_rows(run, rows, mine * g->rec), gather_rows(run, rows, g->round, mine * g->rec);
    free(rows);
    return rc;
}

/* ---- the groups -------------------------------------------------------------------------------- */

static int tied(const tsr_grpo *g, char *rows, size_t grp) {
    const double r0 = grpo_row_at(g, rows, grp * (size_t)g->G)->reward;
    for (int s = 1; s < g->G; s++)
        if (grpo_row_at(g, rows, grp * (size_t)g->G + (size_t)s)->reward != r0) return 0;
    return 1;
}

/* The round's groups into kept (from slot *nk on): all of them, or with dynamic sampling those
 * not tied; `fill`: the tied ones too (the last round). Returns the groups dropped. */
static int keep(const tsr_run *run, tsr_grpo *g, int *nk, int fill) {
    const int GB = (int)run->cfg->global_batch, dyn = run->cfg->grpo.dynamic_sampling;
    const size_t gbytes = (size_t)g->G * g->rec;
    int dropped = 0;
    for (int c = 0; c < GB && *nk < GB; c++) {
        if (dyn && !fill && tied(g, g->round, (size_t)c)) {
            dropped++;
            continue;
        }
        memcpy(g->kept + (size_t)(*nk)++ * gbytes, g->round + (size_t)c * gbytes, gbytes);
    }
    return dropped;
}

/* 3. advantage: each kept group's advantages: (r - mean) / (std + 1e-6), std unbiased, or
 * r - mean */
static void advantage(const tsr_run *run, tsr_grpo *g) {
    const int GB = (int)run->cfg->global_batch, G = g->G;
    for (int c = 0; c < GB; c++) {
        double sum = 0.0, sq = 0.0;
        for (int s = 0; s < G; s++) sum += grpo_row_at(g, g->kept, (size_t)(c * G + s))->reward;
        const double mean = sum / G;
        for (int s = 0; s < G; s++) {
            const double e = grpo_row_at(g, g->kept, (size_t)(c * G + s))->reward - mean;
            sq += e * e;
        }
        const double sd = sqrt(sq / (G - 1));
        for (int s = 0; s < G; s++) {
            grpo_row *r = grpo_row_at(g, g->kept, (size_t)(c * G + s));
            r->adv = run->cfg->grpo.scale_rewards ? (r->reward - mean) / (sd + 1e-6)
                                                  : r->reward - mean;
        }
    }
}

/* The step's statistics over the kept rows, and the loss's normalisation (grpo.loss_agg). */
static int64_t kept_stats(const tsr_run *run, tsr_grpo *g) {
    const size_t R = (size_t)run->cfg->global_batch * (size_t)g->G;
    double *s = g->stats;
    for (size_t i = 0; i < R; i++) {
        grpo_row *r = grpo_row_at(g, g->kept, i);
        s[GRPO_ROWS] += 1, s[GRPO_REWARD] += r->reward, s[GRPO_REWARD_SQ] += r->reward * r->reward;
        s[GRPO_PASS] += r->pass, s[GRPO_TOKENS] += r->n, s[GRPO_ENTROPY] += r->entropy;
        s[GRPO_TRUNCATED] += r->stop == GEN_STOP_LENGTH;
    }
    for (size_t c = 0; c < (size_t)run->cfg->global_batch; c++) s[GRPO_TIED] += tied(g, g->kept, c);
    switch (run->cfg->grpo.loss_agg) {
    case TSR_GRPO_AGG_SEQUENCE: g->w_tok = 0.0, g->w_row = 1.0 / (double)R; break;
    case TSR_GRPO_AGG_TOKEN: g->w_tok = 1.0 / s[GRPO_TOKENS], g->w_row = 0.0; break;
    default: g->w_tok = 1.0 / ((double)R * g->N), g->w_row = 0.0; break;
    }
    return (int64_t)s[GRPO_TOKENS];
}

/* rank 0: the first grpo.log_completions rows of the step into run_dir/completions.jsonl */
static void log_completions(const tsr_run *run, tsr_grpo *g) {
    const size_t R = (size_t)run->cfg->global_batch * (size_t)g->G;
    const size_t logged = (size_t)run->cfg->grpo.log_completions;
    const size_t n = logged < R ? logged : R;
    if (run->dist->rank != 0 || n == 0) return;
    if (!g->log) {
        char path[1200];
        snprintf(path, sizeof path, "%s/completions.jsonl", run->cfg->run_dir);
        if (!(g->log = fopen(path, "a"))) {
            tsr_warn("%s: cannot append: %s (completions are not logged)", path, strerror(errno));
            run->cfg->grpo.log_completions = 0;
            return;
        }
    }
    for (size_t i = 0; i < n; i++) {
        grpo_row *r = grpo_row_at(g, g->kept, i);
        char *text, *final;
        row_texts(run, g, r, &text, &final);
        double lp = 0.0;
        for (int k = 0; k < r->n; k++) lp += grpo_logp(g, r)[k];
        fprintf(g->log, "{\"step\": %lld, \"prompt_index\": %llu, \"position\": %d, \"sample\": %d, "
                "\"reward\": %.9g, \"pass\": %d, \"advantage\": %.9g, \"logprob\": %.9g, "
                "\"stop\": \"%s\", \"tokens\": [", (long long)*run->step + 1,
                (unsigned long long)r->prompt, r->pos, r->sample, r->reward, r->pass, r->adv, lp,
                gen_stop_names[r->stop]);
        for (int k = 0; k < r->n; k++)
            fprintf(g->log, "%s%d", k ? ", " : "", grpo_ctx(r)[1 + r->n_prompt + k]);
        fputs("], \"completion\": ", g->log);
        json_fput_string(g->log, text);
        if (g->harmony.on) { /* what the reward read (docs/rl.md "What a reward sees") */
            fputs(", \"final\": ", g->log);
            if (final) json_fput_string(g->log, final);
            else fputs("null", g->log);
        }
        fputs("}\n", g->log);
        free(text), free(final);
    }
    fflush(g->log);
}

int64_t grpo_rollout(const tsr_run *run, tsr_grpo *g, int64_t d) {
    const double t0 = tsr_now();
    double *s = g->stats, gen = 0.0;
    memset(s, 0, GRPO_NSTATS * sizeof *s);
    g->update = 0;
    model_rollout w;
    watchdog_phase(WD_EXCHANGE, *run->step); /* (zero3 / hsdp: the weights gathered) */
    rollout_model(run, &w);
    const int rounds = run->cfg->grpo.dynamic_sampling ? (int)run->cfg->grpo.max_rounds : 1;
    int nk = 0, rc = 0;
    for (int k = 0; k < rounds && nk < run->cfg->global_batch && !rc; k++) {
        rc = round_rows(run, g, &w, d, k, &gen); /* 1. rollout, 2. reward */
        if (!rc) s[GRPO_DROPPED] += keep(run, g, &nk, 0), s[GRPO_ROUNDS] = k + 1;
        if (!rc && k + 1 == rounds) keep(run, g, &nk, 1); /* short after every round: tied ones */
    }
    model_rollout_close(&w);
    if (rc) return -1;
    advantage(run, g);
    const int64_t tokens = kept_stats(run, g);
    dist_allreduce_sum_f64(&gen, 1);
    double dt = tsr_now() - t0;
    dist_allreduce_max_f64(&dt, 1);
    s[GRPO_GEN_TOKENS] = gen, s[GRPO_ROLLOUT_S] = dt;
    log_completions(run, g);
    return tokens;
}

/* ---- held-out pass@1 --------------------------------------------------------------------------- */

double grpo_eval(const tsr_run *run, tsr_grpo *g, double *reward) {
    if (!run->data->val) return NAN;
    uint64_t n = g->recs[1].n;
    if (run->cfg->grpo.eval_prompts > 0 && (uint64_t)run->cfg->grpo.eval_prompts < n)
        n = (uint64_t)run->cfg->grpo.eval_prompts;
    const uint64_t W = (uint64_t)run->mesh->data.world, r0 = (uint64_t)run->mesh->data.rank;
    const int mine = lead(run) ? (int)(n / W + (r0 < n % W ? 1 : 0)) : 0; /* (the lead's) */
    char *rows = tsr_malloc((size_t)(mine ? mine : 1) * g->rec);
    for (int i = 0; i < mine; i++) { /* prompt i W + rank: greedy, one completion each */
        grpo_row *r = grpo_row_at(g, rows, (size_t)i);
        memset(r, 0, g->rec);
        read_prompt(g, run->data->val, run->cfg->data.val, (uint64_t)i * W + r0, r);
        r->pos = (int32_t)((uint64_t)i * W + r0);
    }
    model_rollout w;
    rollout_model(run, &w);
    const gen_sampling greedy = {.temperature = 0.0, .top_p = 1.0};
    if (mine) generate(run, g, &w, rows, mine, &greedy, 0);
    model_rollout_close(&w);
    int rc = agree(g, mine ? score(run, g, rows, mine, 1, *run->step) : 0);
    double sums[3] = {0, 0, (double)mine};
    for (int i = 0; i < mine && !rc; i++) {
        grpo_row *r = grpo_row_at(g, rows, (size_t)i);
        sums[0] += r->pass, sums[1] += r->reward;
    }
    free(rows);
    if (rc) return -1.0;
    dist_allreduce_sum_f64(sums, 3);
    *reward = sums[2] > 0 ? sums[1] / sums[2] : NAN;
    return sums[2] > 0 ? sums[0] / sums[2] : NAN;
}

/* sdc_report.c — what a found corruption says (docs/health.md "The verdict"): rank 0's error
 * lines (each disagreeing tensor with its ranks, nodes and fingerprints, the majority where three
 * or more copies give one), the {"event": "sdc"} line of metrics.jsonl, and run_dir/sdc-culprit.json,
 * which the job script reads to exclude and drain the culprit's node (docs/slurm.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "json.h"
#include "jsonl.h"
#include "train/sdc_int.h"

static int by_int(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

/* A replay's: the suspect (attributed), or the original's and the replayer's ranks (rank order:
 * a pipeline's members are W / P apart) */
static int replay_blamed(const sdc_verdict *v, int *ranks, int cap, int *attributed) {
    int n = 0;
    *attributed = v->rp_suspect >= 0;
    if (cap < 2) return 0;
    if (v->rp_group) { /* (the suspect's group; unattributed: the original's, the replayer's) */
        const int lo = v->rp_q < v->rp_r ? v->rp_q : v->rp_r, hi = v->rp_q + v->rp_r - lo;
        const int who[2] = {*attributed ? v->rp_suspect : lo, *attributed ? -1 : hi};
        for (int i = 0; i < 2 && who[i] >= 0; i++)
            for (int p = 0; p < v->rp_stride && p < 64 && n < cap; p++)
                if (v->rp_group >> p & 1)
                    ranks[n++] = who[i] + (p - who[i] / v->rp_mstep % v->rp_stride) * v->rp_mstep;
        qsort(ranks, (size_t)n, sizeof *ranks, by_int);
    } else if (*attributed) ranks[n++] = v->rp_suspect;
    else if (v->rp_q == v->rp_r) ranks[n++] = v->rp_q;
    else ranks[n++] = v->rp_q < v->rp_r ? v->rp_q : v->rp_r, ranks[n++] = v->rp_q < v->rp_r ? v->rp_r : v->rp_q;
    return n;
}

/* The ranks a verdict blames, at most cap into ranks (rank order, once each); *attributed: 1 when
 * they are culprits (outvoted by a majority, or changed at rest), 0 when no copy could be blamed
 * and they are every copy of the disagreeing tensors (suspects). Returns their count. */
static int blamed(const tsr_trainer *t, const tsr_sdc *s, int *ranks, int cap, int *attributed) {
    const sdc_verdict *v = &s->v;
    if (v->found == SDC_FOUND_REPLAY) return replay_blamed(v, ranks, cap, attributed);
    char *mark = tsr_calloc((size_t)t->dist.world, 1);
    const int per_rank = v->found == SDC_FOUND_AT_REST || v->found == SDC_FOUND_LOAD;
    *attributed = per_rank;
    for (int r = 0; per_rank && r < t->dist.world; r++) mark[r] = v->rest_entry[r] >= 0;
    for (int i = 0; v->found == SDC_FOUND_REPLICAS && i < v->n_votes; i++)
        *attributed |= v->votes[i].majority;
    for (int i = 0; v->found == SDC_FOUND_REPLICAS && i < v->n_votes; i++) {
        const sdc_vote *x = &v->votes[i];
        if (x->majority != *attributed) continue; /* (suspects only when nobody is outvoted) */
        for (int j = 0; j < x->n_bad && j < SDC_VOTE_MAX_BAD; j++) mark[x->bad[j]] = 1;
    }
    int n = 0;
    for (int r = 0; r < t->dist.world; r++)
        if (mark[r] && n < cap) ranks[n++] = r;
    free(mark);
    return n;
}

/* "n2,n3": the nodes of ranks[0, n), each once, into out */
static void node_list(const tsr_sdc *s, const int *ranks, int n, char *out, size_t cap) {
    size_t o = 0;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        const char *h = s->hosts[ranks[i]];
        int seen = 0;
        for (int j = 0; j < i; j++) seen |= strcmp(s->hosts[ranks[j]], h) == 0;
        if (!seen && o + strlen(h) + 2 < cap)
            o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? "," : "", h);
    }
}

/* One disagreeing tensor (a vote) as an error line */
static void vote_line(const tsr_trainer *t, const tsr_sdc *s, const sdc_vote *x) {
    char who[1024];
    size_t o = 0;
    for (int j = 0; j < x->n_bad && j < SDC_VOTE_MAX_BAD && o < sizeof who - 100; j++)
        o += (size_t)snprintf(who + o, sizeof who - o, "%srank %d (node %s) 0x%08x", j ? ", " : "",
                              x->bad[j], s->hosts[x->bad[j]], x->bad_crc[j]);
    if (x->n_bad > SDC_VOTE_MAX_BAD) snprintf(who + o, sizeof who - o, ", ... (%d in all)", x->n_bad);
    const char *name = s->e[x->entry].name;
    if (x->majority)
        tsr_error("silent data corruption after step %lld: %s differs between the %d ranks that "
                  "hold it: %s; the other %d ranks agree on 0x%08x (the majority)",
                  (long long)s->v.step, name, x->copies, who, x->copies - x->n_bad, x->good);
    else
        tsr_error("silent data corruption after step %lld: %s differs between the %d ranks that "
                  "hold it, with no majority: %s (unattributed: %s)", (long long)s->v.step, name,
                  x->copies, who, x->copies == 2 ? "two copies cannot tell which is right"
                                                 : "no fingerprint is held by more than half");
    (void)t;
}

/* One rank's state that changed at rest (or differs from the checkpoint it was loaded from), as
 * an error line */
static void rest_line(const tsr_sdc *s, int r) {
    const sdc_verdict *v = &s->v;
    if (v->found == SDC_FOUND_LOAD) {
        tsr_error("silent data corruption: %s of rank %d (node %s) differs, after the resume at "
                  "step %lld, from the checkpoint it was read from: crc32c 0x%08x in the file, "
                  "0x%08x in memory (%d tensor%s of this rank differ%s)", s->e[v->rest_entry[r]].name,
                  r, s->hosts[r], (long long)v->step, v->rest_crc[2 * r], v->rest_crc[2 * r + 1],
                  v->rest_count[r], v->rest_count[r] == 1 ? "" : "s", v->rest_count[r] == 1 ? "s" : "");
        return;
    }
    if (s->e[v->rest_entry[r]].frozen) {
        tsr_error("silent data corruption: %s of rank %d (node %s) changed, though frozen: 0x%08x "
                  "after step %lld, 0x%08x after step %lld", s->e[v->rest_entry[r]].name, r,
                  s->hosts[r], v->rest_crc[2 * r], (long long)v->since, v->rest_crc[2 * r + 1],
                  (long long)v->step);
        return;
    }
    tsr_error("silent data corruption: %s of rank %d (node %s) changed at rest between the "
              "fingerprints taken after step %lld and %s: 0x%08x then, 0x%08x now (%d tensor%s "
              "of this rank changed)", s->e[v->rest_entry[r]].name, r, s->hosts[r],
              (long long)v->since,
              v->step > v->since ? "the next update" : "the end of the run (its last save)",
              v->rest_crc[2 * r], v->rest_crc[2 * r + 1], v->rest_count[r],
              v->rest_count[r] == 1 ? "" : "s");
}

/* The first tensor the verdict names (a replay: the gradients of a microbatch) */
static const char *first_tensor(const tsr_sdc *s) {
    const sdc_verdict *v = &s->v;
    static char what[64];
    if (v->found == SDC_FOUND_REPLAY) {
        snprintf(what, sizeof what, v->rp_whole || v->rp_batch ? "grads/batch-of-rank-%d"
                                                : "grads/microbatch-0-of-rank-%d", v->rp_q);
        return what;
    }
    if (v->found == SDC_FOUND_REPLICAS) return s->e[v->votes[0].entry].name;
    for (int r = 0; v->rest_entry; r++)
        if (v->rest_entry[r] >= 0) return s->e[v->rest_entry[r]].name;
    return "";
}

static const char *verdict_word(const tsr_sdc *s, int attributed) {
    static const char *const rp[] = {"transient", "persistent", "unattributed"};
    if (s->v.found == SDC_FOUND_REPLAY) return rp[s->v.rp_kind];
    if (!attributed) return "unattributed";
    if (s->v.found == SDC_FOUND_LOAD) return "read_path";
    return s->v.found == SDC_FOUND_AT_REST ? "changed_at_rest" : "outvoted";
}

/* the check that found it: "replicas", "at_rest", "load" */
static const char *check_word(const tsr_sdc *s) {
    static const char *const words[] = {"none", "replicas", "at_rest", "load", "replay"};
    return words[s->v.found];
}

/* metrics.jsonl: {"event": "sdc", ...} */
static void log_event(const tsr_trainer *t, const tsr_sdc *s, const int *ranks, int n,
                      int attributed, const char *nodes) {
    FILE *f = t->out.metrics;
    if (!f) return;
    fprintf(f, "{\"event\": \"sdc\", \"step\": %lld, \"check\": \"%s\", \"verdict\": \"%s\", "
               "\"tensor\": ", (long long)s->v.step,
            check_word(s), verdict_word(s, attributed));
    json_fput_string(f, first_tensor(s));
    fprintf(f, ", \"mismatches\": %d, \"ranks\": [", s->v.found == SDC_FOUND_REPLICAS
                                                         ? s->v.n_mismatch : n);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ranks[i]);
    fprintf(f, "], \"nodes\": ");
    json_fput_string(f, nodes);
    fprintf(f, ", \"comparisons\": %lld, \"rest_checks\": %lld", (long long)t->out.health.comparisons,
            (long long)t->out.health.rest_checks);
    jsonl_end_record(f);
}

/* "rank 1" or, for a group's replay, "ranks 0, 1 of rank 1's group" into out */
static void replay_who(const sdc_verdict *v, char *out, size_t cap) {
    int ranks[64], attributed, n = replay_blamed(v, ranks, 64, &attributed);
    if (!v->rp_group) {
        snprintf(out, cap, "rank %d", v->rp_suspect);
        return;
    }
    size_t k = (size_t)snprintf(out, cap, "ranks");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(out + k, cap - k, "%s %d", i ? "," : "", ranks[i]);
    if (k < cap)
        snprintf(out + k, cap - k, " (whose results differ) of rank %d's %s", v->rp_suspect,
                 v->rp_batch ? "pipeline, a batch being the pipeline's collective computation"
                             : "group, a microbatch being the group's collective computation");
}

/* A replay's verdict as lines: the computations, then what they say */
static void replay_lines(const tsr_sdc *s) {
    const sdc_verdict *v = &s->v;
    char third[96] = "", second[96] = "", who[400];
    replay_who(v, who, sizeof who);
    if (v->rp_third >= 0)
        snprintf(third, sizeof third, "; rank %d's 0x%08x", v->rp_third, v->rp_crc[2]);
    if (v->rp_retry >= 0)
        snprintf(second, sizeof second, "; rank %d's second try 0x%08x", v->rp_retry, v->rp_crc[3]);
    char what[400];
    snprintf(what, sizeof what, "replay of step %lld%s: rank %d's %s gives gradients "
             "0x%08x on rank %d (node %s), 0x%08x recomputed by rank %d (node %s)%s%s",
             (long long)v->step, v->rp_whole ? " after the spike guard's outlier" : "", v->rp_q,
             v->rp_whole || v->rp_batch ? "batch" : "first microbatch", v->rp_crc[0], v->rp_q, s->hosts[v->rp_q], v->rp_crc[1],
             v->rp_r, s->hosts[v->rp_r], third, second);
    if (v->rp_kind == SDC_RP_TRANSIENT)
        tsr_warn("%s: a transient fault of %s (node %s): its second try agrees%s", what,
                 who, s->hosts[v->rp_suspect],
                 v->rp_whole ? "; the guard's response to the step as computed follows"
                 : v->rp_suspect == v->rp_q ? "; it computes its microbatches again before the "
                                              "reduction" : "");
    else if (v->rp_kind == SDC_RP_PERSISTENT)
        tsr_error("silent data corruption in the %s: a persistent fault of %s (node %s): its "
                  "second try disagrees again", what, who, s->hosts[v->rp_suspect]);
    else
        tsr_error("silent data corruption in the %s: unattributed (no result is held by two of "
                  "three computations)", what);
}

void sdc_report(tsr_trainer *t, tsr_sdc *s) {
    if (t->dist.rank != 0) return;
    const sdc_verdict *v = &s->v;
    if (v->found == SDC_FOUND_REPLAY) replay_lines(s);
    if (v->found == SDC_FOUND_REPLAY && v->rp_kind == SDC_RP_TRANSIENT) {
        int ranks[64], attributed, n = replay_blamed(v, ranks, 64, &attributed);
        char nodes[1024];
        node_list(s, ranks, n, nodes, sizeof nodes);
        log_event(t, s, ranks, n, 1, nodes);
        return;
    }
    for (int i = 0; v->found == SDC_FOUND_REPLICAS && i < v->n_votes; i++)
        vote_line(t, s, &v->votes[i]);
    const int per_rank = v->found == SDC_FOUND_AT_REST || v->found == SDC_FOUND_LOAD;
    for (int r = 0, shown = 0; per_rank && r < t->dist.world; r++)
        if (v->rest_entry[r] >= 0 && shown++ < SDC_MAX_VOTES) rest_line(s, r);
    int ranks[64], attributed, n = blamed(t, s, ranks, 64, &attributed);
    char nodes[1024];
    node_list(s, ranks, n, nodes, sizeof nodes);
    if (v->found == SDC_FOUND_REPLICAS && v->n_mismatch > v->n_votes)
        tsr_error("... and %d more tensors differ", v->n_mismatch - v->n_votes);
    tsr_error("%s %s: the run stops without a checkpoint of this state (exit %d); the culprit is "
              "recorded in %s/sdc-culprit.json (docs/health.md)",
              attributed ? "culprit node" : "no culprit: suspect nodes", nodes, TSR_EXIT_SDC,
              t->cfg.run_dir);
    log_event(t, s, ranks, n, attributed, nodes);
}

void sdc_write_culprit(tsr_trainer *t, tsr_sdc *s) {
    if (t->dist.rank != 0) return;
    char path[1200], tmp[1300], nodes[1024];
    int ranks[64], attributed, n = blamed(t, s, ranks, 64, &attributed);
    node_list(s, ranks, n, nodes, sizeof nodes);
    snprintf(path, sizeof path, "%s/sdc-culprit.json", t->cfg.run_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        tsr_warn("%s: cannot write the culprit record: the job script cannot exclude its node", tmp);
        return;
    }
    fprintf(f, "{\n  \"step\": %lld,\n  \"check\": \"%s\",\n  \"verdict\": \"%s\",\n  \"tensor\": ",
            (long long)s->v.step, check_word(s), verdict_word(s, attributed));
    json_fput_string(f, first_tensor(s));
    fprintf(f, ",\n  \"ranks\": [");
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? ", " : "", ranks[i]);
    fprintf(f, "],\n  \"nodes\": ");
    json_fput_string(f, attributed ? nodes : "");
    fprintf(f, ",\n  \"suspects\": ");
    json_fput_string(f, attributed ? "" : nodes);
    fprintf(f, ",\n  \"set_aside_from\": %lld\n}\n", (long long)s->v.suspect_from);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        tsr_warn("%s: cannot write the culprit record: the job script cannot exclude its node", path);
}

/* "replayed every 100 steps: 3 replays, ..." or "" */
static void replay_summary(const tsr_trainer *t, double sec, char *out, size_t cap) {
    out[0] = '\0';
    if (t->sdc->rp.on)
        snprintf(out, cap, "replayed every %lld steps: %lld replays, %lld mismatches, %lld "
                 "transient, %.3f s", (long long)t->sdc->rp.interval,
                 (long long)t->out.health.replays, (long long)t->out.health.replay_mismatches,
                 (long long)t->out.health.transients, sec);
}

void sdc_summary(tsr_trainer *t) {
    tsr_sdc *s = t->sdc;
    if (!s || (!s->on && !s->rp.on)) return;
    double sec[3] = {s->hash_s, s->comm_s, s->rp.seconds};
    dist_allreduce_max_f64(sec, 3); /* (the slowest rank's: the others wait for it) */
    const double steps = t->out.time_sum, share = steps > 0 ? sec[0] / steps : 0.0;
    const int found = s->v.found != SDC_FOUND_NONE;
    if (t->dist.rank != 0) return;
    char rp[256], every[64];
    replay_summary(t, sec[2], rp, sizeof rp);
    if (s->interval > 0) snprintf(every, sizeof every, "%lld", (long long)s->interval);
    else snprintf(every, sizeof every, "auto: at start and every save");
    if (s->on)
        printf("health: fingerprints compared %lld times and checked at rest %lld times "
               "(health.fingerprint_interval = %s), %s; hashing %.3f s (%.2f%% of the step "
               "time), collectives %.3f s%s%s\n", (long long)t->out.health.comparisons,
               (long long)t->out.health.rest_checks, every,
               found ? "then a corruption stopped the run" : "all agreed", sec[0], 100.0 * share,
               sec[1], rp[0] ? "; " : "", rp);
    else
        printf("health: %s%s\n", rp, found ? "; then a corruption stopped the run" : "");
    FILE *f = t->out.metrics;
    if (!f) return;
    fprintf(f, "{\"event\": \"health\", \"interval\": %lld, \"comparisons\": %lld, "
               "\"rest_checks\": %lld, \"mismatches\": %d, \"hash_s\": %.6f, \"comm_s\": %.6f, "
               "\"step_share\": %.6f, \"replay_interval\": %lld, \"replays\": %lld, "
               "\"replay_mismatches\": %lld, \"replay_transients\": %lld, \"replay_s\": %.6f",
            (long long)s->interval, (long long)t->out.health.comparisons, (long long)t->out.health.rest_checks, found,
            sec[0], sec[1], share, s->rp.on ? (long long)s->rp.interval : 0LL,
            (long long)t->out.health.replays, (long long)t->out.health.replay_mismatches, (long long)t->out.health.transients,
            sec[2]);
    jsonl_end_record(f);
}

/* pp_schedule.h — pipeline schedules as data (docs/pipeline.md): for P ranks, M microbatches and
 * V model chunks a rank, each rank's ordered list of actions — a chunk's forward of a microbatch
 * (F), its backward (BW), or the backward split into the input's gradient (B, on the critical
 * path) and the weights' gradient (W, deferrable) — built by one generator per schedule, then
 * checked and timed by one simulator that knows nothing of how the list was made.
 *
 * Stages: the model is cut into S = P * V chunks, stage 0 (the embedding) to S - 1 (the head and
 * the loss). Chunk c of rank r is stage c * P + r.
 * Activations and their gradients go between consecutive stages; a microbatch's forward through
 * stage s needs its forward through s - 1, its backward through s needs its forward through s
 * and its backward (B or BW) through s + 1, a W needs its B.
 *
 * The simulator runs each rank's list in order, every action at the earliest tick its
 * dependencies and the rank's previous action allow (sends do not block, receives wait): the
 * same order a rank of the trainer follows. It refuses a list that misses or repeats an action,
 * puts a backward before its forward, or deadlocks (no rank can go on: it names them).
 */
#ifndef TSR_PP_SCHEDULE_H
#define TSR_PP_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum pp_kind {
    PP_1F1B = 0,     /* one forward, one backward: PipeDream-Flush (V = 1) */
    PP_INTERLEAVED,  /* interleaved 1F1B, V >= 2 chunks a rank (Megatron's order; M % P == 0) */
    PP_ZB,           /* zero bubble ZB-H1: B and W apart, W filling the bubbles; 1F1B's
                      * activations in flight, at most P pending Ws (V = 1) */
    PP_KIND_COUNT
} pp_kind;

typedef enum pp_op { PP_F = 0, PP_B, PP_W, PP_BW, PP_OP_COUNT } pp_op;

#define PP_MAX_STAGES 1024 /* P * V */

typedef struct pp_action {
    uint8_t op;    /* pp_op */
    uint8_t chunk; /* the rank's chunk, 0 .. V - 1 */
    int32_t mb;    /* the microbatch, 0 .. M - 1 */
} pp_action;

/* Ticks an action takes: F, B, W; BW = b + w. The plan passes its own costs (a forward is
 * about a third of a step's compute, a backward two thirds, half of it the weights'). */
typedef struct pp_costs {
    int f, b, w;
} pp_costs;

typedef struct pp_schedule {
    pp_kind kind;
    int P, V, M;
    int per_rank;   /* actions of each rank: 2 M V (F, BW) or 3 M V (F, B, W) */
    pp_action *act; /* (P, per_rank): rank r's list at act + r * per_rank */
} pp_schedule;

typedef struct pp_timing {
    int64_t makespan; /* ticks from the first action's start to the last one's end */
    int64_t *busy;    /* (P) ticks each rank works */
    int *peak;        /* (P) most microbatch chunks a rank holds between an F and its B or BW:
                       * their whole activations */
    int *peak_w;      /* (P) most between a B and its W: what the weights' gradients read */
    int64_t *start;   /* (P, per_rank) each action's start tick */
} pp_timing;

/* "1f1b", "interleaved", "zb" */
const char *pp_kind_name(pp_kind k);
/* 0 and *k, or -1 for a name that is none of them */
int pp_kind_parse(const char *name, pp_kind *k);
/* 0 when kind k can run P ranks, V chunks a rank and M microbatches; else -1 and why, naming
 * what is wrong and a valid value (the trainer's refusal names the keys around it). */
int pp_layout_check(pp_kind k, int P, int V, int M, char *why, size_t n);
/* Builds kind k's lists (after pp_layout_check's checks: -1 and why when they fail). */
int pp_schedule_build(pp_schedule *s, pp_kind k, int P, int V, int M, char *why, size_t n);
void pp_schedule_free(pp_schedule *s);
/* the stage of chunk c of rank r */
int pp_stage(const pp_schedule *s, int r, int c);
/* rank r's i-th action */
const pp_action *pp_action_at(const pp_schedule *s, int r, int i);
/* Checks s and times it at costs c into t (allocated; pp_timing_free). 0, or -1 and why (the
 * first fault: a missing or repeated action, a backward before its forward on its rank, a
 * deadlock naming each rank's waiting action), t then freed. */
int pp_simulate(const pp_schedule *s, pp_costs c, pp_timing *t, char *why, size_t n);
void pp_timing_free(pp_timing *t);
/* the idle share of the makespan, all ranks together: 1 - sum(busy) / (P makespan) */
double pp_bubble(const pp_schedule *s, const pp_timing *t);
/* The schedule as a grid, a row a rank, a column a tick: "F3" a forward of microbatch 3 ("F3:1"
 * of chunk 1 when V > 1), B, W, BW as "X", "." idle. */
void pp_schedule_print(const pp_schedule *s, const pp_timing *t, pp_costs c, FILE *f);

#endif

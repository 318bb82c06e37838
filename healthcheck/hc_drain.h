/* hc_drain.h — --drain and --resume-own: Slurm node state changes the checker may make.
 *
 * Rules (DESIGN.md "Health checker"): only as root; drain only a node that failed, with the reason
 * "tessera-hc: CHECK ACTUAL<LIMIT UNIT"; never overwrite a reason that does not start with
 * "tessera-hc:"; resume only a healthy, drained node whose reason starts with "tessera-hc:".
 * scontrol runs through posix_spawnp with an argv array (no shell); $TSR_HC_SCONTROL names another
 * program (tests use a fake one). Without root it prints what it would do and changes nothing.
 */
#ifndef TSR_HC_DRAIN_H
#define TSR_HC_DRAIN_H

#include <stddef.h>

#include "hc.h"

#define HC_REASON_PREFIX "tessera-hc:"

typedef enum {
    HC_ACT_NONE = 0,   /* nothing to do */
    HC_ACT_DRAIN,      /* scontrol update nodename=X state=drain reason=... */
    HC_ACT_RESUME,     /* scontrol update nodename=X state=resume */
    HC_ACT_FOREIGN,    /* would drain, but the node carries someone else's reason: left alone */
    HC_ACT_COUNT
} hc_action;

/* From `scontrol show node X` output: the State= word and the Reason= text without its trailing
 * " [user@time]" ("" when absent or "(null)"/"none"). Pure. */
void hc_parse_show_node(const char *text, char *state, size_t ns, char *reason, size_t nr);

/* Pure decision from this node's verdict and its current Slurm state and reason. */
hc_action hc_drain_decide(int failed, int drain, int resume_own, const char *state,
                          const char *reason);

/* Applies --drain / --resume-own for `node` (messages on stderr). Returns 0, or 2 when scontrol
 * could not be run or failed. */
int hc_drain_apply(const char *node, const hc_verdict *v, int n, int n_failed, int drain,
                   int resume_own);

#endif

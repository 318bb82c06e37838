/* hc_drain.c — see hc_drain.h. */
#include "hc_drain.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "fsutil.h"

extern char **environ;

/* The free-text fields Slurm may print after Reason= (node_info.c): where a missing reason ends. */
static const char *const trailing_keys[] = {"Comment=", "Extra=", "InstanceId=", "InstanceType=",
                                            "ReservationName="};

static int starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static int is_trailing_field(const char *tok) {
    for (size_t i = 0; i < sizeof trailing_keys / sizeof *trailing_keys; i++)
        if (starts_with(tok, trailing_keys[i])) return 1;
    return 0;
}

/* A token "Key=..." with Key of letters, digits and '_' (what Slurm prints). */
static int is_key_value(const char *tok, size_t len) {
    size_t k = 0;
    while (k < len && (isalnum((unsigned char)tok[k]) || tok[k] == '_')) k++;
    return k > 0 && k < len && tok[k] == '=';
}

/* The end of the reason's text: the " [USER@YYYY-MM-DDTHH:MM:SS]" stamp Slurm appends to the first
 * line of the reason, else the first free-text field after it, else the end of the line. */
static size_t reason_length(const char *r, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (r[i] != ' ') continue;
        if (r[i + 1] == '[') {
            const char *close = memchr(r + i, ']', len - i);
            const char *at = memchr(r + i, '@', len - i);
            if (close && at && at < close && (close + 1 == r + len || close[1] == ' ')) return i;
        } else if (is_trailing_field(r + i + 1)) {
            return i;
        }
    }
    return len;
}

int hc_parse_show_node(const char *text, hc_node_state *ns) {
    memset(ns, 0, sizeof *ns);
    size_t len = strcspn(text, "\n");
    for (const char *p = text + len; *p; p++)
        if (!isspace((unsigned char)*p)) return -1; /* more than one line: not a -o record */
    const char *p = text, *end = text + len;
    while (p < end && *p == ' ') p++;
    if (!starts_with(p, "NodeName=")) return -1;
    int seen_state = 0;
    while (p < end) {
        while (p < end && *p == ' ') p++;
        if (p == end) break;
        size_t k = strcspn(p, " \n");
        if (!seen_state) {
            if (k >= 6 && starts_with(p, "State=")) {
                seen_state = 1;
                if (tsr_snprintf(ns->state, sizeof ns->state, "%.*s", (int)(k - 6), p + 6)) return -1;
            }
        } else if (starts_with(p, "Reason=")) {
            ns->has_reason = 1;
            size_t rl = reason_length(p + 7, (size_t)(end - p - 7));
            snprintf(ns->reason, sizeof ns->reason, "%.*s", (int)rl, p + 7); /* for messages: may cut */
            return 0;
        } else if (is_trailing_field(p)) {
            return 0; /* free text follows, and no reason was printed before it */
        } else if (!is_key_value(p, k)) {
            return -1; /* not the format this parser knows: decide nothing */
        }
        p += k;
    }
    return seen_state ? 0 : -1;
}

/* The State= value says drained or draining: a '+'-separated word DRAIN, DRAINED or DRAINING. */
static int state_drained(const char *state) {
    for (const char *w = state; *w;) {
        size_t k = strcspn(w, "+");
        if ((k == 5 && !strncmp(w, "DRAIN", 5)) || (k == 7 && !strncmp(w, "DRAINED", 7)) ||
            (k == 8 && !strncmp(w, "DRAINING", 8)))
            return 1;
        w += k + (w[k] == '+');
    }
    return 0;
}

hc_action hc_drain_decide(int failed, int drain, int resume_own, const hc_node_state *ns) {
    int ours = ns->has_reason && starts_with(ns->reason, HC_REASON_PREFIX);
    int sdc = ours && starts_with(ns->reason, HC_SDC_REASON_PREFIX); /* (an admin clears it) */
    if (failed && drain && sdc && failed != HC_FAILED_SDC) return HC_ACT_NONE;
    if (failed && drain) return !ns->has_reason || ours ? HC_ACT_DRAIN : HC_ACT_FOREIGN;
    if (!failed && resume_own && ours && !sdc && state_drained(ns->state)) return HC_ACT_RESUME;
    return HC_ACT_NONE;
}

/* `SC -o show node NODE`, parsed. Returns 0, or 2 after tsr_error (scontrol failed, or printed
 * something that is not one node's record: the node is then not touched). */
static int read_node(const char *sc, const char *node, hc_node_state *ns) {
    static char show[65536];
    char *argv[] = {(char *)sc, "-o", "show", "node", (char *)node, NULL};
    int rc = fs_run_argv(argv, show, sizeof show);
    if (rc != 0) {
        tsr_error("'%s -o show node %s' failed (exit %d): node state not changed", sc, node, rc);
        return 2;
    }
    if (hc_parse_show_node(show, ns) != 0) {
        tsr_error("'%s -o show node %s' printed no one-line node record with NodeName= and State= "
                  "(got \"%.200s\"): node state not changed", sc, node, show);
        return 2;
    }
    return 0;
}

int hc_drain_apply(const char *node, const hc_verdict *v, int n, int n_failed, int drain,
                   int resume_own) {
    char reason[256] = "";
    if (n_failed) hc_drain_reason(reason, sizeof reason, v, n);
    return hc_drain_node(node, reason, n_failed > 0, drain, resume_own);
}

int hc_drain_node(const char *node, const char *reason, int failed, int drain, int resume_own) {
    if (!drain && !resume_own) return 0;
    if (!failed && !resume_own) return 0;
    if (failed && !drain) return 0;
    char arg_node[96], arg_reason[300];
    if (!hc_node_name_ok(node)) {
        tsr_error("--drain: node name '%s' is not a plain Slurm node name: not touched", node);
        return 2;
    }
    const char *sc = getenv("TSR_HC_SCONTROL");
    if (!sc || !*sc) sc = "scontrol";
    snprintf(arg_node, sizeof arg_node, "nodename=%s", node);
    snprintf(arg_reason, sizeof arg_reason, "reason=%s", reason);
    if (geteuid() != 0) {
        if (failed)
            fprintf(stderr, "tessera-healthcheck: not root: --drain does nothing; as root it would read "
                            "'%s -o show node %s' and, unless another reason is set, run: %s update %s "
                            "state=drain \"%s\"\n", sc, node, sc, arg_node, arg_reason);
        else
            fprintf(stderr, "tessera-healthcheck: not root: --resume-own does nothing; as root it would "
                            "resume %s if drained with a \"%s\" reason\n", node, HC_REASON_PREFIX);
        return 0;
    }
    hc_node_state first, now;
    if (read_node(sc, node, &first)) return 2;
    hc_action act = hc_drain_decide(failed, drain, resume_own, &first);
    if (act == HC_ACT_FOREIGN) {
        fprintf(stderr, "tessera-healthcheck: %s is unhealthy (%s) but carries another reason "
                        "(\"%s\"): left as it is\n", node, reason, first.reason);
        return 0;
    }
    if (act == HC_ACT_NONE && failed == 1 && drain && first.has_reason)
        fprintf(stderr, "tessera-healthcheck: %s is unhealthy (%s) and drained already for the "
                        "corruption a run found (\"%s\"): left as it is\n", node, reason, first.reason);
    if (act == HC_ACT_NONE) return 0;
    /* again, right before the update: a reason set meanwhile (by an admin, or another checker) wins */
    if (read_node(sc, node, &now)) return 2;
    /* the reason must be the same; the state may move on (IDLE -> MIXED as a job starts) as long as
     * the decision stays (for a resume: still drained) */
    if (now.has_reason != first.has_reason || strcmp(now.reason, first.reason) ||
        hc_drain_decide(failed, drain, resume_own, &now) != act) {
        fprintf(stderr, "tessera-healthcheck: %s changed while the checker decided (state %s -> %s, "
                        "reason \"%s\" -> \"%s\"): left as it is\n",
                node, first.state, now.state, first.reason, now.reason);
        return 0;
    }
    char *drain_argv[] = {(char *)sc, "update", arg_node, "state=drain", arg_reason, NULL};
    char *resume_argv[] = {(char *)sc, "update", arg_node, "state=resume", NULL};
    char *const *argv = act == HC_ACT_DRAIN ? drain_argv : resume_argv;
    fprintf(stderr, "tessera-healthcheck: %s: %s update %s %s%s%s%s\n", node, sc, arg_node, argv[3],
            act == HC_ACT_DRAIN ? " \"" : "", act == HC_ACT_DRAIN ? arg_reason : "",
            act == HC_ACT_DRAIN ? "\"" : "");
    int rc = fs_run_argv(argv, NULL, 0);
    if (rc != 0) {
        tsr_error("'%s update %s %s' failed (exit %d)", sc, arg_node, argv[3], rc);
        return 2;
    }
    return 0;
}

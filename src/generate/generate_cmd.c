/* generate_cmd.c — `tessera generate --ckpt PATH [--prompt TEXT | --prompt-ids IDS] [options]`.
 *
 * Phases: parse options -> load the checkpoint's config and weights -> open the tokenizer -> the
 * prompt's ids -> plan the length (position-table limit) -> prefill the prompt -> decode one token
 * at a time, streaming it to stdout -> the counts and speeds on stderr. With the KV cache (default)
 * each decode step runs one position through the model (model_infer_forward); --no-cache reruns
 * model_forward, the training forward, over the whole context each step: the reference the cache
 * is tested against (tests/eval/test_generate.sh). --chat renders the prompt as one user turn with
 * the tokenizer's chat template and stops at the end of the assistant's turn (gen_chat.h). Usage,
 * limits and speeds: docs/generate.md.
 */
#include "generate/generate.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_commands.h"
#include "common.h"
#include "chat/gen_chat.h"
#include "generate/gen_prompts.h"
#include "generate/gen_sample.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_eos.h"
#include "metrics_units.h"

#define GEN_MAX_SETS 64
#define GEN_PREFILL_CHUNK 512 /* prompt positions per forward call of the cached path */
#define GEN_MAX_STOPS 16      /* ids that end a completion */

static const cli_opt gen_opts[] = {
    {"ckpt", 'C', "PATH", "checkpoint: a step-NNNNNNNN.h5 file, a run directory or its `latest`, or a Hugging Face directory (required)"},
    {"prompt", 'p', "TEXT", "prompt text, encoded with the tokenizer (special tokens recognised)"},
    {"prompt-ids", CLI_NO_SHORT('i'), "IDS", "prompt as token ids, e.g. \"1 2 3\" (no tokenizer needed); with neither, "
                               "the prompt is the end-of-text token"},
    {"chat", CLI_NO_SHORT('c'), NULL, "the prompt is a user message: render it with the tokenizer's chat "
                               "template, stop at the end of the assistant's turn"},
    {"system", CLI_NO_SHORT('y'), "TEXT", "with --chat: a system message before the user's"},
    {"template-var", CLI_NO_SHORT('a'), "NAME=JSON", "with --chat: a chat-template variable, the value JSON, "
                               "e.g. enable_thinking=false, 'tools=[...]' (repeatable)"},
    CHAT_BUDGET_OPTS,
    {"echo", CLI_NO_SHORT('e'), NULL, "print the prompt (as rendered by --chat) before the completion"},
    {"max-tokens", CLI_NO_SHORT('n'), "N", "tokens to generate, 0..1000000 (default 64)"},
    {"temperature", CLI_NO_SHORT('t'), "T", "0 = greedy (argmax); default: the checkpoint's sample.temperature"},
    {"top-k", 'k', "K", "sample among the K most likely tokens, 0 = all; default: sample.top_k"},
    {"top-p", 'P', "P", "nucleus: the fewest tokens holding P of the probability, 0 < P <= 1 (default 1)"},
    {"seed", 'S', "S", "random seed of the sampling; default: the checkpoint's seed"},
    {"no-eos-stop", CLI_NO_SHORT('E'), NULL, "do not stop at the end-of-text token (<|endoftext|>, else the "
                                "eos_token, else id V-1) nor, with --chat, at the end of turn"},
    {"no-cache", 'N', NULL, "no KV cache: rerun the whole context every token (the reference; slow)"},
    {"tokenizer", 't', "SPEC", "gpt2, a directory or a tokenizer file; '' = none (default: data.tokenizer)"},
    {"set", 's', "KEY=VALUE", "override a key of the checkpoint's config, e.g. threads=2 (repeatable)"},
    {"ids", 'I', NULL, "print token ids instead of text"},
    {"dump-probs", 'D', "FILE", "debug: per token, its step, id and the V next-token probabilities"},
    {"prompts", CLI_NO_SHORT('F'), "FILE", "many prompts: a JSON Lines file of {\"prompt\"}, {\"messages\"} "
                              "or {\"prompt_ids\"}, completed together (batched); needs --out"},
    {"out", 'o', "FILE", "with --prompts: the completions, one JSON line each"},
    {"batch", CLI_NO_SHORT('B'), "N", "with --prompts: sequences decoded together, 1..4096 (default 16)"},
    {"samples", CLI_NO_SHORT('G'), "N", "with --prompts: completions per prompt, 1..4096 (default 1)"},
    {"stop", CLI_NO_SHORT('x'), "TEXT", "with --prompts: a stop string, the completion cut before it "
                                "(repeatable, at most 16)"},
    {"help", 'h', NULL, "show this help"},
};
const cli_cmd generate_cli = {
    "generate", "",
    "Generates a completion of a prompt from a checkpoint's model (one sequence, fp32 CPU, KV cache);\n"
    "with --chat, the assistant's reply to the prompt through the tokenizer's chat template;\n"
    "with --prompts FILE --out FILE, many prompts completed together (batched), JSON Lines out.\n"
    "Prints the completion on stdout (text with a tokenizer, else ids); counts and tokens/s on stderr.",
    gen_opts, (int)(sizeof gen_opts / sizeof gen_opts[0]), NULL,
};

typedef struct gen_args {
    const char *ckpt, *prompt, *prompt_ids, *tokenizer, *dump; /* tokenizer NULL = the config's */
    const char *system;                                        /* --system, NULL = none */
    int64_t max_tokens;
    double temperature, top_p;
    int64_t top_k, seed;
    int has_temperature, has_top_k, has_top_p, has_seed;
    int no_eos_stop, no_cache, ids, chat, echo;
    const char *sets[GEN_MAX_SETS];
    int n_sets;
    gen_chat_vars vars; /* --template-var */
    jinja_budget budget; /* --template-steps, --template-memory */
    gen_prompts_opts many; /* --prompts (many.in), --out, --batch, --samples, --stop */
} gen_args;

typedef enum { GEN_STOP_MAX = 0, GEN_STOP_EOS, GEN_STOP_EOT, GEN_STOP_CONTEXT, GEN_STOP_COUNT } gen_stop;
static const char *const stop_names[] = {"max-tokens", "end-of-text", "end-of-turn", "context limit"};
_Static_assert(sizeof stop_names / sizeof stop_names[0] == GEN_STOP_COUNT, "stop names");

/* One generation: the model, its cache or its full-forward activations, the context. */
typedef struct gen_run {
    tsr_config cfg;
    tsr_model m;
    tsr_kv_cache kv;
    tsr_tokenizer *tok;
    const char *tok_spec;   /* what tok was opened from */
    gen_chat chat;          /* the tokenizer_config.json beside a Hugging Face tokenizer */
    gen_sampling smp;
    int32_t *ctx;       /* (P + n_max) prompt then completion */
    int P, n_max, len;  /* prompt tokens, tokens allowed, tokens in ctx */
    int32_t eos;        /* end-of-text */
    int n_stops;        /* ids that end the completion: eos first, then --chat's (end of turn) */
    int32_t stop_id[GEN_MAX_STOPS], hit; /* hit: the stop id met */
    char stop_from[GEN_MAX_STOPS][96];   /* where each comes from, e.g. "eos_token, end of turn" */
    char *text;         /* --chat: the rendered prompt */
    int n_printed;      /* tokens (or the echoed prompt) written to stdout */
    int dec_from;       /* text output: ctx[dec_from..] is decoded as one piece (emit_text) */
    uint8_t dec[256];   /* the decode of two tokens */
    float *probs;       /* (Vp) cached path's output */
    gen_cand *cand;     /* (V) */
    double *w;          /* (V) */
    FILE *dump;
    int n_sampled, n_steps, threads;
    gen_stop stop;
    double t_prefill, t_decode;
    char resolved[1200];
} gen_run;

/* ================================ options ================================ */

static int parse_f64(const cli_cmd *c, int ch, const char *val, double lo, double hi, double *out) {
    if (tsr_parse_f64(val, lo, hi, out) == 0) return 0;
    tsr_error("generate: --%s '%s': expected a number in [%g, %g] (see 'tessera generate --help')",
              cli_opt_name(c, ch), val, lo, hi);
    return TSR_EXIT_USAGE;
}

/* --batch, --samples: 1..4096 */
static int int_opt(const cli_cmd *c, int ch, const char *val, int *out) {
    int64_t v;
    TSR_CHECK(cli_number(c, ch, val, 1, 4096, &v));
    *out = (int)v;
    return 0;
}

static int on_opt(const cli_cmd *c, int ch, const char *val, void *ctx) {
    gen_args *a = ctx;
    switch (ch) {
    case 'C': a->ckpt = val; return 0;
    case 'p': a->prompt = val; return 0;
    case CLI_NO_SHORT('i'): a->prompt_ids = val; return 0;
    case CLI_NO_SHORT('c'): a->chat = 1; return 0;
    case CLI_NO_SHORT('y'): a->system = val; return 0;
    case CLI_NO_SHORT('a'): {
        char why[600];
        return gen_chat_var_add(&a->vars, val, why, sizeof why) ? cli_usage_error(c, why, NULL) : 0;
    }
    case CLI_NO_SHORT('e'): a->echo = 1; return 0;
    case CLI_NO_SHORT('n'): return cli_number(c, ch, val, 0, 1000000, &a->max_tokens);
    case CLI_NO_SHORT('t'): a->has_temperature = 1; return parse_f64(c, ch, val, 0.0, 100.0, &a->temperature);
    case 'k': a->has_top_k = 1; return cli_number(c, ch, val, 0, INT32_MAX, &a->top_k);
    case 'P':
        a->has_top_p = 1;
        if (parse_f64(c, ch, val, 0.0, 1.0, &a->top_p)) return TSR_EXIT_USAGE;
        return a->top_p > 0.0 ? 0 : cli_usage_error(c, "--top-p must be > 0: ", val);
    case 'S': a->has_seed = 1; return cli_number(c, ch, val, 0, INT64_MAX, &a->seed);
    case CLI_NO_SHORT('E'): a->no_eos_stop = 1; return 0;
    case 'N': a->no_cache = 1; return 0;
    case 't': a->tokenizer = val; return 0;
    case 's':
        if (a->n_sets == GEN_MAX_SETS) return cli_usage_error(c, "too many --set options", NULL);
        if (!strchr(val, '=')) return cli_usage_error(c, "--set wants KEY=VALUE, got ", val);
        a->sets[a->n_sets++] = val;
        return 0;
    case 'I': a->ids = 1; return 0;
    case 'D': a->dump = val; return 0;
    case CHAT_OPT_STEPS:
    case CHAT_OPT_MEMORY: return chat_budget_option(c, ch, val, &a->budget);
    case CLI_NO_SHORT('F'): a->many.in = val; return 0;
    case 'o': a->many.out = val; return 0;
    case CLI_NO_SHORT('B'): return int_opt(c, ch, val, &a->many.batch);
    case CLI_NO_SHORT('G'): return int_opt(c, ch, val, &a->many.samples);
    case CLI_NO_SHORT('x'):
        if (a->many.n_stops == GEN_MAX_STOP_STRINGS)
            return cli_usage_error(c, "more than 16 --stop strings", NULL);
        if (!val[0]) return cli_usage_error(c, "--stop wants a non-empty string", NULL);
        a->many.stops[a->many.n_stops++] = val;
        return 0;
    default: return cli_usage_error(c, "internal: unhandled option", NULL);
    }
}

/* --prompts and the options that go with it (or only without it) */
static int check_many(const gen_args *a) {
    const gen_prompts_opts *m = &a->many;
    if (!m->in) {
        if (m->out || m->n_stops || m->batch != 16 || m->samples != 1)
            return cli_usage_error(&generate_cli, "--out, --batch, --samples and --stop go with "
                                   "--prompts FILE", NULL);
        return 0;
    }
    if (!m->out) return cli_usage_error(&generate_cli, "--prompts wants --out FILE", NULL);
    if (a->prompt || a->prompt_ids || a->echo || a->no_cache || a->dump)
        return cli_usage_error(&generate_cli, "--prompts takes the prompts from its file: leave "
                               "out --prompt, --prompt-ids, --echo, --no-cache and --dump-probs",
                               NULL);
    if (a->max_tokens < 1) return cli_usage_error(&generate_cli, "--prompts wants --max-tokens >= 1", NULL);
    return 0;
}

static int parse_args(int argc, char **argv, gen_args *a) {
    memset(a, 0, sizeof *a);
    a->max_tokens = 64;
    a->top_p = 1.0;
    a->many.batch = 16, a->many.samples = 1;
    int rc = cli_parse(&generate_cli, argc, argv, on_opt, a);
    if (rc) return rc;
    if (optind < argc) return cli_usage_error(&generate_cli, "unexpected operand: ", argv[optind]);
    if (!a->ckpt) return cli_usage_error(&generate_cli, "--ckpt PATH is required", NULL);
    TSR_CHECK(check_many(a));
    if (a->prompt && a->prompt_ids)
        return cli_usage_error(&generate_cli, "--prompt and --prompt-ids exclude each other", NULL);
    if (a->chat && !a->prompt && !a->many.in)
        return cli_usage_error(&generate_cli, "--chat wants the user's message as --prompt TEXT (the "
                               "chat template renders text, not --prompt-ids)", NULL);
    if (a->system && !a->chat)
        return cli_usage_error(&generate_cli, "--system goes with --chat (a system message of the "
                               "chat template)", NULL);
    if (a->vars.n && !a->chat)
        return cli_usage_error(&generate_cli, "--template-var goes with --chat (a variable of the "
                               "chat template)", NULL);
    if (a->has_temperature && a->temperature == 0.0 && (a->has_top_k || a->has_top_p))
        return cli_usage_error(&generate_cli, "--top-k and --top-p have no effect with --temperature 0 "
                                          "(greedy): leave them out", NULL);
    return 0;
}

/* ================================ tokenizer and prompt ================================ */

/* Opens --tokenizer, else the config's data.tokenizer; "" = none. The end-of-text id: the
 * tokenizer's end of document (tokenizer_eos.h: <|endoftext|>, else the eos_token of the
 * tokenizer_config.json beside a Hugging Face tokenizer, what `tessera prep` ends documents with)
 * when it is below V, else V-1 (the trainer's convention). */
static int open_tokenizer(gen_run *g, const gen_args *a) {
    const char *spec = a->tokenizer ? a->tokenizer : g->cfg.data.tokenizer;
    g->eos = g->m.V - 1;
    g->tok_spec = spec;
    if (!spec[0]) return 0;
    if (tokenizer_open(&g->tok, spec) != 0) {
        tsr_error("generate: cannot load the tokenizer '%s'%s (above); --tokenizer SPEC names "
                  "another, --tokenizer '' runs without one (--prompt-ids, --ids)", spec,
                  a->tokenizer ? "" : " named by the checkpoint's data.tokenizer");
        return TSR_EXIT_DATA;
    }
    TSR_CHECK(gen_chat_open(&g->chat, spec, g->tok, a->chat, a->vars.n ? &a->vars : NULL,
                              &a->budget));
    const char *eos_token = g->chat.loaded ? chat_config_token(&g->chat.cc, "eos_token") : NULL;
    uint32_t e = tokenizer_eos_id(g->tok, eos_token, TOKENIZER_EOS_DOCUMENT);
    if (e != UINT32_MAX && e < (uint32_t)g->m.V) g->eos = (int32_t)e;
    uint32_t nv = tokenizer_vocab_size(g->tok);
    if (nv < (uint32_t)g->m.V && !a->ids)
        tsr_warn("generate: the tokenizer '%s' has %u tokens, the model %d: ids >= %u print as "
                 "<|id N|>", spec, nv, g->m.V, nv);
    return 0;
}

/* Parses "1 2 3" (spaces, tabs, newlines or commas between ids) into ids (realloc'd). */
static int parse_ids(const char *s, int32_t **ids, int *n) {
    int cap = 0;
    *n = 0;
    for (const char *p = s;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == ',') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX ||
            !(*end == '\0' || *end == ' ' || *end == '\t' || *end == '\n' || *end == ','))
            return cli_usage_error(&generate_cli, "--prompt-ids: expected non-negative integers "
                                              "separated by spaces or commas, at: ", p);
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            *ids = realloc(*ids, (size_t)cap * sizeof **ids);
            if (!*ids) tsr_die(TSR_EXIT_INTERNAL, "out of memory reading --prompt-ids");
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    return 0;
}

/* Adds id to the ids that end the completion (from: where it comes from), or from to the
 * sources of an id already there. */
static void add_stop(gen_run *g, int64_t id, const char *from) {
    if (id < 0 || id >= g->m.V) {
        tsr_warn("generate: the %s id %lld is outside the model's vocabulary (0..%d): the model "
                 "cannot emit it", from, (long long)id, g->m.V - 1);
        return;
    }
    for (int k = 0; k < g->n_stops; k++)
        if (g->stop_id[k] == id) {
            size_t l = strlen(g->stop_from[k]);
            snprintf(g->stop_from[k] + l, sizeof g->stop_from[k] - l, ", %s", from);
            return;
        }
    if (g->n_stops == GEN_MAX_STOPS) {
        tsr_warn("generate: more than %d stop ids: %s's id %lld left out", GEN_MAX_STOPS, from,
                 (long long)id);
        return;
    }
    g->stop_id[g->n_stops] = (int32_t)id;
    snprintf(g->stop_from[g->n_stops++], sizeof g->stop_from[0], "%s", from);
}

/* --chat: the prompt rendered by the chat template into g->text, and the ids that end the
 * assistant's turn: the eos_token, the template's end of turn, generation_config.json's. */
static int chat_prompt(gen_run *g, const gen_args *a) {
    size_t n;
    TSR_CHECK(gen_chat_render(&g->chat, g->tok_spec, a->system, a->prompt, &g->text, &n));
    uint32_t e = gen_chat_eos_id(&g->chat, g->tok);
    if (e != UINT32_MAX) add_stop(g, e, "eos_token");
    e = gen_chat_end_of_turn(&g->chat, g->tok, a->system, a->prompt);
    if (e != UINT32_MAX) add_stop(g, e, "end of turn");
    else
        tsr_warn("generate: the chat template of %s ends an assistant turn with no added token: "
                 "the reply stops only at eos_token and generation_config.json's ids",
                 g->chat.path);
    int64_t ids[GEN_MAX_STOPS];
    int k = 0;
    TSR_CHECK(gen_chat_generation_eos(&g->chat, ids, GEN_MAX_STOPS, &k));
    for (int i = 0; i < k; i++) add_stop(g, ids[i], "generation_config.json");
    return 0;
}

/* The ids of a text prompt (special tokens recognised) into *ids (malloc'd), *n of them. */
static int encode_text(const gen_run *g, const char *text, int32_t **ids, int *n) {
    if (!g->tok) {
        tsr_error("generate: a text --prompt needs a tokenizer, and the checkpoint's config has "
                  "none (data.tokenizer is empty): give the prompt as token ids with "
                  "--prompt-ids \"1 2 3\", or name one with --tokenizer SPEC");
        return TSR_EXIT_USAGE;
    }
    uint32_t *u = NULL;
    size_t nu = 0, cap = 0;
    tokenizer_encode(g->tok, (const uint8_t *)text, strlen(text), 1, &u, &nu, &cap);
    *ids = tsr_malloc((nu ? nu : 1) * sizeof **ids);
    for (size_t i = 0; i < nu; i++) (*ids)[i] = u[i] > INT32_MAX ? INT32_MAX : (int32_t)u[i];
    *n = (int)nu;
    free(u);
    return 0;
}

/* The prompt's ids in g->ctx (room for n_max more is made by plan_length); the stop ids. */
static int build_prompt(gen_run *g, const gen_args *a) {
    int32_t *ids = NULL;
    int n = 0;
    add_stop(g, g->eos, "end-of-text");
    if (a->chat && g->tok) TSR_CHECK(chat_prompt(g, a));
    if (a->prompt_ids) {
        TSR_CHECK(parse_ids(a->prompt_ids, &ids, &n));
    } else if (a->prompt) {
        TSR_CHECK(encode_text(g, g->text ? g->text : a->prompt, &ids, &n));
    } else {
        ids = tsr_malloc(sizeof *ids);
        ids[n++] = g->eos; /* as the trainer's sample: start a document */
    }
    if (n == 0) {
        free(ids);
        tsr_error("generate: the prompt has no tokens; leave --prompt/--prompt-ids out to start "
                  "from the end-of-text token");
        return TSR_EXIT_USAGE;
    }
    for (int i = 0; i < n; i++)
        if (ids[i] >= g->m.V) {
            tsr_error("generate: prompt token %d is id %d, the model's vocabulary has %d ids "
                      "(0..%d)%s", i, ids[i], g->m.V, g->m.V - 1,
                      a->prompt ? ": the tokenizer does not match the model" : "");
            free(ids);
            return TSR_EXIT_USAGE;
        }
    g->ctx = ids;
    g->P = n;
    return 0;
}

/* n_max: --max-tokens, cut so that prompt + completion <= maxT with learned positions (the
 * table has no row beyond); ALiBi has no table, its cache is sized for the whole request. */
static int plan_length(gen_run *g, const gen_args *a) {
    const int learned = g->m.cfg.pos == TSR_POS_LEARNED;
    g->n_max = (int)a->max_tokens;
    if (learned && g->P > g->m.maxT) {
        tsr_error("generate: the prompt has %d tokens, the model's learned position table %d "
                  "(model.max_seq_len): shorten the prompt to at most %d tokens", g->P, g->m.maxT,
                  g->m.maxT);
        return TSR_EXIT_USAGE;
    }
    if (learned && g->P + g->n_max > g->m.maxT) g->n_max = g->m.maxT - g->P;
    if (!learned && g->P + g->n_max > g->cfg.seq_len)
        tsr_warn("generate: %s: the context will reach %d positions, beyond the %lld the model "
                 "was trained on (seq_len): extrapolating",
                 g->m.cfg.pos == TSR_POS_ALIBI ? "ALiBi" : "RoPE", g->P + g->n_max,
                 (long long)g->cfg.seq_len);
    int32_t *ctx = realloc(g->ctx, (size_t)(g->P + g->n_max) * sizeof *ctx);
    if (!ctx) tsr_die(TSR_EXIT_INTERNAL, "out of memory for %d tokens", g->P + g->n_max);
    g->ctx = ctx;
    g->len = g->P;
    return 0;
}

/* ================================ generation ================================ */

/* Positions fed to the model: the prompt, then every new token but the last. */
static int fed_max(const gen_run *g) { return g->P + (g->n_max > 0 ? g->n_max - 1 : 0); }

static void setup(gen_run *g, const gen_args *a) {
    if (a->no_cache) {
        model_alloc_acts(&g->m, 1, fed_max(g));
    } else {
        model_kv_init(&g->kv, &g->m, fed_max(g), GEN_PREFILL_CHUNK);
        g->probs = g->m.ops->alloc((size_t)g->m.Vp * sizeof *g->probs);
    }
    g->cand = tsr_malloc((size_t)g->m.V * sizeof *g->cand);
    g->w = tsr_malloc((size_t)g->m.V * sizeof *g->w);
}

/* Feeds ctx[len - n .. len) (n new positions) and returns the next-token distribution. */
static const float *forward(gen_run *g, int n, int no_cache) {
    if (no_cache) return model_forward_last(&g->m, g->ctx, g->len);
    model_infer_forward(&g->m, &g->kv, g->ctx + g->len - n, n, g->probs);
    return g->probs;
}

static int write_failed(void) {
    tsr_error("generate: writing to stdout failed: %s", strerror(errno));
    return TSR_EXIT_DATA;
}

/* What token ctx[at] adds to the decoded text of ctx[dec_from..at]: the tokenizer's decode (a
 * SentencePiece decoder turns U+2581 into a space and strips the first one, as transformers'
 * decode of the new ids does). The decoders tessera reads (ByteLevel; Replace, ByteFallback, Fuse,
 * Strip of the first token) extend the text of a prefix, so the token's part is the decode of it
 * and its predecessor past the predecessor's alone, or its own decode when it comes first. */
static int emit_text(gen_run *g, int at) {
    const int from = at > g->dec_from ? at - 1 : at;
    const uint32_t *ids = (const uint32_t *)g->ctx + from; /* ids >= 0: the same bits */
    const size_t n = (size_t)(at + 1 - from);
    size_t before = from < at ? tokenizer_decode(g->tok, ids, 1, g->dec, sizeof g->dec) : 0;
    size_t len = tokenizer_decode(g->tok, ids, n, g->dec, sizeof g->dec);
    if (len == (size_t)-1 || before == (size_t)-1)
        tsr_die(TSR_EXIT_INTERNAL, "generate: id %d cannot be decoded", g->ctx[at]);
    if (len > sizeof g->dec) { /* a long token: decode into a buffer of its size */
        uint8_t *big = tsr_malloc(len);
        tokenizer_decode(g->tok, ids, n, big, len);
        int bad = len > before && fwrite(big + before, 1, len - before, stdout) != len - before;
        free(big);
        return bad;
    }
    return len > before && fwrite(g->dec + before, 1, len - before, stdout) != len - before;
}

/* Prints token ctx[at]: its text, <|id N|> for an id the tokenizer lacks (the text restarts after
 * it), or (--ids, no tokenizer) its id after a space unless it is the first thing printed. */
static int emit(gen_run *g, int at, int ids) {
    const int32_t id = g->ctx[at];
    uint32_t n = 0;
    int bad;
    if (g->tok && !ids && tokenizer_token_bytes(g->tok, (uint32_t)id, &n)) {
        bad = emit_text(g, at);
    } else if (g->tok && !ids) {
        bad = printf("<|id %d|>", id) < 0;
        g->dec_from = at + 1;
    } else {
        bad = printf(g->n_printed ? " %d" : "%d", id) < 0;
    }
    g->n_printed++;
    return bad || fflush(stdout) != 0 ? write_failed() : 0;
}

/* --echo: the prompt before the completion: its text as given or as the chat template rendered
 * it, else (--ids, --prompt-ids) its tokens as emit prints them. */
static int echo_prompt(gen_run *g, const gen_args *a) {
    const char *text = a->ids ? NULL : g->text ? g->text : a->prompt;
    if (!text) {
        for (int i = 0; i < g->P; i++) TSR_CHECK(emit(g, i, a->ids));
        return 0;
    }
    size_t n = strlen(text);
    g->n_printed += n > 0;
    return (n && fwrite(text, 1, n, stdout) != n) || fflush(stdout) != 0 ? write_failed() : 0;
}

/* " '<|im_end|>'": a token's text for messages (cut to fit), "" without a tokenizer. */
static const char *token_name(const gen_run *g, int32_t id, char *buf, size_t cap) {
    uint32_t n = 0;
    const uint8_t *b = g->tok ? tokenizer_token_bytes(g->tok, (uint32_t)id, &n) : NULL;
    if (!b) return "";
    int w = n > cap - 8 ? (int)(cap - 8) : (int)n;
    snprintf(buf, cap, " '%.*s'", w, (const char *)b);
    return buf;
}

/* The index of id among the stop ids, or -1. */
static int stop_index(const gen_run *g, int32_t id) {
    for (int k = 0; k < g->n_stops; k++)
        if (g->stop_id[k] == id) return k;
    return -1;
}

static int dump_probs(const gen_run *g, int step, int32_t id, const float *probs) {
    fprintf(g->dump, "%d %d", step, id);
    for (int j = 0; j < g->m.V; j++) fprintf(g->dump, " %.9g", probs[j]);
    if (fputc('\n', g->dump) == EOF) {
        tsr_error("generate: --dump-probs: write failed: %s", strerror(errno));
        return TSR_EXIT_DATA;
    }
    return 0;
}

/* Prefill, then sample / emit / feed until n_max tokens, end-of-text or the context limit. */
static int generate(gen_run *g, const gen_args *a) {
    if (a->echo) TSR_CHECK(echo_prompt(g, a));
    g->dec_from = g->P; /* the completion's text, decoded apart from the prompt */
    double t0 = tsr_now();
    const float *probs = forward(g, g->P, a->no_cache);
    double t1 = tsr_now();
    g->t_prefill = t1 - t0;
    g->stop = g->n_max < a->max_tokens ? GEN_STOP_CONTEXT : GEN_STOP_MAX;
    for (int s = 0; s < g->n_max; s++) {
        int32_t id = gen_pick(probs, g->m.V, &g->smp, (uint64_t)s, g->cand, g->w);
        g->n_sampled++;
        if (g->dump) TSR_CHECK(dump_probs(g, s, id, probs));
        if (!a->no_eos_stop && stop_index(g, id) >= 0) {
            g->stop = id == g->eos ? GEN_STOP_EOS : GEN_STOP_EOT;
            g->hit = id;
            break;
        }
        g->ctx[g->len] = id;
        TSR_CHECK(emit(g, g->len++, a->ids));
        if (s + 1 == g->n_max) break;
        probs = forward(g, 1, a->no_cache);
        g->n_steps++;
    }
    g->t_decode = tsr_now() - t1;
    if (g->n_printed && printf("\n") < 0) return write_failed();
    fflush(stdout);
    return 0;
}

/* tokens/s: prefill = P / its time; decode = one-token steps / their time (the first new token
 * comes from the prefill, as llama.cpp counts). */
static void report(const gen_run *g, const gen_args *a) {
    int n_new = g->len - g->P;
    char why[256];
    char name[64];
    if (g->stop == GEN_STOP_EOS)
        snprintf(why, sizeof why, "end-of-text id %d, not printed", g->eos);
    else if (g->stop == GEN_STOP_EOT)
        snprintf(why, sizeof why, "id %d%s (%s), not printed", g->hit,
                 token_name(g, g->hit, name, sizeof name), g->stop_from[stop_index(g, g->hit)]);
    else if (g->stop == GEN_STOP_CONTEXT)
        snprintf(why, sizeof why, "context limit: prompt + completion = model.max_seq_len = %d "
                 "learned positions", g->m.maxT);
    else
        snprintf(why, sizeof why, "--max-tokens %lld", (long long)a->max_tokens);
    fprintf(stderr, "generate: %d tokens generated (stop: %s; %s), prompt %d tokens\n", n_new,
            stop_names[g->stop], why, g->P);
    fprintf(stderr, "generate: prefill %d tokens in %.4f s = %.1f tokens/s; decode %d one-token "
            "steps in %.4f s = ", g->P, g->t_prefill, g->P / (g->t_prefill > 0 ? g->t_prefill : 1e-9),
            g->n_steps, g->t_decode);
    if (g->n_steps > 0) fprintf(stderr, "%.1f tokens/s\n", g->n_steps / g->t_decode);
    else fprintf(stderr, "n/a\n");
}

/* The architecture: "learned", or e.g. "rope rmsnorm swiglu qk-norm untied no-bias". */
static void arch_text(const tsr_model_config *c, char *buf, size_t cap) {
    static const char *const pos[TSR_POS_COUNT] = {"learned", "alibi", "rope"};
    snprintf(buf, cap, "%s%s%s%s%s%s%s", pos[c->pos], c->norm == TSR_NORM_RMSNORM ? " rmsnorm" : "",
             c->mlp == TSR_MLP_SWIGLU ? " swiglu" : "", c->qkv_bias ? " qkv-bias" : "",
             c->qk_norm ? " qk-norm" : "", c->tie_embeddings ? "" : " untied",
             c->bias ? "" : " no-bias");
}

/* The ids that end the completion: "end-of-text id 299" alone, else each id, its token and
 * where it comes from. */
static void stops_text(const gen_run *g, char *buf, size_t cap) {
    if (g->n_stops == 1 && !strcmp(g->stop_from[0], "end-of-text")) {
        snprintf(buf, cap, "end-of-text id %d", g->eos);
        return;
    }
    size_t l = (size_t)snprintf(buf, cap, "stop at");
    for (int k = 0; k < g->n_stops && l < cap; k++) {
        char name[64];
        l += (size_t)snprintf(buf + l, cap - l, "%s %d%s (%s)", k ? "," : "", g->stop_id[k],
                              token_name(g, g->stop_id[k], name, sizeof name), g->stop_from[k]);
    }
}

static void banner(const gen_run *g, const gen_args *a) {
    const tsr_model *m = &g->m;
    char cache[96], arch[96], stops[GEN_MAX_STOPS * 160], size[32];
    metrics_human_bytes(size, sizeof size, (double)model_kv_bytes(m, g->kv.cap));
    if (a->no_cache) snprintf(cache, sizeof cache, "off (--no-cache: full forward every token)");
    else snprintf(cache, sizeof cache, "%d positions, %s", g->kv.cap, size);
    arch_text(&m->cfg, arch, sizeof arch);
    stops_text(g, stops, sizeof stops);
    fprintf(stderr, "generate: %s | L=%d C=%d NH=%d KVH=%d hs=%d V=%d %s | threads %d | KV cache %s\n",
            g->resolved, m->L, m->C, m->NH, m->KVH, m->hs, m->V, arch, g->threads, cache);
    if (g->smp.temperature == 0.0)
        fprintf(stderr, "generate: greedy; %s%s\n", stops, a->no_eos_stop ? " (no stop)" : "");
    else
        fprintf(stderr, "generate: temperature %g, top-k %lld, top-p %g, seed %llu; %s%s\n",
                g->smp.temperature, (long long)g->smp.top_k, g->smp.top_p,
                (unsigned long long)g->smp.seed, stops, a->no_eos_stop ? " (no stop)" : "");
}

/* --prompts: the stop ids (end of text; with a chat template its eos_token, end of turn and
 * generation_config.json's), then the batched run (gen_prompts.h) */
static int run_many(gen_run *g, gen_args *a) {
    add_stop(g, g->eos, "end-of-text");
    if (g->chat.loaded && g->chat.cc.tpl) {
        uint32_t e = gen_chat_eos_id(&g->chat, g->tok);
        if (e != UINT32_MAX) add_stop(g, e, "eos_token");
        e = gen_chat_end_of_turn(&g->chat, g->tok, a->system, "Hi");
        if (e != UINT32_MAX) add_stop(g, e, "end of turn");
        int64_t ids[GEN_MAX_STOPS];
        int k = 0;
        TSR_CHECK(gen_chat_generation_eos(&g->chat, ids, GEN_MAX_STOPS, &k));
        for (int i = 0; i < k; i++) add_stop(g, ids[i], "generation_config.json");
    }
    gen_prompts_opts *o = &a->many;
    o->max_new = (int)a->max_tokens, o->chat = a->chat, o->ids = a->ids, o->system = a->system;
    o->tok_spec = g->tok_spec, o->smp = g->smp;
    o->stop_ids = a->no_eos_stop ? NULL : g->stop_id, o->n_stop_ids = a->no_eos_stop ? 0 : g->n_stops;
    char stops[GEN_MAX_STOPS * 160];
    stops_text(g, stops, sizeof stops);
    fprintf(stderr, "generate: %s | batch %d, %d sample(s) per prompt, %s; %s%s\n", g->resolved,
            o->batch, o->samples, g->smp.temperature == 0.0 ? "greedy" : "sampled", stops,
            a->no_eos_stop ? " (no stop)" : "");
    return gen_prompts_run(&g->m, g->tok, &g->chat, o);
}

static void gen_free(gen_run *g) {
    if (g->kv.kt) model_kv_free(&g->kv, &g->m);
    if (g->probs) g->m.ops->free(g->probs);
    if (g->m.params) model_free(&g->m);
    if (g->tok) tokenizer_free(g->tok);
    gen_chat_free(&g->chat);
    free(g->text);
    if (g->dump) fclose(g->dump);
    free(g->ctx), free(g->cand), free(g->w);
}

int cmd_generate(int argc, char **argv) {
    gen_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) {
        gen_chat_vars_free(&a.vars);
        return rc < 0 ? 0 : rc;
    }
    gen_run *g = tsr_calloc(1, sizeof *g);
    rc = gen_load_model(a.ckpt, a.sets, a.n_sets, &g->cfg, &g->m, g->resolved, sizeof g->resolved);
    if (!rc) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        g->threads = g->cfg.threads > 0 ? g->cfg.threads : cores > 0 ? (int)cores : 1;
        cpu_ops_set_threads(g->threads);
        g->smp = (gen_sampling){a.has_temperature ? a.temperature : g->cfg.sample.temperature,
                                a.has_top_k ? a.top_k : g->cfg.sample.top_k, a.top_p,
                                (uint64_t)(a.has_seed ? a.seed : g->cfg.seed)};
        rc = open_tokenizer(g, &a);
    }
    if (!rc && a.many.in) {
        rc = run_many(g, &a);
        gen_free(g);
        free(g);
        gen_chat_vars_free(&a.vars);
        return rc;
    }
    if (!rc) rc = build_prompt(g, &a);
    if (!rc) rc = plan_length(g, &a);
    if (!rc && a.dump && !(g->dump = fopen(a.dump, "w"))) {
        tsr_error("generate: --dump-probs %s: cannot create: %s", a.dump, strerror(errno));
        rc = TSR_EXIT_DATA;
    }
    if (!rc) {
        setup(g, &a);
        banner(g, &a);
        rc = generate(g, &a);
    }
    if (!rc) report(g, &a);
    if (g->dump) {
        int bad = fclose(g->dump) != 0;
        g->dump = NULL;
        if (bad && !rc) {
            tsr_error("generate: --dump-probs %s: write failed: %s", a.dump, strerror(errno));
            rc = TSR_EXIT_DATA;
        }
    }
    gen_free(g);
    free(g);
    gen_chat_vars_free(&a.vars);
    return rc;
}

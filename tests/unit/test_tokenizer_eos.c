/* test_tokenizer_eos.c — tokenizer_eos_id (src/tokenizer/tokenizer_eos.h), the one end-of-sequence
 * lookup of prep, generate and ckpt export: the order per use, pinned on synthetic tokenizers
 * (256 bytes + the special tokens of a Qwen-, a Llama-3- and a GPT-2-like vocabulary), and on the
 * real Qwen 3, Llama 3 and Gemma 3 files with their tokenizer_config.json when ./INSTALL fetched
 * them (data/npm/chat, or $TSR_DATA_DIR/chat): Qwen 3 ends documents with <|endoftext|> 151643 and
 * reports <|im_end|> 151645 as eos_token_id; Llama 3 has no <|endoftext|>, both are 128001; Gemma
 * 3 (its IT config) ends documents with <eos> 1 and reports <end_of_turn> 106; tokenizer_bos_id,
 * the start of a document of prep --bos: Gemma 3's <bos> 2, Llama 3's <|begin_of_text|> 128000. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_config.h"
#include "tap.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_eos.h"

enum { N_BYTES = 256 };
#define NONE UINT32_MAX

/* 256 single-byte tokens, then the n special tokens names[] at ids 256.. */
static tsr_tokenizer *tiny(const char *const *names, uint32_t n) {
    static uint8_t bytes[N_BYTES];
    const uint8_t *tokens[N_BYTES + 4];
    uint32_t len[N_BYTES + 4], ids[4];
    for (uint32_t i = 0; i < N_BYTES; i++) {
        bytes[i] = (uint8_t)i;
        tokens[i] = &bytes[i];
        len[i] = 1;
    }
    for (uint32_t k = 0; k < n; k++) {
        tokens[N_BYTES + k] = (const uint8_t *)names[k];
        len[N_BYTES + k] = (uint32_t)strlen(names[k]);
        ids[k] = N_BYTES + k;
    }
    tsr_tokenizer *t = NULL;
    if (tokenizer_build(&t, N_BYTES + n, tokens, len, 0, NULL, n, names, ids)) return NULL;
    return t;
}

/* Gemma-like (<eos>, <bos>, an instruct config's <end_of_turn>) and a vocabulary with none of
 * the names: the document's end and start (issue 79 item 11). */
static void synthetic_gemma(void) {
    static const char *const gemma[] = {"<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"};
    static const char *const other[] = {"<|sep|>", "<|go|>"};
    tsr_tokenizer *g = tiny(gemma, 4), *o = tiny(other, 2);
    if (!g || !o) {
        tap_ok(0, "synthetic tokenizers built");
        return;
    }
    const tokenizer_eos_use D = TOKENIZER_EOS_DOCUMENT, C = TOKENIZER_EOS_CONFIG;
    tap_ok(tokenizer_eos_id(g, "<end_of_turn>", D) == 256 && tokenizer_eos_id(g, NULL, D) == 256 &&
               tokenizer_eos_id(g, "<end_of_turn>", C) == 259,
           "Gemma-like: documents end with <eos>, though an instruct config's eos_token is "
           "<end_of_turn> (which the config use reports)");
    tap_ok(tokenizer_bos_id(g, "<bos>") == 257 && tokenizer_bos_id(g, NULL) == 257,
           "Gemma-like: the start of a document is <bos>, with or without a config naming it");
    tap_ok(tokenizer_eos_id(o, "<|sep|>", D) == 256 && tokenizer_eos_id(o, NULL, D) == NONE &&
               tokenizer_bos_id(o, "<|go|>") == 257 && tokenizer_bos_id(o, NULL) == NONE,
           "no family name: the config's eos_token / bos_token, else none");
    tokenizer_free(g), tokenizer_free(o);
}

static void synthetic(void) {
    static const char *const qwen[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    static const char *const llama[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"};
    static const char *const gpt2[] = {"<|endoftext|>"};
    tsr_tokenizer *q = tiny(qwen, 3), *l = tiny(llama, 3), *g = tiny(gpt2, 1);
    if (!q || !l || !g) {
        tap_ok(0, "synthetic tokenizers built");
        return;
    }
    tap_ok(tokenizer_eos_id(l, "<|eot_id|>", TOKENIZER_EOS_DOCUMENT) == 257 &&
               tokenizer_bos_id(l, NULL) == 256 && tokenizer_bos_id(q, NULL) == 256 &&
               tokenizer_bos_id(g, NULL) == 256,
           "Llama 3 Instruct-like (eos_token <|eot_id|>): documents end with <|end_of_text|>, "
           "start with <|begin_of_text|>; GPT-2 and Qwen start with <|endoftext|>");
    const tokenizer_eos_use D = TOKENIZER_EOS_DOCUMENT, C = TOKENIZER_EOS_CONFIG;
    tap_ok(tokenizer_eos_id(q, "<|im_end|>", D) == 256 && tokenizer_eos_id(q, NULL, D) == 256,
           "document, Qwen-like: <|endoftext|> first, though the config's eos_token is <|im_end|>");
    tap_ok(tokenizer_eos_id(q, "<|im_end|>", C) == 258 && tokenizer_eos_id(q, NULL, C) == 256,
           "config, Qwen-like: the eos_token <|im_end|> when named, else <|endoftext|>");
    tap_ok(tokenizer_eos_id(l, "<|end_of_text|>", D) == 257 &&
               tokenizer_eos_id(l, "<|end_of_text|>", C) == 257,
           "Llama-3-like (no <|endoftext|>): the eos_token <|end_of_text|> for both uses");
    tap_ok(tokenizer_eos_id(l, NULL, D) == 257 && tokenizer_eos_id(l, NULL, C) == NONE,
           "Llama-3-like without a config: documents end with <|end_of_text|> (a family name), "
           "the config use has none");
    tap_ok(tokenizer_eos_id(g, NULL, D) == 256 && tokenizer_eos_id(g, NULL, C) == 256,
           "GPT-2-like, no config: <|endoftext|> for both uses");
    tap_ok(tokenizer_eos_id(q, "<|absent|>", C) == NONE &&
               tokenizer_eos_id(q, "<|absent|>", D) == 256 &&
               tokenizer_eos_id(l, "<|absent|>", D) == 257,
           "an eos_token the vocabulary lacks: config none (not <|endoftext|>), document "
           "<|endoftext|> or <|end_of_text|>");
    tokenizer_free(q), tokenizer_free(l), tokenizer_free(g);
}

/* the real files of MODEL: want_doc, want_cfg for its tokenizer_config.json's eos_token */
static void real(const char *dir, const char *model, uint32_t want_doc, uint32_t want_cfg) {
    char tj[4200], cj[4200];
    snprintf(tj, sizeof tj, "%s/%s/tokenizer.json", dir, model);
    snprintf(cj, sizeof cj, "%s/%s/tokenizer_config.json", dir, model);
    FILE *f = fopen(tj, "r");
    if (!f) {
        tap_skip(model, "data/npm/chat absent (./INSTALL --ensure fetches it with npm)");
        return;
    }
    fclose(f);
    tsr_tokenizer *t = NULL;
    chat_config cc;
    jinja_error e;
    if (tokenizer_open(&t, tj) || chat_config_load(cj, &cc, &e)) {
        tap_ok(0, "%s: tokenizer.json and tokenizer_config.json load", model);
        if (t) tokenizer_free(t);
        return;
    }
    const char *eos = chat_config_token(&cc, "eos_token");
    uint32_t d = tokenizer_eos_id(t, eos, TOKENIZER_EOS_DOCUMENT);
    uint32_t c = tokenizer_eos_id(t, eos, TOKENIZER_EOS_CONFIG);
    tap_ok(d == want_doc && c == want_cfg, "%s (eos_token %s): document %u (want %u), config %u "
           "(want %u)", model, eos ? eos : "none", d, want_doc, c, want_cfg);
    chat_config_free(&cc);
    tokenizer_free(t);
}

/* the real files of MODEL: want, the start of a document with its config's bos_token */
static void real_bos(const char *dir, const char *model, uint32_t want) {
    char tj[4200], cj[4200];
    snprintf(tj, sizeof tj, "%s/%s/tokenizer.json", dir, model);
    snprintf(cj, sizeof cj, "%s/%s/tokenizer_config.json", dir, model);
    tsr_tokenizer *t = NULL;
    chat_config cc;
    jinja_error e;
    FILE *f = fopen(tj, "r");
    if (!f) {
        tap_skip(model, "data/npm/chat absent (./INSTALL --ensure fetches it with npm)");
        return;
    }
    fclose(f);
    if (tokenizer_open(&t, tj) || chat_config_load(cj, &cc, &e)) {
        tap_ok(0, "%s: tokenizer.json and tokenizer_config.json load", model);
        if (t) tokenizer_free(t);
        return;
    }
    uint32_t b = tokenizer_bos_id(t, chat_config_token(&cc, "bos_token"));
    tap_ok(b == want, "%s: the start of a document (--bos) is %u (want %u, the bos_token)", model, b,
           want);
    chat_config_free(&cc);
    tokenizer_free(t);
}

int main(void) {
    tap_plan(15);
    synthetic();
    synthetic_gemma();
    char dir[4096];
    const char *d = getenv("TSR_DATA_DIR");
    snprintf(dir, sizeof dir, "%s/chat", d && *d ? d : "data/npm");
    real(dir, "qwen3", 151643, 151645);
    real(dir, "llama3", 128001, 128001);
    real(dir, "gemma3", 1, 106); /* Gemma 3 IT's config: eos_token <end_of_turn> */
    real_bos(dir, "gemma3", 2);
    real_bos(dir, "llama3", 128000);
    return tap_done();
}

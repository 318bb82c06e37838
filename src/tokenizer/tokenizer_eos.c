/* tokenizer_eos.c — the end-of-sequence and start-of-sequence ids of a tokenizer, by use
 * (tokenizer_eos.h). */
#include "tokenizer/tokenizer_eos.h"

#define ENDOFTEXT "<|endoftext|>"

/* The end of a document in the families' pretraining data, by the token's name, first found
 * first: GPT-2's, Qwen's, OLMo's and gpt-oss's <|endoftext|>; Llama 3's and SmolLM3's
 * <|end_of_text|>; Gemma's <eos>; Llama 2's and Mistral's </s>. An instruct model's
 * tokenizer_config.json names its end of turn as eos_token instead (Qwen's <|im_end|>, Llama 3
 * Instruct's <|eot_id|>, Gemma 3 IT's <end_of_turn>), which ends a chat turn, not a document. */
static const char *const document_ends[] = {ENDOFTEXT, "<|end_of_text|>", "<eos>", "</s>"};
/* The start of a document, when the config names no bos_token: Gemma's <bos>, Llama 3's
 * <|begin_of_text|>, Llama 2's <s>, gpt-oss's <|startoftext|>, else GPT-2's <|endoftext|> (GPT-2
 * has no start token; Qwen neither, its bos_token is null). */
static const char *const document_starts[] = {"<bos>", "<|begin_of_text|>", "<s>",
                                              "<|startoftext|>", ENDOFTEXT};

static uint32_t first_of(const tsr_tokenizer *tok, const char *const *names, size_t n) {
    for (size_t k = 0; k < n; k++) {
        uint32_t id = tokenizer_special_id(tok, names[k]);
        if (id != UINT32_MAX) return id;
    }
    return UINT32_MAX;
}

uint32_t tokenizer_eos_id(const tsr_tokenizer *tok, const char *eos_token, tokenizer_eos_use use) {
    if (use == TOKENIZER_EOS_CONFIG)
        return tokenizer_special_id(tok, eos_token ? eos_token : ENDOFTEXT);
    uint32_t id = first_of(tok, document_ends, sizeof document_ends / sizeof *document_ends);
    return id == UINT32_MAX && eos_token ? tokenizer_special_id(tok, eos_token) : id;
}

uint32_t tokenizer_bos_id(const tsr_tokenizer *tok, const char *bos_token) {
    uint32_t id = bos_token ? tokenizer_special_id(tok, bos_token) : UINT32_MAX;
    return id != UINT32_MAX ? id
                            : first_of(tok, document_starts, sizeof document_starts / sizeof *document_starts);
}

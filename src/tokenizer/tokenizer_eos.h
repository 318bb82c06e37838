/* tokenizer_eos.h — which token ends a sequence: one lookup for `tessera prep` (the token after
 * each document), `tessera generate` (its end-of-text stop) and `tessera ckpt export --format hf`
 * (config.json's eos_token_id). Two names can answer, in an order that depends on the use:
 *
 *   "<|endoftext|>"  GPT-2's and Qwen's document separator (Qwen: 151643);
 *   eos_token        the tokenizer_config.json's (Llama 3: <|end_of_text|>, Qwen 3: <|im_end|>).
 *
 * TOKENIZER_EOS_DOCUMENT, the end of a document: <|endoftext|> when tok has it, else eos_token
 * when tok has it. A Qwen tokenizer's documents end with <|endoftext|> (its pretraining
 * separator), though its config names <|im_end|>, the end of a chat turn; a Llama 3 tokenizer
 * has no <|endoftext|> and ends them with its eos_token <|end_of_text|> (docs/prep.md).
 * TOKENIZER_EOS_CONFIG, the id transformers' tokenizer reports as eos_token_id: the eos_token's
 * when the config names one (none when tok lacks it: transformers reports that token all the
 * same), else <|endoftext|> (GPT-2, no config) (docs/hf.md).
 */
#ifndef TSR_TOKENIZER_EOS_H
#define TSR_TOKENIZER_EOS_H

#include <stdint.h>

#include "tokenizer/tokenizer.h"

typedef enum tokenizer_eos_use {
    TOKENIZER_EOS_DOCUMENT, /* <|endoftext|>, else eos_token: prep, generate */
    TOKENIZER_EOS_CONFIG,   /* eos_token when named, else <|endoftext|>: ckpt export */
    TOKENIZER_EOS_COUNT
} tokenizer_eos_use;

/* The end-of-sequence id of tok for `use`; eos_token: the tokenizer_config.json's eos_token, NULL
 * when there is no config or it names none. UINT32_MAX when tok has no such token. */
uint32_t tokenizer_eos_id(const tsr_tokenizer *tok, const char *eos_token, tokenizer_eos_use use);

#endif

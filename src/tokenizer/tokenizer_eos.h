/* tokenizer_eos.h — which token ends a sequence, and which starts one: one lookup for `tessera
 * prep` (the token after each document, and --bos's before it), `tessera generate` (its
 * end-of-text stop) and `tessera ckpt export --format hf` (config.json's eos_token_id). Two names
 * can answer, in an order that depends on the use:
 *
 *   the end of a document of the family's pretraining, by name: <|endoftext|> (GPT-2, Qwen:
 *                    151643, gpt-oss), <|end_of_text|> (Llama 3: 128001), <eos> (Gemma: 1),
 *                    </s> (Llama 2, Mistral);
 *   eos_token        the tokenizer_config.json's (Llama 3: <|end_of_text|>, Qwen 3: <|im_end|>,
 *                    Gemma 3 IT: <end_of_turn>, 106).
 *
 * TOKENIZER_EOS_DOCUMENT, the end of a document: the first pretraining name tok has, else
 * eos_token when tok has it. A Qwen tokenizer's documents end with <|endoftext|>, a Gemma 3 one's
 * with <eos>, though their instruct configs name the end of a chat turn (<|im_end|>,
 * <end_of_turn>); a tokenizer with none of the names ends them with its eos_token (docs/prep.md).
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
/* The start of a document (prep --bos): the tokenizer_config.json's bos_token (bos_token: NULL
 * when there is no config or it names none) when tok has it, else the first of <bos> (Gemma),
 * <|begin_of_text|> (Llama 3), <s> (Llama 2, Mistral), <|startoftext|> (gpt-oss), <|endoftext|>
 * (GPT-2 and Qwen, which have no start token) tok has. UINT32_MAX when it has none. */
uint32_t tokenizer_bos_id(const tsr_tokenizer *tok, const char *bos_token);

#endif

/* tokenizer_eos.c — the end-of-sequence id of a tokenizer, by use (tokenizer_eos.h). */
#include "tokenizer/tokenizer_eos.h"

#define ENDOFTEXT "<|endoftext|>"

uint32_t tokenizer_eos_id(const tsr_tokenizer *tok, const char *eos_token, tokenizer_eos_use use) {
    if (use == TOKENIZER_EOS_CONFIG)
        return tokenizer_special_id(tok, eos_token ? eos_token : ENDOFTEXT);
    uint32_t id = tokenizer_special_id(tok, ENDOFTEXT);
    return id == UINT32_MAX && eos_token ? tokenizer_special_id(tok, eos_token) : id;
}

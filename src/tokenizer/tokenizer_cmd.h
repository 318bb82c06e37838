/* tokenizer_cmd.h — `tessera tokenizer encode|decode|train` (usage: docs/tokenizer.md).
 *
 * Each takes the arguments after `tessera`, so argv[0] is "tokenizer" (cmd_tokenizer) or the
 * subcommand name (cmd_tokenizer_train), and returns the exit status: 0 ok, 1 usage error
 * (TSR_EXIT_USAGE), 2 data or I/O error (TSR_EXIT_DATA).
 */
#ifndef TSR_TOKENIZER_CMD_H
#define TSR_TOKENIZER_CMD_H

/* tessera tokenizer encode [--tokenizer gpt2|PATH] [--special] FILE...|-
 * tessera tokenizer decode [--tokenizer gpt2|PATH] FILE...|-
 * tessera tokenizer train ...                     (cmd_tokenizer_train) */
int cmd_tokenizer(int argc, char **argv);
/* tessera tokenizer train ...: argv[0] is "train" (src/tokenizer/train.c). */
int cmd_tokenizer_train(int argc, char **argv);

#endif

/* synth_arith.h — `tessera synth --task arithmetic`: a synthetic arithmetic corpus as JSON Lines
 * text, the fixture of reinforcement learning's example and tests (docs/rl.md "The arithmetic
 * example"). Sums a+b and differences a-b >= 0 of operands 0..max; each problem (op, a, b) falls
 * into the held-out set with probability 1/5, a function of (seed, op, a, b) alone:
 *   DIR/pretrain.jsonl  {"text": "a+b=c"}                   every problem in turn, `examples` lines
 *   DIR/sft.jsonl       {"prompt": "a+b=", "response": "c"} the same problems; a `verbose` share
 *                       of the responses run on: "c because a+b=c"
 *   DIR/prompts.jsonl   {"prompt": "a+b=", "answer": c}     the problems not held out, each once
 *   DIR/heldout.jsonl   {"prompt": "a+b=", "answer": c}     the held-out problems, each once
 * (problems in a seeded order). The SFT model answers, then stops or runs on; a reward that reads
 * the whole completion as the answer (reward.extract = auto, no marker) passes only the first, so
 * reinforcement learning on prompts.jsonl has something to teach that shows on heldout.jsonl's
 * problems, which it never trains on. Staged in DIR.tmp, renamed when complete. */
#ifndef TSR_SYNTH_ARITH_H
#define TSR_SYNTH_ARITH_H

#include <stdint.h>

/* Returns 0, or TSR_EXIT_DATA after tsr_error() (DIR exists, a write failed). */
int synth_arithmetic(const char *dir, uint64_t examples, int max_operand, double verbose,
                     uint64_t seed, int quiet);

#endif

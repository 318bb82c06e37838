/* eval_cmd.h — `tessera eval` (docs/eval.md). */
#ifndef TSR_EVAL_CMD_H
#define TSR_EVAL_CMD_H

int cmd_eval(int argc, char **argv);

#endif

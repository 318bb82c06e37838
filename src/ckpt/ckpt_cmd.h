/* ckpt_cmd.h — `tessera ckpt ls|verify|inspect|export`: local inspection of checkpoint files and the Hugging Face export (no MPI). */
#ifndef TSR_CKPT_CMD_H
#define TSR_CKPT_CMD_H

/* argv[0] is "ckpt"; returns the exit status (0 ok, 1 usage, 2 invalid or unreadable checkpoint).
 */
int cmd_ckpt(int argc, char **argv);

#endif

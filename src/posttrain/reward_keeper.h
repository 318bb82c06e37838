/* reward_keeper.h — the keeper of a reward program: whatever the program starts ends with its rank
 * (docs/rl.md "The reward program"; issue 64 finding 2).
 *
 * A rank does not start the program itself: it starts its own executable again (/proc/self/exe,
 * argv[1] = REWARD_KEEPER_ARG, dispatched first thing in tessera-train's main), a small process
 * that
 *   - is a child subreaper (PR_SET_CHILD_SUBREAPER): a process the program starts that loses its
 *     parent, even one in a session of its own (setsid, Python's start_new_session=True), is
 *     reparented to the keeper, not to init;
 *   - starts `/bin/sh -c ...` (the program, leading a process group of its own) on the pipes the
 *     rank gave it, and closes its own copies of them;
 *   - holds the read end of a lifeline pipe whose only write end is the rank's (close-on-exec):
 *     the kernel closes it when the rank ends, however it ends (exit, MPI_Abort, SIGKILL, an
 *     out-of-memory kill, mpirun's job killed), and the keeper reads its end;
 *   - ends everything it keeps, SIGKILL to the program's group and then to each of its children
 *     (orphans included) until none is left, when the lifeline ends, on SIGTERM (the rank's abort
 *     path, tsr_kill_child_groups) or when the program exits; it then exits as the program did
 *     (its exit status, or its signal), which is what the rank reports.
 * The keeper leads a process group of its own too, so that a signal to the rank's group (mpirun's,
 * a terminal's) does not end it before it has ended the rest.
 */
#ifndef TSR_REWARD_KEEPER_H
#define TSR_REWARD_KEEPER_H

#define REWARD_KEEPER_ARG "--tessera-reward-keeper" /* argv[1] of the keeper (not an option) */
#define REWARD_KEEPER_LIFELINE 3                    /* the keeper's fd of the lifeline's read end */

/* The keeper's main: argv[2...] is the program's argv (/bin/sh's); stdin and stdout are the
 * program's, fd REWARD_KEEPER_LIFELINE the lifeline. Returns only through exit. Every program
 * that runs reward programs (tessera-train, tests/reference/ref_dump) starts its main with
 * `if (argc > 1 && !strcmp(argv[1], REWARD_KEEPER_ARG)) return reward_keeper_main(argc, argv);`:
 * the rank starts its own executable (/proc/self/exe) as the keeper. */
int reward_keeper_main(int argc, char **argv);

#endif

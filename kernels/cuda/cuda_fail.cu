/* cuda_fail.cu — failing loudly, for every file of the CUDA backend: tcu_fail (the message
 * "tessera cuda: WHAT: MSG (file:line)", the hook a trainer sets to stop its other ranks, exit
 * status 1), tcu_msg (a message built only on the failure path) and tcu_set_fail_hook. Host code
 * only, in a file of its own so that the SIMT emulator's build (kernels/cuda_simt/) links the
 * same functions as the real backend. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cuda_internal.h"

static void (*fail_hook)(int status);

void tcu_set_fail_hook(void (*hook)(int status)) { fail_hook = hook; }

void tcu_fail(const char *what, const char *msg, const char *file, int line) {
    fflush(stdout);
    fprintf(stderr, "tessera cuda: %s: %s (%s:%d)\n", what ? what : "?", msg ? msg : "?",
            file ? file : "?", line);
    fflush(stderr);
    if (fail_hook) fail_hook(1);
    exit(1);
}

const char *tcu_msg(const char *fmt, ...) {
    static thread_local char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

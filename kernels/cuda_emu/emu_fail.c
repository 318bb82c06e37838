/* emu_fail.c — the host emulator of cuda_fail.cu (emu.h): tcu_set_fail_hook (the SIMT build
 * links cuda_fail.cu's instead, whose hook is the kernels'). */
#include "emu.h"

void tcu_set_fail_hook(void (*hook)(int status)) { emu_set_fail_hook(hook); }

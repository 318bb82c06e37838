/* emu_context.c — the host emulator of cuda_context.cu (emu.h): tcu_init, tcu_shutdown, and the
 * check of the ops whose real twins need the context. */
#include "emu.h"

static int emu_inits; /* tcu_init calls since tcu_shutdown (0: no context) */

void tcu_init(int device) {
    REQUIRE(device >= 0 && device < tcu_device_count(), "tcu_init",
            "device %d does not exist (%d devices)", device, tcu_device_count());
    emu_inits++;
}

/* (tcu_fp8_linear.c's scratch stays: host memory outlives a context here, and the backend's
 * tcu_shutdown frees it only because its device memory does not) */
void tcu_shutdown(void) { emu_inits = 0; }

void emu_need_context(const char *what) {
    REQUIRE(emu_inits > 0, what,
            "the CUDA backend is not initialised (call tcu_init(device) first)");
}

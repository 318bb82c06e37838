/* hc_config.h — thresholds from healthcheck.cfg (libconfig), one section per device.
 *
 *   format = 1;
 *   devices = ( { name = "CPU"; mode = "cpu"; match = "";
 *                 params = { gemm_n = 1024; quick_burn_s = 2.0; ... };
 *                 sgemm = { expected = 40.0; tolerance = 0.8; };  sgemm_verify = { max = 0; }; ... },
 *               { name = "H100"; mode = "gpu"; match = "H100";
 *                 params = { gemm_n = 8192; ... };  gemm_bf16 = { expected = 790.0; tolerance = 0.25; }; ... } );
 *
 * A section holds exactly the checks of its mode (hc_check_info.gpu). Every section is validated
 * (unknown keys, missing keys, ranges, a check of the other mode), whichever is used. The section
 * used is the first of the run's mode whose non-empty `match` occurs in the device name, else the
 * one of that mode with an empty `match` (the mode's default). Errors name file:line and the key.
 */
#ifndef TSR_HC_CONFIG_H
#define TSR_HC_CONFIG_H

#include "hc.h"

#define HC_CONFIG_FORMAT 1

/* Loads path and selects the section for (gpu, device). Returns 0, or 2 (could not run) after
 * printing the error with tsr_error. */
int hc_config_load(const char *path, int gpu, const char *device, hc_thresholds *out);

/* The config file used when --config is not given: $TESSERA_HC_CONFIG, else the first that exists
 * of EXE_DIR/../share/tessera/configs/healthcheck.cfg (installed), EXE_DIR/../configs/
 * healthcheck.cfg and EXE_DIR/../healthcheck/healthcheck.cfg (build trees). Returns 0, or 2 after
 * naming the paths it tried. */
int hc_config_default_path(char *buf, size_t n);

#endif

/* hc_fault.c — see hc_fault.h. */
#include "hc_fault.h"

#include <stdio.h>
#include <string.h>

#include "common.h"

const char *const hc_fault_names[HC_FAULT_COUNT] = {"slow_gemm", "corrupt_gemm", "low_membw",
                                                    "low_busbw", "missing_gpu"};
_Static_assert(sizeof hc_fault_names / sizeof hc_fault_names[0] == HC_FAULT_COUNT, "one per fault");

int hc_fault_parse(const char *spec, const char *node, int rank, unsigned *active) {
    *active = 0;
    if (!spec || !*spec) return 0;
    char buf[1024];
    if (tsr_snprintf(buf, sizeof buf, "%s", spec)) {
        tsr_error("TSR_HC_FAULT: longer than %zu characters", sizeof buf - 1);
        return 2;
    }
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *target = strchr(item, ':');
        if (target) *target++ = '\0';
        int k = 0;
        while (k < HC_FAULT_COUNT && strcmp(hc_fault_names[k], item)) k++;
        if (k == HC_FAULT_COUNT) {
            char names[256] = "";
            for (int j = 0; j < HC_FAULT_COUNT; j++) {
                size_t len = strlen(names);
                snprintf(names + len, sizeof names - len, "%s%s", j ? ", " : "", hc_fault_names[j]);
            }
            tsr_error("TSR_HC_FAULT: unknown fault '%s' (accepted: %s, each optionally :NODE or "
                      ":rank=N)", item, names);
            return 2;
        }
        int applies = 1;
        if (target) {
            int64_t r;
            if (!strncmp(target, "rank=", 5)) {
                if (tsr_parse_i64(target + 5, 0, 1 << 30, &r)) {
                    tsr_error("TSR_HC_FAULT: '%s:%s': expected rank=N with N >= 0", item, target);
                    return 2;
                }
                applies = r == rank;
            } else if (!*target) {
                tsr_error("TSR_HC_FAULT: '%s:': empty target (a node name or rank=N)", item);
                return 2;
            } else {
                applies = !strcmp(target, node);
            }
        }
        if (applies) *active |= 1u << k;
    }
    return 0;
}

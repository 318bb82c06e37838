/* jsonl.c — see jsonl.h. */
#include "jsonl.h"

#include <time.h>

void jsonl_end_record(FILE *f) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(f, ", \"time\": %lld.%03ld}\n", (long long)ts.tv_sec, ts.tv_nsec / 1000000);
    fflush(f);
}

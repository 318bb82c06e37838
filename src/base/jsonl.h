/* jsonl.h — the end of a JSON Lines record of a run's metrics.jsonl (docs/tracking.md): every
 * record's last field is its wall-clock time. Here, below every layer that writes a record (the
 * watchdog, the data loader's staging lines, the telemetry, the trainer), so that they all end
 * theirs the one way. */
#ifndef TSR_JSONL_H
#define TSR_JSONL_H

#include <stdio.h>

/* Ends a record: `, "time": UNIX_SECONDS.MMM}` (UTC, ms), a newline, a flush. */
void jsonl_end_record(FILE *f);

#endif

/* report.h — `tessera report RUN_DIR [--out DIR]`: a run's metrics.jsonl as plots and a summary.
 *
 * Writes DIR/loss.png (train and val loss vs step), DIR/throughput.png (tokens/s vs step),
 * DIR/mfu.png (MFU % vs step), drawn by gnuplot from DIR/plots.gp (data inline, so
 * `gnuplot plots.gp` redraws them), and DIR/summary.txt, also printed (docs/tracking.md).
 * Exit: 0 done; 1 usage; 2 metrics.jsonl missing or not JSON, no step lines, or gnuplot missing
 * or failing (the summary is still written then).
 */
#ifndef TSR_REPORT_H
#define TSR_REPORT_H

int cmd_report(int argc, char **argv);

#endif

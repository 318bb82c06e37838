/* report_compare.h — `tessera report --compare DIR...`: runs on shared axes and a table of their
 * final figures (report_compare.c; docs/tracking.md, docs/site.md "Sweeps"). */
#ifndef TSR_REPORT_COMPARE_H
#define TSR_REPORT_COMPARE_H

/* n run directories; out: where compare.gp, the PNGs and compare.txt go (NULL: the first run's
 * parent directory + /compare). 0, 1 (usage: fewer than 2 or more than 64 runs) or 2 (a run
 * without metrics.jsonl or step lines, gnuplot missing or failing: the table is still written). */
int report_compare(int n, char **dirs, const char *out);

#endif

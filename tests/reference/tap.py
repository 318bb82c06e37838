"""tap.py — the TAP output shared by the Python tests (tests/run.sh counts its lines)."""


class Tap:
    def __init__(self, plan):
        self.plan = plan
        self.n = self.failed = 0
        self.lines = []  # every ok / not ok line, for a summary file
        print(f"1..{plan}", flush=True)

    def ok(self, cond, what, skip=None):
        """One check; with skip (a reason) it is reported as skipped and never fails."""
        self.n += 1
        if not cond and not skip:
            self.failed += 1
        line = f"{'' if cond or skip else 'not '}ok {self.n} - {what}" + (f" # SKIP {skip}" if skip else "")
        self.lines.append(line)
        print(line, flush=True)
        return cond

    def diag(self, msg):
        for line in str(msg).splitlines():
            print(f"# {line}", flush=True)

    def fail_until(self, end, why):
        while self.n < end:
            self.ok(False, f"not reached: {why}")

    def run_cases(self, runs, count, check):
        """check(run) for each run, which makes count(run) checks; a run that raises is reported
        (its traceback) and fails the checks it did not reach."""
        import traceback
        for run in runs:
            end = self.n + count(run)
            try:
                check(run)
            except Exception:
                self.diag(traceback.format_exc())
            self.fail_until(end, f"{run['name']} stopped early")

    def status(self):
        """The exit status: 1 when a check failed or the count differs from the plan, else 0."""
        if self.n != self.plan:
            self.diag(f"planned {self.plan} checks, ran {self.n}")
            return 1
        return 1 if self.failed else 0

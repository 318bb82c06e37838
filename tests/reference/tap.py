"""tap.py — the TAP output shared by the Python tests (tests/run.sh counts its lines)."""
import traceback


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

    def section(self, checks, why, fn, *args, when=True):
        """fn(*args), which makes `checks` checks, if `when`: when it raises, its traceback is
        reported; the checks it did not reach (all of them when not `when`) fail ("not reached:
        why"). Returns what fn returned (None when it raised or did not run)."""
        end, result = self.n + checks, None
        try:
            if when:
                result = fn(*args)
        except Exception:
            self.diag(traceback.format_exc())
        self.fail_until(end, why)
        return result

    def run_all(self, fn, *args):
        """fn(self, *args) makes all the checks still to come (see section). The exit status
        (status)."""
        self.section(self.plan - self.n, "stopped early", fn, self, *args)
        return self.status()

    def run_cases(self, runs, count, check):
        """check(run) for each run, which makes count(run) checks (see section)."""
        for run in runs:
            self.section(count(run), f"{run['name']} stopped early", check, run)

    def status(self):
        """The exit status: 1 when a check failed or the count differs from the plan, else 0."""
        if self.n != self.plan:
            self.diag(f"planned {self.plan} checks, ran {self.n}")
            return 1
        return 1 if self.failed else 0

"""tap.py — the TAP output shared by the Python tests (tests/run.sh counts its lines)."""


class Tap:
    def __init__(self, plan):
        self.n = self.failed = 0
        print(f"1..{plan}", flush=True)

    def ok(self, cond, what):
        self.n += 1
        if not cond:
            self.failed += 1
        print(f"{'' if cond else 'not '}ok {self.n} - {what}", flush=True)
        return cond

    def diag(self, msg):
        for line in str(msg).splitlines():
            print(f"# {line}", flush=True)

    def fail_until(self, end, why):
        while self.n < end:
            self.ok(False, f"not reached: {why}")

"""tap - TAP output for the black-box tests in tests/http.

    from tap import T
    T.ok(cond, "name", detail)      # "ok N - name" or "not ok N - name" + detail
    T.skip("name", "why")           # "ok N - name # SKIP why"
    sys.exit(T.done())              # "P passed, F failed"; 1 on any failure

T is one Tap per process, so helper modules and the test share the count.
Detail (an error, a log) prints as "#   " lines, each cut at 300
characters: the first 20 lines, or the last ones with Tap(tail=25).
Standard library only.
"""

import sys

__all__ = ["Tap", "T"]


class Tap:
    def __init__(self, lines=20, tail=False):
        self.n = 0
        self.failed = 0
        self.lines = lines
        self.tail = tail

    def ok(self, cond, name, detail=""):
        self.n += 1
        if cond:
            print("ok %d - %s" % (self.n, name))
        else:
            self.failed += 1
            print("not ok %d - %s" % (self.n, name))
            text = str(detail).splitlines()
            for line in text[-self.lines:] if self.tail else text[:self.lines]:
                print("#   " + line[:300])
        sys.stdout.flush()
        return bool(cond)

    def skip(self, name, why):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, name, why))
        sys.stdout.flush()

    def done(self, plan=False):
        """Prints the plan ("1..N", with plan=True) and the summary line;
        returns the exit code."""
        if plan:
            print("1..%d" % self.n)
        print("%d passed, %d failed" % (self.n - self.failed, self.failed))
        return 1 if self.failed else 0


T = Tap()

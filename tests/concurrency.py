"""Running test code on several threads at once."""
from __future__ import annotations

import threading


def run_together(work, count: int) -> list[BaseException]:
    """Runs `work()` on `count` threads released at once; returns what they raised."""
    start = threading.Barrier(count)
    errors = []

    def worker():
        try:
            start.wait()
            work()
        except BaseException as e:  # reported to the caller
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors

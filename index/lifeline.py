"""Helper processes that die with the process they work for.

Big index updates chunk files on a ProcessPoolExecutor started through the
multiprocessing forkserver. Neither notices a SIGKILLed indexer (or `tachy serve`):
each worker blocks on its call queue, whose write end it holds itself, and keeps the
forkserver's "alive" pipe open, so worker, forkserver and resource tracker linger,
orphaned, for good. PR_SET_PDEATHSIG cannot help: it fires when the *thread* that
made a process exits, and a worker's parent is the forkserver, not the indexer.

So each of them watches the indexing process itself: a daemon thread waits on a
pidfd of it (readable once that process has exited) and ends this process at once
with os._exit. Workers start it in the pool's initializer; the forkserver imports
index.forkserver_lifeline as a preload module, which does the same for its parent.
Once they are gone, the resource tracker sees its pipe close and exits too.
"""

from __future__ import annotations

import os
import select
import threading
import time

POLL_S = 1.0  # without pidfds (old kernels, not Linux): how often to look


def die_with(pid: int) -> None:
    """End this process when process `pid` ends (at once if it has already)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):
        fd = None  # no pidfd here: poll instead

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])  # readable once the process has exited
        else:
            while _alive(pid):
                time.sleep(POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="tachy-lifeline", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

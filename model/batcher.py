"""Requests of concurrent sessions decoded together on one engine.

    batcher = Batcher(engine)
    future = batcher.submit(prompt_ids, SamplingParams(max_new_tokens=256), on_token=show)
    generation = future.result()            # or: await asyncio.wrap_future(future)

Each request waits in a queue; one worker thread starts an engine run (Engine.run,
continuous batching) with up to engine.max_batch waiting requests, whatever their
sampling settings (the engine takes one SamplingParams per prompt), so sessions that ask
at the same time share every decode step, and each keeps its rows of the prefix cache
between turns. Each request resolves the moment its own generation ends, and one that
arrives while a run goes on joins it as soon as a row is free: an agent whose turn
ended runs its tools and asks again while the others still decode, instead of the
whole batch waiting for its longest row. A queued `call` (new weights) stops new
requests from joining, so it runs as soon as the run's rows are done. A request
cancelled before it starts resolves to None; one cancelled during it stops at the next
token.

`tachy model serve`, the `local:` policy and the RL inference actors all go through it.

All of an engine's torch work belongs on the batcher's thread: give the Batcher the
function that loads the engine (it runs there), and run other work on the model, such
as new weights, with `call`. On this 2-core machine, decoding on a thread other than
the one that loaded the model ran ~35% slower (measured: 7-9 against 11-13 tokens/s
for tachy's model; two OpenMP thread teams then contend for the cores).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from model.generate import Engine, Job, SamplingParams

OnToken = Callable[[int, int, str], None]  # (row, token id, new text); row is always 0


@dataclass
class _Request:
    prompt: list[int]
    params: SamplingParams
    on_token: OnToken | None
    cancel: threading.Event
    future: Future = field(default_factory=Future)


class Batcher:
    def __init__(self, engine: Engine | Callable[[], Engine]) -> None:
        """`engine`, or a function that makes it, called at once on the batcher's own
        thread (wait for it with `ready`)."""
        self._queue: list[_Request | tuple[Callable[[], Any], Future]] = []
        self._ready = threading.Condition()
        self._closed = False
        self._worker: threading.Thread | None = None
        self._loaded: Future = Future()
        self.calls = 0  # engine calls made,
        self.rows = 0  # the requests they served,
        self.busy_s = 0.0  # and the seconds they took
        self._running: list[_Request] = []  # the requests of the engine run going on
        if hasattr(engine, "generate"):
            self.engine = engine
            self._loaded.set_result(engine)
        else:
            self._start(engine)

    def ready(self) -> Engine:
        """The engine, once made (raises what making it raised)."""
        return self._loaded.result()

    def _start(self, make: Callable[[], Engine] | None = None) -> None:
        self._worker = threading.Thread(
            target=self._serve, args=(make,), name="tachy-engine", daemon=True
        )
        self._worker.start()

    def call(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the batcher's thread between engine calls (new weights)."""
        future: Future = Future()
        with self._ready:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._queue.append((fn, future))
            if self._worker is None:
                self._start()
            self._ready.notify()
        return future

    def submit(
        self,
        prompt: list[int],
        params: SamplingParams,
        *,
        on_token: OnToken | None = None,
        cancel: threading.Event | None = None,
    ) -> Future:
        """Queue one prompt; the Future resolves to its Generation (None if cancelled
        before its engine call began) or to the engine's error."""
        request = _Request(list(prompt), params, on_token, cancel or threading.Event())
        with self._ready:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._queue.append(request)
            if self._worker is None:
                self._start()
            self._ready.notify()
        return request.future

    @property
    def waiting(self) -> int:
        """Requests queued for the next engine call."""
        return len(self._queue)

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop taking requests; those still waiting resolve to None. Waits for the
        thread to end (a call in flight first): a process must not exit while that
        thread is inside torch, which aborts it ("terminate called without an active
        exception")."""
        with self._ready:
            self._closed = True
            waiting, self._queue = self._queue, []
            self._ready.notify()
        for item in waiting:
            (item.future if isinstance(item, _Request) else item[1]).set_result(None)
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout_s)

    def _next_batch(self) -> list[_Request] | None:
        with self._ready:
            while not self._queue and not self._closed:
                self._ready.wait()
            if self._closed:
                return None
            if isinstance(self._queue[0], tuple):  # a call: alone, in its turn
                fn, future = self._queue.pop(0)
                batch = None
            else:
                batch = self._take(self.engine.max_batch)
        if batch is None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn())
                except BaseException as exc:
                    future.set_exception(exc)
            return []
        return self._started(batch)

    def _take(self, n: int) -> list[_Request]:
        """Up to n requests from the front of the queue, stopping at a call (hold the
        lock)."""
        taken: list[_Request] = []
        while self._queue and len(taken) < n and not isinstance(self._queue[0], tuple):
            taken.append(self._queue.pop(0))  # type: ignore[arg-type]
        return taken

    @staticmethod
    def _started(requests: list[_Request]) -> list[_Request]:
        """The requests still wanted, marked running; the cancelled ones resolve to None."""
        live = []
        for request in requests:
            if request.cancel.is_set() or not request.future.set_running_or_notify_cancel():
                if not request.future.done():
                    request.future.set_result(None)
            else:
                live.append(request)
        return live

    def _more(self, n: int) -> list[Job]:
        """Requests that join the engine run going on (Engine.run asks when rows are free)."""
        with self._ready:
            taken = [] if self._closed else self._take(n)
        return [self._job(r) for r in self._started(taken)]

    def _job(self, request: _Request) -> Job:
        self.rows += 1
        self._running.append(request)
        report = request.on_token
        return Job(
            request.prompt,
            request.params,
            done=request.future.set_result,
            fail=request.future.set_exception,
            on_token=None if report is None else lambda token, text: report(0, token, text),
            cancel=request.cancel,
        )

    def _serve(self, make: Callable[[], Engine] | None) -> None:
        if make is not None:
            try:
                self.engine = make()
            except BaseException as exc:
                with self._ready:
                    self._closed = True
                self._loaded.set_exception(exc)
                return
            self._loaded.set_result(self.engine)
        while (batch := self._next_batch()) is not None:
            if batch:
                self._run(batch)

    def _run(self, batch: list[_Request]) -> None:
        started = time.perf_counter()
        self._running: list[_Request] = []
        try:
            self.engine.run([self._job(r) for r in batch], self._more)
        except BaseException as exc:  # every session not yet answered gets the error
            for request in self._running:
                if not request.future.done():
                    request.future.set_exception(exc)
        finally:
            self.calls += 1
            self.busy_s += time.perf_counter() - started

"""run_terminal_cmd: shell commands in the sandbox."""

from __future__ import annotations

import signal
from typing import Annotated

import msgspec
from msgspec import Meta

from agent.render import clean_terminal_text
from agent.sandbox import CommandResult
from agent.tools.base import EVERYTHING, Access, Tool, ToolContext, ToolError
from index.statedir import StateDirError

# What the model sees of a command's output: the start and the end.
MAX_OUTPUT_CHARS = 24_000


def format_bytes(count: int) -> str:
    """A byte count for people: '64 MiB', '512 KiB', '1000 bytes'."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count} bytes"


def describe_output(result: CommandResult) -> str:
    """The output the model sees: all of it, or its start and end around one notice
    that counts every byte left out (by the sandbox's capture and by this cap)."""
    half = MAX_OUTPUT_CHARS // 2
    omitted = result.omitted_bytes
    if omitted <= 0:  # head and tail are contiguous: clean them as one text
        full = clean_terminal_text(result.head + result.tail)
        if len(full) <= MAX_OUTPUT_CHARS:
            head, tail = full, ""
        else:
            head, tail = full[:half], full[-half:]
            omitted = len(full[half:-half].encode("utf-8"))
    else:
        head, tail = clean_terminal_text(result.head), clean_terminal_text(result.tail)
        if len(head) > half:
            omitted += len(head[half:].encode("utf-8"))
            head = head[:half]
        keep = MAX_OUTPUT_CHARS - len(head)
        if len(tail) > keep:
            omitted += len(tail[:-keep].encode("utf-8"))
            tail = tail[-keep:]
    if omitted > 0:
        text = f"{head}\n[... {omitted} bytes of output omitted ...]\n{tail}"
    else:
        text = head
    text = text.strip("\n")
    return text if text.strip() else "(the command produced no output)"


class RunTerminalCmd(Tool):
    """Run a shell command (sh -c) in the workspace root.

    The command runs in a sandbox: no network, the workspace writable, the rest of the
    machine read-only, a private /tmp. It is killed, with every process it started,
    when it exceeds timeout_s. Output (stdout and stderr together) is capped: the
    start and the end are kept. Processes it leaves running are stopped when it ends;
    for servers and watchers set background to true: the command keeps running and its
    output goes to a log file you can read with read_file.
    """

    name = "run_terminal_cmd"

    class Args(msgspec.Struct, forbid_unknown_fields=True):
        command: Annotated[str, Meta(description="the shell command line")]
        timeout_s: Annotated[
            Annotated[float, Meta(gt=0)] | None,
            Meta(description="seconds before the command is killed (default 60, at most 600)"),
        ] = None
        background: Annotated[
            bool, Meta(description="start it in the background and return at once")
        ] = False

    def access(self, args: Args) -> tuple[Access, Access]:
        return EVERYTHING, EVERYTHING

    async def run(self, args: Args, ctx: ToolContext) -> str:
        sandbox = ctx.sandbox
        await sandbox.approve(args.command)
        notice = (
            ""
            if sandbox.bwrap
            else (
                "[not sandboxed: bubblewrap is not installed, so the command ran as a plain "
                "subprocess with resource limits]\n"
            )
        )
        if args.background:
            try:
                job = await sandbox.start_job(args.command)
            except StateDirError as exc:
                raise ToolError(f"the background job was not started: {exc.strerror}") from None
            return notice + (
                f"Started background job {job.id}. Its output is written to {job.log_path}; "
                "read it with read_file. It is stopped when this agent run ends."
            )
        limit = min(
            args.timeout_s or sandbox.config.default_timeout_s, sandbox.config.max_timeout_s
        )
        result = await sandbox.run(args.command, limit)
        output = describe_output(result)
        if result.timed_out:
            status = (
                f"The command did not finish within {limit:g} s and was killed, with every "
                "process it started. Output before it was killed:"
            )
        elif result.disk_quota_hit:
            status = f"The command was {sandbox.disk_quota_notice()}. Output before it was stopped:"
        elif result.output_overflow:
            status = (
                f"The command printed more than {format_bytes(sandbox.config.max_output_bytes)} "
                "and was killed. The start and end of its output:"
            )
        elif result.exit_code is not None and result.exit_code < 0:
            name = signal.Signals(-result.exit_code).name
            status = f"The command was killed by signal {name} (out of memory or process limits?)."
        else:
            status = f"Exit code: {result.exit_code}"
        said = "".join(f"\n{line}" for line in sandbox.take_notices())
        return f"{notice}{status}\n{output}{said}"

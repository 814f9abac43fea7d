"""run_terminal_cmd: shell commands in the sandbox."""

from __future__ import annotations

import signal
from typing import Annotated

import msgspec
from msgspec import Meta

from agent.render import cap_middle, clean_terminal_text
from agent.sandbox import CommandResult
from agent.tools.base import EVERYTHING, Access, Tool, ToolContext

# What the model sees of a command's output: the start and the end.
MAX_OUTPUT_CHARS = 24_000


def describe_output(result: CommandResult) -> str:
    text = clean_terminal_text(result.head)
    if result.omitted_bytes > 0:
        text += f"\n[... {result.omitted_bytes} bytes of output omitted ...]\n"
    text += clean_terminal_text(result.tail)
    text = cap_middle(text.strip("\n"), MAX_OUTPUT_CHARS)
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
    read_only = False

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
        notice = (
            ""
            if sandbox.bwrap
            else (
                "[not sandboxed: bubblewrap is not installed, so the command ran as a plain "
                "subprocess with resource limits]\n"
            )
        )
        if args.background:
            job = await sandbox.start_job(args.command)
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
        elif result.output_overflow:
            status = (
                f"The command printed more than {sandbox.config.max_output_bytes // 1024 // 1024} MiB "
                "and was killed. The start and end of its output:"
            )
        elif result.exit_code is not None and result.exit_code < 0:
            name = signal.Signals(-result.exit_code).name
            status = f"The command was killed by signal {name} (out of memory or process limits?)."
        else:
            status = f"Exit code: {result.exit_code}"
        return f"{notice}{status}\n{output}"

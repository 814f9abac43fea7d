"""The `tachy` command line.

Human output (progress, diffs, the streamed answer) goes to stderr; what a script
consumes goes to stdout. Exit codes of `tachy agent`: 0 the agent finished, 1 the
policy failed, 2 bad usage, 3 the turn limit was reached, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from importlib.metadata import PackageNotFoundError, version

from agent import events as ev
from agent.cliargs import command_group, path_arg
from agent.executor import Executor
from agent.lints import LintRunner
from agent.policy import DEFAULT_POLICY, PolicyError, load_policy, register_policy
from agent.sandbox import Sandbox, SandboxConfig
from agent.tools import ToolContext
from agent.workspace import Workspace, WorkspaceError
from server import index_commands

EXIT_CODES = {"end_turn": 0, "error": 1, "max_turns": 3, "cancelled": 130}


def _version() -> str:
    try:
        return version("tachy")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tachy",
        description="tachy: a fast coding agent and the language server that hosts it.",
    )
    parser.add_argument("--version", action="version", version=f"tachy {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    agent = commands.add_parser(
        "agent",
        help="run the agent on a task in a workspace",
        description=(
            "Run the agent on a task. Progress (each tool call, each edit as a diff) is shown "
            "on stderr; the final answer is printed on stdout."
        ),
    )
    agent.add_argument("prompt", metavar="PROMPT", help="the task, in plain words")
    agent.add_argument(
        "--workspace",
        default=".",
        type=path_arg,
        metavar="DIR",
        help="the repository to work in (default: .)",
    )
    agent.add_argument(
        "--policy",
        default=os.environ.get("TACHY_POLICY"),
        metavar="SPEC",
        help=(
            "the model: openai:BASE_URL#MODEL, local:CHECKPOINT_DIR or replay:FILE.jsonl "
            "(default: $TACHY_POLICY, else local:, the bundled model); "
            "openai:BASE_URL#MODEL?tools=native uses the server's native function calling "
            "(or set TACHY_TOOL_CALLS=native)"
        ),
    )
    agent.add_argument(
        "--transcript", type=path_arg, metavar="FILE", help="write every event to FILE as JSONL"
    )
    agent.add_argument(
        "--max-turns", type=int, default=50, metavar="N", help="stop after N turns (default 50)"
    )
    agent.add_argument(
        "--max-tokens",
        type=int,
        metavar="N",
        help="at most N tokens per model turn (default: the policy's; 1024 for local:)",
    )
    agent.add_argument(
        "--sandbox",
        choices=("auto", "bubblewrap", "none"),
        default="auto",
        help="how commands are isolated (default: bubblewrap when installed)",
    )
    agent.add_argument(
        "--allow-secrets", action="store_true", help="let the agent see .env files and keys"
    )
    agent.add_argument("--quiet", action="store_true", help="show no progress on stderr")
    index_commands.add_parsers(commands)

    serve = commands.add_parser(
        "serve",
        help="run the language server (LSP on stdio) for an editor",
        description=(
            "Run the tachy language server. Editors start it and talk LSP on its stdin and "
            "stdout; --tcp serves one client on HOST:PORT instead. Logs go to stderr."
        ),
    )
    transport = serve.add_mutually_exclusive_group()
    transport.add_argument(
        "--tcp", metavar="HOST:PORT", help="listen on a TCP port instead of stdio"
    )
    transport.add_argument(
        "--stdio",
        action="store_true",
        help="speak LSP on stdin/stdout (the default; accepted because many clients pass it)",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="warning",
        help="how much to log on stderr (default: warning)",
    )
    acp_parser = commands.add_parser(
        "acp",
        help="run tachy as an Agent Client Protocol agent on stdio (Zed, JetBrains, Neovim)",
        description=(
            "Speak the Agent Client Protocol on stdin/stdout, for editors that drive agents "
            "over ACP (Zed, JetBrains IDEs, Neovim's CodeCompanion and avante, Emacs). Each "
            "session works in the directory the editor gives it, asks permission before "
            "each edit and command (unless its approval option is auto), and reads unsaved "
            "buffers through the editor. Logs go to stderr."
        ),
    )
    acp_parser.add_argument(
        "--policy",
        default=os.environ.get("TACHY_POLICY"),
        metavar="SPEC",
        help=(
            "the model, as for tachy agent (default: $TACHY_POLICY, else the policy in "
            "~/.config/tachy/settings.json, else local:)"
        ),
    )
    acp_parser.add_argument(
        "--workspace",
        type=path_arg,
        metavar="DIR",
        help="the directory of a session whose client gives none",
    )
    mcp = commands.add_parser(
        "mcp",
        help="serve the repository's index to other agents (MCP on stdio)",
        description=(
            "Run an MCP server on stdin/stdout that gives other agents (Claude Code, Codex, "
            "Cursor, ...) tachy's codebase_search and find_symbol over the repository. "
            "Results are those of tachy's own agent tool; ignored and secret files stay "
            "hidden. The index is built on the first call and kept fresh. Logs go to stderr."
        ),
    )
    mcp.add_argument(
        "--workspace",
        default=".",
        type=path_arg,
        metavar="DIR",
        help="the repository to serve (default: .)",
    )
    add_model_parsers(commands)
    from training.tasks import cli as tasks_cli  # its parser only; the builders load on use

    tasks_cli.add_parsers(commands)
    from training import cli as train_cli  # stdlib only at import: torch loads when a command runs

    train_cli.add_parsers(commands)
    from training.eval import cli as eval_cli  # stdlib only at import, like the others

    eval_cli.add_parser(commands)
    return parser


def add_model_parsers(commands: argparse._SubParsersAction) -> None:
    model_commands = command_group(
        commands,
        "model",
        help="serve or inspect a model checkpoint",
        description="Serve a checkpoint over an OpenAI-compatible HTTP API, or describe it.",
    )
    serve = model_commands.add_parser(
        "serve",
        help="serve a checkpoint as an OpenAI-compatible chat-completions endpoint",
        description=(
            "Serve CHECKPOINT_DIR (a tachy checkpoint, a part of tachy's model, or a Hugging "
            "Face directory) "
            "on GET /v1/models and POST /v1/chat/completions (streamed or not). Point the "
            "agent at it with --policy openai:http://HOST:PORT/v1#MODEL_NAME."
        ),
    )
    serve.add_argument("checkpoint", type=path_arg, metavar="CHECKPOINT_DIR")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    serve.add_argument(
        "--max-batch", type=int, default=8, metavar="N", help="the engine's batch (default 8)"
    )
    serve.add_argument(
        "--max-seq", type=int, default=4096, metavar="N", help="context length (default 4096)"
    )
    serve.add_argument(
        "--tokenizer",
        type=path_arg,
        metavar="PATH",
        help="tokenizer.json or its directory (default: the one in CHECKPOINT_DIR)",
    )
    serve.add_argument("--name", help="the model name clients use (default: the directory name)")
    serve.add_argument(
        "--compile",
        action="store_true",
        help="compile the decode step with torch.compile: several times faster decoding of "
        "small models on a CPU, after seconds of compiling on the first requests (needs g++)",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="warning",
        help="how much to log on stderr (default: warning)",
    )
    info = model_commands.add_parser(
        "info",
        help="describe a checkpoint: config, parameter counts, precision",
        description="Describe CHECKPOINT_DIR from its metadata (the weights are not loaded).",
    )
    info.add_argument("checkpoint", type=path_arg, metavar="CHECKPOINT_DIR")
    info.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    imp = model_commands.add_parser(
        "import",
        help="import a GGUF file or a Hugging Face model, optionally upcycled into our MoE",
        description=(
            "Read SOURCE (a .gguf file, read with the gguf package: tensors dequantized, the "
            "tokenizer and chat template rebuilt from its metadata; or a Hugging Face "
            "checkpoint directory of Llama, Qwen2, Qwen3 or Qwen3-MoE) and write it to DIR "
            "in tachy's checkpoint format, with its tokenizer. --upcycle EXPERTS:TOP_K turns "
            "each dense MLP into EXPERTS copies of it behind a router picking TOP_K, which "
            "computes what the dense model computes until it is trained. SOURCE may also be "
            "a part of tachy's model (a directory with part.json, such as "
            "model/weights/tachy-smollm2), written out assembled with its base. --part "
            "writes only the part a new model starts from (its routers) for the installed "
            "base instead: a few hundred KB that `local:DIR` assembles."
        ),
    )
    imp.add_argument(
        "source",
        nargs="?",
        type=path_arg,
        metavar="SOURCE",
        help="a .gguf file or HF dir (default: the SmolLM2 base that setup installs)",
    )
    imp.add_argument("--out", required=True, type=path_arg, metavar="DIR", help="checkpoint dir")
    imp.add_argument("--upcycle", metavar="EXPERTS:TOP_K", help="upcycle the dense MLPs, e.g. 8:2")
    imp.add_argument(
        "--precision",
        choices=("mxfp8", "fp32"),
        default="mxfp8",
        help="MXFP8 experts quantized for sampling (default), or every weight fp32",
    )
    imp.add_argument(
        "--part",
        action="store_true",
        help="write only our part for the installed base (needs --upcycle, no SOURCE)",
    )
    compact = model_commands.add_parser(
        "compact",
        help="write a part of tachy's model again with its adapters in bfloat16 (half size)",
        description=(
            "Write PART_DIR (a part of tachy's model, a directory with part.json) to DIR with "
            "its low-rank deltas and the experts' adapters stored in bfloat16: about half "
            "the bytes, for a part trained in several stages whose deltas have outgrown "
            "the repository's 30 MB. Norms and routers stay float32. The compact part's "
            "model differs from the original's by that rounding: evaluate it as itself."
        ),
    )
    compact.add_argument("part", type=path_arg, metavar="PART_DIR")
    compact.add_argument("--out", required=True, type=path_arg, metavar="DIR", help="new part dir")


def run_model(args: argparse.Namespace) -> int:
    import json
    import logging

    from model import serve as model_serve  # torch: only for these commands
    from model.hf import CheckpointError
    from model.tokenizer import TokenizerError

    if args.model_command == "info":
        try:
            info = model_serve.checkpoint_info(args.checkpoint)
        except CheckpointError as exc:
            print(f"tachy: {exc}", file=sys.stderr)
            return 2
        print(json.dumps(info, indent=2) if args.json else model_serve.format_info(info))
        return 0
    if args.model_command == "import":
        return import_checkpoint(args)
    if args.model_command == "compact":
        return compact_part(args)
    if not 0 <= args.port < 65536 or args.max_batch < 1 or args.max_seq < 2:
        print("tachy: need 0 <= --port < 65536, --max-batch >= 1, --max-seq >= 2", file=sys.stderr)
        return 2
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, args.log_level.upper()),
        format="tachy %(levelname)s %(name)s: %(message)s",
    )
    try:
        from agent import chat_tools

        server = model_serve.build_server(
            args.checkpoint,
            tokenizer=args.tokenizer,
            max_batch=args.max_batch,
            max_seq=args.max_seq,
            name=args.name,
            compile=args.compile,
            chat_tools=chat_tools,
        )
    except (CheckpointError, TokenizerError, FileNotFoundError, ValueError) as exc:
        print(f"tachy: cannot load {args.checkpoint}: {exc}", file=sys.stderr)
        return 2

    def ready(port: int) -> None:
        url = f"http://{args.host}:{port}/v1"
        print(
            f"tachy: serving {server.model_name} on {url} "
            f"(use --policy openai:{url}#{server.model_name})",
            file=sys.stderr,
            flush=True,
        )

    try:
        asyncio.run(model_serve.serve(server, args.host, args.port, ready))
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"tachy: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


def import_checkpoint(args: argparse.Namespace) -> int:
    """tachy model import: SOURCE -> our checkpoint in --out."""
    import model as tachy_model
    from model.importer import import_model
    from model.upcycle import Upcycle

    if args.part and (args.source is not None or not args.upcycle):
        print("tachy: --part needs --upcycle and no SOURCE (it is made for the installed base)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        spec = Upcycle.parse(args.upcycle) if args.upcycle else None
        if args.source is None:
            from model.base import base_gguf

            args.source = base_gguf()
    except (ValueError, tachy_model.CheckpointError) as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    if args.out.exists() and any(args.out.iterdir()):
        print(f"tachy: {args.out} exists and is not empty; choose a new --out", file=sys.stderr)
        return 2
    print(f"tachy: reading {args.source} …", file=sys.stderr, flush=True)
    if args.part:
        from model.part import initial_part, write_part

        write_part(initial_part(spec, args.source), args.out, spec, args.source)
        size = (args.out / "part.safetensors").stat().st_size
        print(f"tachy: wrote the part {args.out} ({size:,} bytes)", file=sys.stderr)
        return 0
    try:
        model, tokenizer = import_model(args.source, spec, args.precision)
    except (tachy_model.CheckpointError, FileNotFoundError) as exc:
        print(f"tachy: cannot import {args.source}: {exc}", file=sys.stderr)
        return 2
    tachy_model.save(model, args.out, tokenizer)
    c = model.config
    shape = f"{c.num_experts} experts, top-{c.num_experts_per_tok}" if c.has_moe else "dense"
    print(
        f"tachy: wrote {args.out} ({c.num_params / 1e6:.0f}M parameters, "
        f"{c.num_active_params / 1e6:.0f}M active; {shape}; {model.precision})",
        file=sys.stderr,
    )
    return 0


def compact_part(args: argparse.Namespace) -> int:
    """tachy model compact: PART_DIR -> the same part, adapters in bfloat16, in --out."""
    from model.hf import CheckpointError
    from model.part import compact_part as write_compact

    if args.out.exists() and any(args.out.iterdir()):
        print(f"tachy: {args.out} exists and is not empty; choose a new --out", file=sys.stderr)
        return 2
    try:
        write_compact(args.part, args.out)
    except CheckpointError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    before = (args.part / "part.safetensors").stat().st_size
    after = (args.out / "part.safetensors").stat().st_size
    print(f"tachy: wrote {args.out} ({after:,} bytes; {before:,} before)", file=sys.stderr)
    return 0


class Progress:
    """Shows a run on stderr: prose as it streams, each call as it starts and ends."""

    def __init__(self, stream=sys.stderr) -> None:
        self.out = stream
        self._pending = ""
        self._in_call = False
        self._calls: dict[str, str] = {}

    def text(self, chunk: str) -> None:
        # Show the model's prose; its tool-call blocks are shown as calls instead.
        self._pending += chunk
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self._line(line)

    def _line(self, line: str) -> None:
        stripped = line.strip()
        if stripped.startswith("<tool_call"):
            self._in_call = True
        if not self._in_call and stripped:
            print(f"  {line}", file=self.out, flush=True)
        if stripped.startswith("</tool_call>"):
            self._in_call = False

    def event(self, event: ev.Event) -> None:
        if isinstance(event, ev.Assistant):
            if self._pending:
                self._line(self._pending)
            self._pending, self._in_call = "", False
        elif isinstance(event, ev.ToolCall):
            summary = ", ".join(f"{k}={_short(v)}" for k, v in event.args.items())
            self._calls[event.call_id] = summary
            print(f"→ {event.tool}({summary})", file=self.out, flush=True)
        elif isinstance(event, ev.ToolResult):
            mark = "✗" if event.is_error else "✓"
            ms = event.meta.get("duration_ms", 0)
            print(f"{mark} {event.tool} [{ms:.0f} ms]", file=self.out, flush=True)
            if event.is_error:
                print(_indent(event.content.splitlines()[0]), file=self.out)
            elif event.tool == "edit_file":
                print(_indent(event.content), file=self.out)
        elif isinstance(event, ev.Todos):
            for todo in event.todos:
                mark = {"completed": "[x]", "in_progress": "[~]"}.get(todo.status, "[ ]")
                print(f"  {mark} {todo.content}", file=self.out)
        elif isinstance(event, ev.Final) and event.stop_reason != "end_turn":
            detail = event.meta.get("error", "")
            print(
                f"■ run ended: {event.stop_reason}{': ' + detail if detail else ''}", file=self.out
            )


def _short(value: object, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


async def run_agent(args: argparse.Namespace) -> int:
    try:
        workspace = Workspace(args.workspace, allow_secrets=args.allow_secrets)
    except WorkspaceError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    if not args.policy:
        args.policy = DEFAULT_POLICY
        print(
            "tachy: no --policy given: using the model bundled with tachy (local:, SmolLM2-135M "
            "upcycled into our MoE and trained on small bug fixes), which runs offline on a "
            "CPU and fixes some bugs whose traceback names the fix, but rarely a real task; "
            "pass --policy openai:BASE_URL#MODEL (vLLM, llama.cpp, Ollama, ...) for a "
            "capable model",
            file=sys.stderr,
        )
    if args.max_turns < 1 or (args.max_tokens is not None and args.max_tokens < 1):
        print("tachy: --max-turns and --max-tokens must be at least 1", file=sys.stderr)
        return 2
    try:
        policy = load_policy(args.policy, max_tokens=args.max_tokens)
    except PolicyError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        return 2
    use_bwrap = {"auto": None, "bubblewrap": True, "none": False}[args.sandbox]
    try:
        sandbox = Sandbox(workspace, SandboxConfig(use_bubblewrap=use_bwrap))
    except RuntimeError as exc:
        print(f"tachy: {exc}", file=sys.stderr)
        await policy.aclose()
        return 2
    from index.indexer import FreshIndex  # numpy, tree-sitter: only when a run starts

    # Built by the run's own rules, which only tighten: nothing it hid is indexed.
    search_index = FreshIndex(workspace.root, rules=workspace.rules)
    ctx = ToolContext(
        workspace=workspace,
        sandbox=sandbox,
        linters=LintRunner(workspace, sandbox=sandbox),
        index=search_index,
    )
    writer = None
    if args.transcript:
        try:
            writer = ev.TranscriptWriter(args.transcript)
        except OSError as exc:
            print(
                f"tachy: cannot write the transcript {args.transcript}: {exc.strerror}",
                file=sys.stderr,
            )
            await policy.aclose()
            return 2
    progress = None if args.quiet else Progress()

    def on_event(event: ev.Event) -> None:
        if writer is not None:
            writer(event)
        if progress is not None:
            progress.event(event)

    executor = Executor(
        ctx,
        policy,
        max_turns=args.max_turns,
        on_event=on_event,
        on_text=progress.text if progress else None,
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, executor.cancel)
    loop.add_signal_handler(signal.SIGTERM, executor.cancel)
    if progress is not None and not sandbox.bwrap:
        print("tachy: bubblewrap is not installed; commands run unsandboxed", file=sys.stderr)
    try:
        result = await executor.run(args.prompt)
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        loop.remove_signal_handler(signal.SIGTERM)
        await policy.aclose()
        search_index.close()
        if writer is not None:
            writer.close()
    if result.final_text:
        print(result.final_text)
    changed = workspace.changed_files()
    if changed and progress is not None:
        print(f"changed: {', '.join(changed)}", file=sys.stderr)
    return EXIT_CODES[result.stop_reason]


def run_serve(args: argparse.Namespace) -> int:
    import logging

    from server.lsp import serve  # pygls: only for the server

    if args.tcp is not None:
        _, sep, port = args.tcp.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            print(
                f"tachy: --tcp wants HOST:PORT, e.g. 127.0.0.1:2087, not {args.tcp!r}",
                file=sys.stderr,
            )
            return 2
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, args.log_level.upper()),
        format="tachy %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("pygls").setLevel(max(logging.WARNING, logging.root.level))
    try:
        return serve(args.tcp)
    except OSError as exc:
        if args.tcp is None:
            raise
        # Binding failed (the port is taken, the address is not this machine's).
        print(f"tachy: cannot listen on {args.tcp}: {exc.strerror or exc}", file=sys.stderr)
        return 2


def run_acp(args: argparse.Namespace) -> int:
    import logging

    from server.acp_agent import serve_stdio  # the ACP SDK: only for this command

    logging.basicConfig(
        stream=sys.stderr, level=logging.WARNING, format="tachy %(levelname)s %(name)s: %(message)s"
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_stdio(args.policy, args.workspace))
    return 0


def run_mcp(args: argparse.Namespace) -> int:
    root = args.workspace  # a Path (path_arg)
    if not root.is_dir():
        print(f"tachy: {root} is not a directory", file=sys.stderr)
        return 2
    from server.mcp_index import serve_stdio  # the MCP SDK: only for this command

    with contextlib.suppress(KeyboardInterrupt):  # the client's Ctrl-C: a clean stop
        asyncio.run(serve_stdio(root))
    return 0


def _local_policy(checkpoint_dir: str, max_tokens: int | None = None, runs: int = 1):
    """The local: policy kind: our own model, whose package (and torch) is imported only
    when such a policy is made, so that `tachy serve` starts without them."""
    try:
        from model.policy import local_policy
    except ImportError as exc:
        raise PolicyError(
            f"local policies need tachy's model package and torch, which cannot be imported: {exc}"
        ) from None
    return local_policy(checkpoint_dir, max_tokens, runs)


def main(argv: list[str] | None = None) -> int:
    # The policy kinds tachy adds to the agent's own (replay:, openai:).
    register_policy("local", _local_policy)
    args = build_parser().parse_args(argv)
    if args.command == "agent":
        try:
            return asyncio.run(run_agent(args))
        except KeyboardInterrupt:
            # Ctrl-C before the run installed its handler (or while it shut down).
            print("tachy: interrupted", file=sys.stderr)
            return 130
    if args.command == "index":
        return index_commands.run_index(args)
    if args.command == "search":
        return index_commands.run_search(args)
    if args.command == "serve":
        return run_serve(args)
    if args.command == "mcp":
        return run_mcp(args)
    if args.command == "acp":
        return run_acp(args)
    if args.command == "model":
        return run_model(args)
    if args.command == "tasks":
        from training.tasks import cli as tasks_cli

        return tasks_cli.run(args)
    if args.command == "train":
        from training import cli as train_cli

        return train_cli.run(args)
    if args.command == "eval":
        from training.eval import cli as eval_cli

        return eval_cli.run(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())

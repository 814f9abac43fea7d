"""The VS Code extension in a real VS Code against the real server: code-server (VS
Code in the browser, from extensions/vscode/e2e/node_modules) with the packaged
.vsix installed, a fresh profile and a small workspace, driven through headless
chromium by extensions/vscode/e2e/e2e.mjs (Playwright), with `tachy serve` from
this virtual environment and a replayed agent.

scripts/setup-e2e installs what it needs; without it the test is skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "extensions" / "vscode"
E2E = EXT / "e2e"
CODE_SERVER = E2E / "node_modules" / ".bin" / "code-server"
PLAYWRIGHT = E2E / "node_modules" / "playwright-core" / "package.json"
TACHY = Path(sys.executable).parent / "tachy"
NODE = shutil.which("node")
NPM = shutil.which("npm")
CHROMIUM = os.environ.get("TACHY_E2E_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None
)
VERSION = json.loads((EXT / "package.json").read_text())["version"]
MARKER = "TACHY_E2E_RUN"  # in the environment of every process the test starts

_missing = [
    why
    for why, bad in (
        ("node is not installed", NODE is None),
        ("code-server is not installed (run scripts/setup-e2e)", not CODE_SERVER.exists()),
        ("playwright-core is not installed (run scripts/setup-e2e)", not PLAYWRIGHT.exists()),
        ("chromium is not installed (run scripts/setup-e2e)", CHROMIUM is None),
        (f"{TACHY} is missing (run scripts/setup)", not TACHY.exists()),
    )
    if bad
]
needs_e2e = pytest.mark.skipif(bool(_missing), reason="; ".join(_missing))

CALC = 'def add(a, b):\n    """Add two numbers."""\n    return a - b\n'
FIXED = CALC.replace("a - b", "a + b")
EDIT = (
    '<tool_call name="edit_file">\n<path>calc.py</path>\n'
    "<old_string>\n    return a - b\n</old_string>\n"
    "<new_string>\n    return a + b\n</new_string>\n</tool_call>"
)
SLOW = '<tool_call name="run_terminal_cmd">\n<command>sleep 30</command>\n</tool_call>'


def _replay(path: Path, turns: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))


def _newest_source() -> float:
    files = [EXT / "package.json", *(EXT / "src").rglob("*"), *(EXT / "media").rglob("*")]
    return max(f.stat().st_mtime for f in files if f.is_file())


@pytest.fixture(scope="module")
def vsix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged extension, built with `npm run package` when missing or older
    than its sources (TACHY_E2E_VSIX names another one); copied, so that another
    test repackaging it meanwhile does not matter."""
    if os.environ.get("TACHY_E2E_VSIX"):
        built = Path(os.environ["TACHY_E2E_VSIX"])
    else:
        built = EXT / f"tachy-{VERSION}.vsix"
        if not built.exists() or built.stat().st_mtime < _newest_source():
            if NPM is None or not (EXT / "node_modules").is_dir():
                pytest.skip(f"{built.name} needs building and extensions/vscode has no npm ci")
            done = subprocess.run(
                [NPM, "run", "package"],
                cwd=EXT,
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "CI": "1", "NO_COLOR": "1"},
            )
            hint = (
                "\n(vsce packaged e2e/node_modules: extensions/vscode/.vscodeignore needs e2e/**)"
                if "e2e/node_modules" in done.stdout + done.stderr
                else ""
            )
            assert done.returncode == 0 and built.exists(), (
                f"npm run package failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-3000:]}{hint}"
            )
    assert built.is_file(), f"no {built}"
    copy = tmp_path_factory.mktemp("vsix") / built.name
    shutil.copy2(built, copy)
    return copy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _marked(tag: str) -> dict[int, str]:
    """pid -> command line of the live processes whose environment holds the tag
    (code-server, its extension host, `tachy serve`, node, chromium, ...: whatever
    they detach into their own sessions)."""
    found = {}
    needle = f"{MARKER}={tag}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie: gone, its parent just has not reaped it
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[int(proc.name)] = cmd.strip()
    return found


class Processes:
    """Starts processes in their own process groups, each with the run's tag in its
    environment, and stops all of them and their descendants."""

    def __init__(self, env: dict[str, str]) -> None:
        self.tag = uuid.uuid4().hex
        self.env = {**env, MARKER: self.tag}
        self.started: list[subprocess.Popen[Any]] = []
        self.seen: dict[int, str] = {}  # every tagged process seen while running

    def start(
        self, args: list[str], extra_env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen[Any]:
        env = {**self.env, **(extra_env or {})}
        proc = subprocess.Popen(args, env=env, start_new_session=True, **kwargs)
        self.started.append(proc)
        return proc

    def run(
        self, args: list[str], timeout: float, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        proc = self.start(
            args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            out, _ = proc.communicate()
            raise AssertionError(f"{args[:2]} ran over {timeout} s:\n{out[-6000:]}") from None
        return subprocess.CompletedProcess(args, proc.returncode, out, None)

    def snapshot(self) -> None:
        self.seen.update(_marked(self.tag))

    def stop(self) -> dict[int, str]:
        """SIGTERM to the groups and every tagged process, SIGKILL to what is left
        after 20 s; returns whatever still runs 10 s after that."""
        self.snapshot()
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            for proc in self.started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
            deadline = time.monotonic() + grace
            while True:
                for pid in _marked(self.tag):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
                for proc in self.started:
                    proc.poll()  # reap our own children
                left = _marked(self.tag)
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            if not left:
                return {}
        return left


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC)
    (repo / "bad.json").write_text('{"a": 1,,}\n')
    _replay(repo / "turns.jsonl", [EDIT, "Fixed add."])
    _replay(repo / "slow.jsonl", [SLOW, "Slept."])
    return repo


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    # code-server keeps its config (config.yaml) and state under the XDG folders:
    # give it its own.
    env = {
        **os.environ,
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_DATA_HOME": str(tmp_path / "xdg-data"),
        "NO_COLOR": "1",
    }
    procs = Processes(env)
    yield procs
    start = time.monotonic()
    left = procs.stop()
    print(f"stopped {len(procs.seen)} processes in {time.monotonic() - start:.1f} s")
    assert not left, f"processes still running after SIGKILL: {left}"


def _wait_healthy(proc: subprocess.Popen[Any], port: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"code-server exited ({proc.returncode}):\n{log.read_text()[-4000:]}"
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"code-server not healthy after {timeout} s:\n{log.read_text()[-4000:]}")


def test_e2e_folder_stays_out_of_the_vsix() -> None:
    """extensions/vscode/e2e (its ~320 MB node_modules once scripts/setup-e2e ran)
    must not be packaged: vsce fails on it, and it is no part of the extension."""
    ignore = (EXT / ".vscodeignore").read_text().split()
    assert "e2e/**" in ignore, "extensions/vscode/.vscodeignore lacks the line e2e/**"
    assert (E2E / ".gitignore").read_text().split() == ["node_modules/"]


@needs_e2e
@pytest.mark.timeout(600)
def test_extension_in_a_real_vscode(
    tmp_path: Path, workspace: Path, vsix: Path, processes: Processes
) -> None:
    exts, data, shots = tmp_path / "extensions", tmp_path / "user-data", tmp_path / "shots"
    for d in (exts, data / "User", data / "Machine", shots):
        d.mkdir(parents=True)
    # tachy.serverPath is machine-scoped (never read from a workspace). code-server is
    # a remote window, where such a setting comes from the Remote settings
    # (<user-data-dir>/Machine/settings.json), not from the User settings.
    (data / "Machine" / "settings.json").write_text(
        json.dumps({"tachy.serverPath": str(TACHY)}, indent=2)
    )
    (data / "User" / "settings.json").write_text(
        json.dumps(
            {
                "workbench.startupEditor": "none",
                "security.workspace.trust.enabled": False,
                "telemetry.telemetryLevel": "off",
                "extensions.autoCheckUpdates": False,
                "extensions.autoUpdate": False,
                "tachy.serverPath": str(TACHY),
                "tachy.policy": f"replay:{workspace}/turns.jsonl",
                "tachy.index.dense": False,
                "tachy.trace.server": "messages",
            },
            indent=2,
        )
    )
    dirs = ["--extensions-dir", str(exts), "--user-data-dir", str(data)]

    installed = processes.run(
        [str(CODE_SERVER), *dirs, "--install-extension", str(vsix)], timeout=180
    )
    assert installed.returncode == 0, f"--install-extension failed:\n{installed.stdout[-4000:]}"
    assert any(p.name.startswith("tachy.tachy-") for p in exts.iterdir()), installed.stdout[-4000:]

    # A port free a moment ago; on the rare clash, another.
    cs_log = tmp_path / "code-server.log"
    for attempt in range(3):
        port = _free_port()
        with cs_log.open("w") as out:
            server = processes.start(
                [
                    str(CODE_SERVER),
                    "--auth", "none",
                    "--bind-addr", f"127.0.0.1:{port}",
                    "--disable-telemetry",
                    "--disable-update-check",
                    "--disable-workspace-trust",
                    *dirs,
                    str(workspace),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        try:
            _wait_healthy(server, port, cs_log, timeout=120)
            break
        except AssertionError:
            if attempt == 2 or "EADDRINUSE" not in cs_log.read_text():
                raise

    driver = processes.run(
        [NODE or "node", str(E2E / "e2e.mjs")],
        timeout=420,
        cwd=E2E,
        extra_env={
            "E2E_URL": f"http://127.0.0.1:{port}/?folder={workspace}",
            "E2E_REPO": str(workspace),
            "E2E_LOGS": str(data / "logs"),
            "E2E_SHOTS": str(shots),
            "E2E_CHROMIUM": str(CHROMIUM),
        },
    )
    processes.snapshot()  # before stopping: which processes ran
    print(driver.stdout)
    lines = [ln for ln in driver.stdout.splitlines() if ln.startswith("RESULT ")]
    where = f"driver output:\n{driver.stdout[-6000:]}\nscreenshots and logs: {tmp_path}"
    assert lines, f"the driver printed no RESULT ({driver.returncode})\n{where}"
    r: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    assert "error" not in r and driver.returncode == 0, (
        f"failed at step {r.get('step')!r}: {r.get('error')}\n{where}"
    )

    # The real server ran, from this virtual environment, under code-server.
    commands = list(processes.seen.values())
    assert any(str(TACHY) in c and "serve" in c for c in commands), commands

    # The status bar item: server up, index usable.
    assert re.search(r"Index: (lexical|ready), [1-9]\d* files", r["status"]["label"]), r["status"]

    # tachy: Search opened the file it found.
    search = r["search"]
    assert "calc.py:1" in search["row"], search
    assert not any("calc.py" in t for t in search["tabsBefore"]), search
    assert "calc.py" in search["activeTab"], search

    # Reject: the proposal is marked rejected, the agent is told, calc.py unchanged.
    rejected = r["rejected"]
    assert "rejected" in rejected["proposal"], rejected
    assert rejected["disk"] == CALC, rejected
    assert rejected["dirtyTabs"] == 0, rejected

    # Accept from the diff view: calc.py written to disk through the (saved) buffer,
    # no dirty editor, the diff tab closed, no conflict with the file on disk.
    accepted = r["accepted"]
    assert r["diffTabsOpen"] == 1, r
    assert "applied" in accepted["proposal"], accepted
    assert accepted["disk"] == FIXED, accepted
    assert accepted["dirtyTabs"] == 0, accepted
    assert accepted["diffTabs"] == 0, accepted
    assert "cancelled" not in accepted["final"], accepted
    conflicts = [n for n in accepted["notifications"] if "newer" in n or "changed on disk" in n]
    assert not conflicts, accepted

    # A change in the Settings editor reached the server: the client sent it, and
    # the next run replayed the new policy's `sleep 30`.
    settings = r["settings"]
    assert settings["didChangeConfiguration"], settings
    assert "sleep 30" in settings["nextRunTool"], settings

    # Cancel stopped that run long before the sleep would have ended.
    cancelled = r["cancelled"]
    assert "stopped: cancelled" in cancelled["final"], cancelled
    assert cancelled["seconds"] < 15, cancelled

    # JSON diagnostics were forwarded (tachy/diagnostics), and the server's quick
    # fix started a run about them in the chat.
    assert r["diagnostics"]["sent"], r["diagnostics"]
    quick = r["quickFix"]
    assert quick["title"].startswith("Ask tachy to fix"), quick
    assert "bad.json" in quick["prompt"], quick
    assert "cancelled" in quick["final"], quick

    errors = [n for n in r["notifications"] if "tachy" in n.lower() and "error" in n.lower()]
    assert not errors, r["notifications"]

"""The VS Code extension (extensions/vscode): its unit tests pass, it type-checks and
bundles, it packages into a .vsix holding the bundle, and its manifest agrees with
its code and with the server's settings."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import typing
import zipfile
from pathlib import Path

import msgspec
import pytest

from server import config

ROOT = Path(__file__).resolve().parents[2]
EXT = ROOT / "extensions" / "vscode"
MANIFEST = json.loads((EXT / "package.json").read_text())
NPM = shutil.which("npm")

needs_npm = pytest.mark.skipif(
    NPM is None or shutil.which("node") is None, reason="node and npm are not installed"
)
needs_modules = pytest.mark.skipif(
    not (EXT / "node_modules").is_dir(),
    reason="extensions/vscode/node_modules is missing (scripts/setup runs npm ci there)",
)


def npm(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    assert NPM is not None
    done = subprocess.run(
        [NPM, *args],
        cwd=EXT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "CI": "1", "NO_COLOR": "1"},
    )
    assert done.returncode == 0, (
        f"npm {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-6000:]}\n{done.stderr[-4000:]}"
    )
    return done


@needs_npm
@needs_modules
@pytest.mark.timeout(600)
def test_unit_tests_pass() -> None:
    done = npm("test")
    counts = dict(re.findall(r"^# (pass|fail) (\d+)$", done.stdout, re.M))
    assert int(counts.get("pass", 0)) >= 20 and counts.get("fail") == "0", done.stdout[-3000:]


@needs_npm
@needs_modules
@pytest.mark.timeout(600)
def test_builds_and_packages_a_vsix() -> None:
    npm("run", "build")
    assert (EXT / "dist" / "extension.js").stat().st_size > 10_000
    vsix = EXT / f"tachy-{MANIFEST['version']}.vsix"
    vsix.unlink(missing_ok=True)
    npm("run", "package")
    assert vsix.is_file(), f"npm run package made no {vsix.name}"
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        packaged = json.loads(z.read("extension/package.json"))
        bundle = z.read("extension/dist/extension.js").decode()
    for needed in (
        "extension/dist/extension.js",
        "extension/package.json",
        "extension/media/chat.js",
    ):
        assert needed in names, f"{needed} is not in {vsix.name}: {sorted(names)}"
    leaked = [n for n in names if n.startswith(("extension/node_modules/", "extension/src/"))]
    assert not leaked, f"sources or node_modules went into the .vsix: {leaked[:5]}"
    assert packaged["contributes"] == MANIFEST["contributes"]
    # The bundle holds the language client and our protocol, and leaves 'vscode' to
    # the editor.
    assert '"tachy/review/propose"' in bundle and 'require("vscode")' in bundle


def registered_commands() -> set[str]:
    source = "\n".join(f.read_text() for f in (EXT / "src").glob("*.ts"))
    return set(re.findall(r"registerCommand\(\s*\"([\w.]+)\"", source))


def test_contributed_commands_are_the_registered_ones() -> None:
    contributed = [c["command"] for c in MANIFEST["contributes"]["commands"]]
    assert len(contributed) == len(set(contributed)), "a command is contributed twice"
    registered = registered_commands()
    assert registered, "found no registerCommand calls in src/"
    assert set(contributed) == registered, (
        f"contributed only: {sorted(set(contributed) - registered)}; "
        f"registered only: {sorted(registered - set(contributed))}"
    )
    menus = MANIFEST["contributes"]["menus"]
    used = {item["command"] for entries in menus.values() for item in entries}
    assert used <= registered, f"menus name unknown commands: {sorted(used - registered)}"
    # Commands the status bar item runs.
    status = (EXT / "src" / "status.ts").read_text()
    assert set(re.findall(r'command: "([\w.]+)"', status)) <= registered


def _literal_values(name: str, struct: type = config.Settings) -> list[str]:
    hints = typing.get_type_hints(struct)
    return list(typing.get_args(hints[name]))


def test_settings_agree_with_the_server() -> None:
    """Every server setting the extension offers exists on the server, with the same
    choices and default; the extension's own settings are kept apart."""
    properties = MANIFEST["contributes"]["configuration"]["properties"]
    own = {"tachy.serverPath", "tachy.pythonPath", "tachy.trace.server"}
    assert own <= set(properties)
    fields = {f.encode_name: f for f in msgspec.structs.fields(config.Settings)}
    index_fields = {f.encode_name: f for f in msgspec.structs.fields(config.IndexSettings)}
    for key, schema in properties.items():
        if key in own:
            continue
        name = key.removeprefix("tachy.")
        if name.startswith("index."):
            struct, field = config.IndexSettings, index_fields.get(name.removeprefix("index."))
        else:
            struct, field = config.Settings, fields.get(name)
        assert field is not None, f"{key} is not a server setting (server/config.py)"
        if field.default is not msgspec.NODEFAULT and not callable(field.default):
            # An unset setting is "" in VS Code (its settings editor cannot edit a
            # nullable string); settings.ts leaves it out, so the server's None holds.
            default = "" if field.default is None else field.default
            assert schema.get("default") == default, f"{key}: default differs from the server's"
        if "enum" in schema:
            assert schema["enum"] == _literal_values(field.name, struct), f"{key}: choices differ"
    for name in ("policy", "approval", "sandbox", "allowSecrets", "maxTurns"):
        assert f"tachy.{name}" in properties, f"tachy.{name} is not offered"
    # The keys settings.ts reads are the contributed ones.
    source = (EXT / "src" / "settings.ts").read_text()
    read = {f"tachy.{k}" for k in re.findall(r'get<[^>]+>\("([\w.]+)"\)', source)}
    assert read and read <= set(properties) - own, sorted(read - set(properties))


def test_review_capability_and_activation() -> None:
    """The extension declares the capability that makes the server send proposals,
    and starts without waiting for a command."""
    assert "onStartupFinished" in MANIFEST["activationEvents"]
    assert MANIFEST["engines"]["vscode"] == "^1.90.0"
    assert MANIFEST["main"] == "./dist/extension.js"
    client = (EXT / "src" / "client.ts").read_text()
    assert "registerFeature(new ReviewCapability())" in client
    # A `transport` makes vscode-languageclient append --stdio, which `tachy serve`
    # rejects (the server then never starts; found in a real VS Code).
    code = "\n".join(line.split("//")[0] for line in client.splitlines())
    assert "transport:" not in code, "the server command must be run without a transport"


def _user_only_settings() -> list[str]:
    """USER_ONLY_SETTINGS of src/trust.ts: the settings read from user scope only."""
    source = (EXT / "src" / "trust.ts").read_text()
    found = re.search(r"USER_ONLY_SETTINGS = \[([^\]]*)\]", source)
    assert found, "src/trust.ts has no USER_ONLY_SETTINGS"
    return [f"tachy.{k}" for k in re.findall(r'"([\w.]+)"', found.group(1))]


def test_security_settings_come_from_user_settings_only() -> None:
    """The workspace can be written by the agent's commands: each setting that names a
    program or weakens a promise is machine-scoped (VS Code ignores a workspace value),
    is a restricted configuration, and the code reads it through trust.ts only."""
    properties = MANIFEST["contributes"]["configuration"]["properties"]
    user_only = _user_only_settings()
    must = {"tachy.serverPath", "tachy.pythonPath", "tachy.sandbox", "tachy.allowSecrets"}
    assert must <= set(user_only), sorted(must - set(user_only))
    for key in user_only:
        assert properties[key].get("scope") in ("machine", "application"), (
            f"{key}: {properties[key]}"
        )
    # Every other setting that a workspace may set is harmless: no path, no promise.
    workspace_ok = {
        k for k, v in properties.items() if v.get("scope") not in ("machine", "application")
    }
    assert workspace_ok == {
        "tachy.maxTurns",
        "tachy.index.enabled",
        "tachy.index.dense",
        "tachy.index.embedder",
        "tachy.trace.server",
    }, sorted(workspace_ok)
    untrusted = MANIFEST["capabilities"]["untrustedWorkspaces"]
    assert untrusted["supported"] == "limited" and untrusted["description"].strip()
    assert sorted(untrusted["restrictedConfigurations"]) == sorted(user_only)
    # Belt and braces: settings are read with inspect(), never config.get(), which
    # would hand back a workspace's value.
    for path in (EXT / "src").glob("*.ts"):
        code = "\n".join(line.split("//")[0] for line in path.read_text().splitlines())
        assert not re.search(
            r"getConfiguration\([^)]*\)\s*\.get\s*[<(]|\bconfig\.get\s*[<(]", code
        ), path.name


def test_nothing_is_started_from_the_workspace() -> None:
    """Discovery never returns a workspace folder's .venv (only reports it), and the
    extension shows the user what it started."""
    discovery = (EXT / "src" / "discovery.ts").read_text()
    assert 'source: ".venv"' not in discovery
    extension = (EXT / "src" / "extension.ts").read_text()
    assert "describeServer(command)" in extension and "origin: this.serverOrigin" in extension
    assert "not started automatically" in extension
    assert (
        "onDidGrantWorkspaceTrust" in extension
        and "isTrusted" in (EXT / "src" / "client.ts").read_text()
    )

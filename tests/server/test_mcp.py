"""`tachy mcp` end to end: the real command as a subprocess, driven by the MCP SDK's own
client over stdio."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from agent.tools.find import CodebaseSearch
from server.mcp_index import FindSymbol, IndexTools
from tests.conftest import make_repo

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make_repo(tmp_path / "repo")
    (root / "src" / "config.py").write_text(
        'def parse_config(path):\n    """Read the settings file into a dict."""\n'
        "    return dict(line.split('=', 1) for line in open(path))\n"
    )
    (root / "build" / "config_copy.py").write_text("def parse_config_copy():\n    pass\n")
    (root / ".env").write_text("parse_config_secret = 'hunter2'\n")
    return root


HIT = re.compile(r"^\S+:\d+-\d+( |$)")  # a search hit's first line: path:start-end symbol


def server(root: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "server.cli", "mcp", "--workspace", str(root)],
        cwd=str(Path(__file__).resolve().parents[2]),
    )  # fmt: skip


async def test_the_sdk_client_lists_the_tools_with_the_agents_schemas(project):
    async with Client(server(project)) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == {"codebase_search", "find_symbol"}
    schema = CodebaseSearch.function_schema()["function"]
    assert listed["codebase_search"].input_schema == schema["parameters"]
    assert listed["codebase_search"].description == schema["description"]
    assert (
        listed["find_symbol"].input_schema == FindSymbol.function_schema()["function"]["parameters"]
    )


async def test_search_results_are_the_agent_tools_own_and_hide_what_the_rules_hide(project):
    query = {"query": "parse the settings file into a dict", "limit": 10}
    async with Client(server(project)) as client:
        search = await client.call_tool("codebase_search", query)
        symbols = await client.call_tool("find_symbol", {"name": "prsCfg"})
    text = search.content[0].text
    assert not search.is_error and text.startswith("src/config.py:1-3 parse_config")
    # ignored (build/) and secret (.env) files never come back (a hit's first line
    # names its file; .gitignore's own text, `build/`, may be a hit)
    paths = {line.split(":")[0] for line in text.splitlines() if HIT.match(line)}
    assert "src/config.py" in paths and "hunter2" not in text
    assert not any(path.startswith("build/") or path == ".env" for path in paths)
    assert not symbols.is_error
    assert symbols.content[0].text.splitlines() == ["src/config.py:1-3 function parse_config"]
    # the same call through the agent's own tool path gives the same bytes
    local = IndexTools(project)
    try:
        assert await local.call("codebase_search", query) == (text, False)
    finally:
        local.close()


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("codebase_search", {"query": "x", "paths": ["../outside"]}, "Error: ../outside is outside the workspace"),
        ("codebase_search", {"query": "x", "paths": ["/etc"]}, "Error: /etc is outside the workspace"),
        ("codebase_search", {"query": 3}, "Error: invalid call to codebase_search: parameter <query>"),
        ("find_symbol", {}, "Error: invalid call to find_symbol: missing required parameter <name>"),
        ("read_file", {"path": ".env"}, "Error: there is no tool named 'read_file'"),
    ],
)  # fmt: skip
async def test_bad_calls_are_error_results_and_the_server_goes_on(project, name, arguments, error):
    async with Client(server(project)) as client:
        bad = await client.call_tool(name, arguments)
        good = await client.call_tool("find_symbol", {"name": "add"})
    assert bad.is_error and bad.content[0].text.startswith(error)
    assert not good.is_error and "src/calc.py" in good.content[0].text

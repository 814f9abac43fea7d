"""A client that names no folder (no rootUri, no workspaceFolders: Neovim's built-in
client on a file outside any git repository, VS Code with no folder open): the
directory of the first file opened is indexed and searched, LSP's single-file
convention; the home directory never is."""

from __future__ import annotations

import pytest

from server import protocol as p
from tests.server.lsp_client import CLIENTS, lsp_session

CALC = 'def add(a, b):\n    """Add two numbers."""\n    return a - b\n'
UTIL = 'def mul(a, b):\n    """Multiply two numbers."""\n    return a * a\n'
LEXICAL = {"index": {"dense": False}}


@pytest.fixture(autouse=True)
def no_policy_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TACHY_POLICY", raising=False)


@pytest.mark.parametrize("capabilities", CLIENTS)
async def test_the_first_opened_files_directory_is_searched(tmp_path, capabilities):
    plain = tmp_path / "plain"  # no .git, no marker of any kind
    plain.mkdir()
    (plain / "calc.py").write_text(CALC)
    (plain / "util.py").write_text(UTIL)
    async with lsp_session([], capabilities=capabilities, options=LEXICAL) as ed:
        ed.open(plain / "util.py")
        status = await ed.wait_indexed()
        assert [f["uri"] for f in status["folders"]] == [plain.as_uri()]
        result = await ed.request(p.SEARCH, {"query": "add two numbers"})
        uris = [r["uri"] for r in result["results"]]
        assert uris and uris[0] == (plain / "calc.py").as_uri()  # a file never opened
        # A second file elsewhere adds no folder: the first one decided.
        other = tmp_path / "other"
        other.mkdir()
        (other / "x.py").write_text("X = 1\n")
        ed.open(other / "x.py")
        status = await ed.request(p.INDEX_STATUS)
        assert [f["uri"] for f in status["folders"]] == [plain.as_uri()]


async def test_a_file_in_the_home_directory_does_not_index_it(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "calc.py").write_text(CALC)
    monkeypatch.setenv("HOME", str(home))  # the server's home
    async with lsp_session([], options=LEXICAL) as ed:
        ed.open(home / "calc.py")
        message = await ed.wait_for(
            lambda: next((m.message for m in ed.messages if "does not index" in m.message), None)
        )
        assert str(home) in message
        status = await ed.request(p.INDEX_STATUS)
        assert status["folders"] == []

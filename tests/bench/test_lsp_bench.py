"""The language-server benchmark (bench/lsp.py) at a tiny size: the JSON's shape,
never its timings."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from bench import lsp

pytestmark = pytest.mark.timeout(180)


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))


def make_corpus(root: Path) -> Path:
    for package in ("alpha", "beta"):
        write(root, f"{package}/__init__.py", f'"""The {package} package."""\n')
        for i in range(3):
            write(
                root,
                f"{package}/mod{i}.py",
                f'''
                """Module {i} of {package}: parse http headers and decode json."""

                import json


                def parse_headers_{i}(lines):
                    """Parse http headers into a dict."""
                    out = {{}}
                    for line in lines:
                        key, _, value = line.partition(":")
                        out[key.strip().lower()] = value.strip()
                    return out


                class Decoder{i}(json.JSONDecoder):
                    """A json decoder."""

                    def decode(self, text):
                        return super().decode(text)
                ''',
            )
    return root


def positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def test_end_position_counts_utf16_units() -> None:
    assert lsp.end_position("a\nb") == {"line": 1, "character": 1}
    assert lsp.end_position("x\n") == {"line": 1, "character": 0}
    assert lsp.end_position("\U0001f600") == {"line": 0, "character": 2}


def test_stats_and_percentile() -> None:
    s = lsp.stats([0.001, 0.002, 0.003, 0.004])
    assert s["n"] == 4 and s["p50_ms"] == 2.5 and s["min_ms"] == 1.0 and s["max_ms"] == 4.0
    assert lsp.stats([]) == {"n": 0}


def test_make_size_copies_the_named_entries(tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "corpus")
    name, root = lsp.make_size(corpus, "alpha", tmp_path / "work")
    assert name == "alpha"
    assert (root / "alpha" / "mod0.py").is_file() and not (root / "beta").exists()
    assert lsp.make_size(corpus, "full", tmp_path / "work") == ("full", corpus)
    assert lsp.change_file(root).startswith("alpha/")


def test_main_prints_one_json_document(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    corpus = make_corpus(tmp_path / "corpus")
    before = sorted(p.relative_to(corpus) for p in corpus.rglob("*"))
    argv = [
        "--json",
        "--corpus",
        str(corpus),
        "--queries",
        "3",
        "--repeats",
        "1",
        "--rounds",
        "2",
        "--runs",
        "1",
        "--turns",
        "5",
        "--sizes",
        "alpha",
        "full",
        "--work",
        str(tmp_path / "work"),
    ]
    assert lsp.main(argv) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert err.strip().splitlines()[-1].startswith("lsp: search p95")
    # The corpus is read, never written (the index lives under --work).
    assert sorted(p.relative_to(corpus) for p in corpus.rglob("*")) == before

    assert result["benchmark"] == "lsp"
    assert result["dense"] is False
    for key in ("machine", "source", "plan", "date", "command", "elapsed_s"):
        assert key in result
    assert set(result["sizes"]) == {"alpha", "full"}
    for size in result["sizes"].values():
        assert positive(size["chunks"])
        server = size["server"]
        assert positive(server["initial_index_s"])
        assert positive(server["initial_index_in_process_s"])
        assert server["index_status"]["state"] in ("lexical", "ready")
        assert positive(server["memory_idle_after_index"]["rss_mb"])
        assert server["exit_code"] == 0
        search = size["search"]
        assert search["over_stdio"]["n"] == 3 and search["in_process"]["n"] == 3
        for side in ("over_stdio", "in_process"):
            assert positive(search[side]["p50_ms"]) and positive(search[side]["p95_ms"])
        assert positive(search["p95_ratio"])
        assert positive(search["empty_request_round_trip"]["p50_ms"])
        assert positive(search["response_bytes_mean"])
        assert search["results"]["queries_with_results"] >= 1
        change = size["didchange"]
        assert change["over_stdio"]["found"] == 2 and not change["over_stdio"]["missed"]
        assert positive(change["over_stdio"]["didchange_to_searchable"]["p95_ms"])
        assert change["in_process"]["found"] == 2
        assert positive(change["in_process"]["update_texts_plus_search"]["p50_ms"])

    agent = result["agent"]
    assert agent["tool_to_notification"]["all"]["n"] == 5
    assert agent["tool_to_notification"]["errors"] == 0
    assert agent["in_process"]["tool_to_on_event"]["all"]["n"] == 5
    assert positive(agent["server"]["memory_during_runs"]["max_sampled_rss_mb"])
    assert positive(result["bare_pygls_process"]["rss_mb"])

    summary = result["summary"]
    assert summary["headline_size"] == "full"
    for key in (
        "search_p50_ms",
        "search_p95_ms",
        "search_inprocess_p95_ms",
        "search_p95_ratio_to_inprocess",
        "initial_index_s",
        "didchange_to_searchable_p50_ms",
        "didchange_to_searchable_p95_ms",
        "didchange_inprocess_p50_ms",
        "tool_to_notification_p50_ms",
        "tool_to_notification_p95_ms",
        "tool_to_notification_max_ms",
        "rss_idle_small_mb",
        "rss_idle_after_index_mb",
        "rss_during_run_max_mb",
        "rss_after_run_mb",
        "rss_bare_pygls_mb",
    ):
        assert positive(summary[key]), key
    assert isinstance(summary["search_target_met"], bool)
    assert isinstance(summary["tool_to_notification_target_met"], bool)
    assert set(summary["search_p95_ms_by_size"]) == {"alpha", "full"}

"""The multi-turn benchmark (bench/turns.py) at a small size, on tachy's real model:
one JSON document with its shape (never its timings); the cached and re-prefilled
engines decode the same tokens, and the cache holds the conversation so far."""

from __future__ import annotations

import json

import pytest

from bench import turns as bench

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.usefixtures("torch_path", "two_torch_threads"),
]


@pytest.fixture
def two_torch_threads():
    """Decode at 2 threads, whatever an earlier test left (bench.rl's in-process trainer
    sets 1 for the rest of the process). The two decoding paths sum in another order at
    another thread count, and on some CPUs turn 2 parts at a near-tie at 1 thread
    (`torch.set_num_threads(1)`: same tokens [True, False]; 2 threads: [True, True])."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_a_short_conversation(capsys: pytest.CaptureFixture) -> None:
    argv = ["--json", "--turns", "2", "--new-tokens", "2", "--result-tokens", "40", "--no-agent"]
    assert bench.main(argv) == 0
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert result["benchmark"] == "turns" and err.startswith("bench.turns: turn 1")
    first, second = result["conversation"]["turns"]
    assert first["cached_tokens"] == 0
    # turn 2 holds the system prompt, the task and the first answer as generated
    assert second["cached_tokens"] >= result["summary"]["system_prompt_tokens"]
    assert second["prompt_tokens"] > first["prompt_tokens"] + 40
    assert result["summary"]["same_tokens_every_turn"] is True
    assert result["agent"] is None


def test_the_agent_run_is_counted_from_its_transcript(tmp_path) -> None:
    """Well-formed share and turns come from the transcript's events."""
    events = [
        {"event": "run_start"},
        {"event": "assistant", "text": '<tool_call name="read_file">'},
        {"event": "tool_result", "is_error": True, "content": "Error: there is no tool named 'x'"},
        {"event": "tool_result", "is_error": True, "content": "Error: no such file: a.py"},
        {"event": "assistant", "text": "done"},
        {"event": "final", "stop_reason": "end_turn"},
    ]
    counts = bench.count_calls(events)
    assert counts == {"tool_calls": 2, "malformed_calls": 1, "well_formed_share": 0.5,
                      "turns_with_a_call": 1}  # fmt: skip

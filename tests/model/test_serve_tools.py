"""`tachy model serve` with native function calling (agent/chat_tools.py): `tools`
in, `tool_calls` out, driven by tachy's own executor in native mode and by raw HTTP.

The model's text is scripted (the engine's run is replaced by one that streams a
given answer token by token) so the calls it writes are known; everything else is
the real server, batcher, chat template and client."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import torch

from agent import events as ev
from agent.chat_tools import ChatToolsError, ToolCallOutput, check_tools, render_chat
from agent.executor import Executor
from agent.policy import OpenAIPolicy
from agent.tools import ALL_TOOLS
from model.generate import Generation
from tests.conftest import make_context
from tests.model.test_serve import checkpoint, model_server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.timeout(300), pytest.mark.usefixtures("torch_path")]

TOOLS = [tool.function_schema() for tool in ALL_TOOLS]
CALLS_TURN = (
    "Let me look.\n"
    '<tool_call name="read_file">\n<path>README.md</path>\n</tool_call>\n'
    '<tool_call name="list_dir">\n<depth>1</depth>\n</tool_call>'
)


class Scripted:
    """Stands in for Engine.run: each job gets the next scripted answer, streamed a
    few characters at a time; the prompts are kept (decoded) to compare."""

    def __init__(self, engine, answers: list[str]) -> None:
        self.engine, self.answers, self.prompts = engine, list(answers), []

    def run(self, jobs, more=None):
        for job in jobs:
            self.prompts.append(self.engine.tokenizer.decode(job.prompt))
            text = self.answers.pop(0)
            for start in range(0, len(text), 7):
                if job.on_token is not None:
                    job.on_token(0, text[start : start + 7])
            empty = torch.zeros((0, 1, 1), dtype=torch.int16)
            job.done(Generation([0] * len(text), [0.0] * len(text), empty, text, "stop"))


@pytest.fixture(autouse=True)
def with_tools(model_server, monkeypatch):  # noqa: F811
    """The server as `tachy model serve` builds it: with agent.chat_tools."""
    from agent import chat_tools

    monkeypatch.setattr(model_server, "chat_tools", chat_tools)


@pytest.fixture
def scripted(model_server, monkeypatch):  # noqa: F811
    def script(*answers: str) -> Scripted:
        fake = Scripted(model_server.engine, answers)
        monkeypatch.setattr(model_server.engine, "run", fake.run)
        # tachy's tool docs are thousands of the tiny tokenizer's tokens; the scripted
        # engine has no context limit
        monkeypatch.setattr(model_server, "max_seq", 1 << 20)
        return fake

    return script


def post(server, body) -> httpx.Response:
    return httpx.post(f"{server.url}/chat/completions", json=body, timeout=60)


def events(response: httpx.Response) -> list[dict]:
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


USER = [{"role": "system", "content": "You fix code."}, {"role": "user", "content": "look"}]


def test_calls_come_back_as_tool_calls_with_typed_arguments(model_server, scripted):  # noqa: F811
    scripted(CALLS_TURN)
    r = post(model_server, {"messages": USER, "tools": TOOLS, "max_tokens": 50})
    assert r.status_code == 200, r.text
    (choice,) = r.json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Let me look."
    assert choice["message"]["tool_calls"] == [
        {"id": "call_1_0", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "README.md"}'}},
        {"id": "call_1_1", "type": "function",
         "function": {"name": "list_dir", "arguments": '{"depth": 1}'}},
    ]  # fmt: skip


def test_streamed_calls_are_whole_deltas_after_the_content(model_server, scripted):  # noqa: F811
    scripted(CALLS_TURN)
    body = {"messages": USER, "tools": TOOLS, "max_tokens": 50, "stream": True}
    chunks = events(post(model_server, body))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert content == "Let me look."
    assert [(c["index"], c["id"], c["function"]["name"]) for c in calls] == [
        (0, "call_1_0", "read_file"),
        (1, "call_1_1", "list_dir"),
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_without_a_call_the_answer_is_plain_content(model_server, scripted):  # noqa: F811
    scripted("All done: the tests pass.")
    body = {"messages": USER, "tools": TOOLS, "max_tokens": 50, "stream": True}
    chunks = events(post(model_server, body))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "All done: the tests pass."
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_the_model_is_told_the_tools_in_its_own_syntax(model_server, scripted):  # noqa: F811
    fake = scripted("ok")
    post(model_server, {"messages": USER, "tools": TOOLS, "max_tokens": 5})
    (prompt,) = fake.prompts
    assert "You fix code." in prompt
    assert '<tool_call name="edit_file">' in prompt  # the call syntax
    assert "## read_file(path, start_line?, end_line?)" in prompt  # tachy's tool docs


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"tools": [{"type": "function", "function": {}}]}, "function.name"),
        ({"tools": {"a": 1}}, "'tools' must be a list"),
        ({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "messages": [*USER, {"role": "tool", "tool_call_id": "x", "content": "1"}]},
         "answers no earlier tool call"),
    ],
)  # fmt: skip
def test_bad_tool_requests_are_400s(model_server, extra, needle):  # noqa: F811
    r = post(model_server, {"messages": USER, "max_tokens": 5} | extra)
    assert r.status_code == 400 and needle in r.json()["error"]["message"]


def test_a_server_built_without_tool_calling_says_so(model_server, monkeypatch):  # noqa: F811
    monkeypatch.setattr(model_server, "chat_tools", None)
    r = post(model_server, {"messages": USER, "tools": TOOLS, "max_tokens": 5})
    assert r.status_code == 400 and "without tool calling" in r.json()["error"]["message"]


def test_the_native_conversation_is_the_text_mode_conversation(model_server, scripted, tmp_path):  # noqa: F811
    """tachy's executor in native mode against tachy's server gives the model the same
    turns, byte for byte after the system prompt, as text mode does: the same
    assistant turn, the same <tool_result> blocks with the same call ids."""
    from tests.conftest import make_repo

    repo = make_repo(tmp_path / "repo")

    def run(tool_calls: str) -> tuple[list[str], Executor]:
        fake = scripted(CALLS_TURN, "The README says demo.")
        policy = OpenAIPolicy(model_server.url, "tiny", retries=0, tool_calls=tool_calls)
        executor = Executor(make_context(repo), policy)

        async def go():
            try:
                return await executor.run("what is here?")
            finally:
                await policy.aclose()

        result = asyncio.run(go())
        assert (result.stop_reason, result.final_text) == ("end_turn", "The README says demo.")
        return fake.prompts, executor

    native_prompts, native_run = run("native")
    text_prompts, text_run = run("text")
    user = "what is here?"
    for native, text in zip(native_prompts, text_prompts, strict=True):
        assert native[native.index(user) :] == text[text.index(user) :]
    assert "<tool_result" in native_prompts[1]

    def results(executor):
        return [(e.call_id, e.content) for e in executor.events if isinstance(e, ev.ToolResult)]

    assert results(native_run) == results(text_run)


# ------------------------------------------------------------ the mapping itself
def test_render_chat_turns_tool_messages_into_one_results_message():
    calls = [
        {"id": "call_1_0", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "a.py", "start_line": 2}'}},
        {"id": "call_1_1", "type": "function",
         "function": {"name": "grep", "arguments": '{"pattern": "x"}'}},
    ]  # fmt: skip
    messages = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1_0", "content": "2\tx = 1"},
        {"role": "tool", "tool_call_id": "call_1_1", "content": "Error: bad pattern"},
    ]
    turns = render_chat(messages, check_tools(TOOLS))
    assert [role for role, _ in turns] == ["system", "user", "assistant", "user"]
    assert turns[2][1] == (
        '<tool_call name="read_file">\n<path>a.py</path>\n<start_line>2</start_line>\n</tool_call>\n'
        '<tool_call name="grep">\n<pattern>x</pattern>\n</tool_call>'
    )
    assert turns[3][1] == (
        '<tool_result name="read_file" call_id="call_1_0">\n2\tx = 1\n</tool_result>\n\n'
        '<tool_result name="grep" call_id="call_1_1" status="error">\nError: bad pattern\n</tool_result>'
    )


def test_tool_call_output_holds_back_a_partial_tag_and_types_lists():
    out = ToolCallOutput(check_tools(TOOLS), turn=3)
    assert out.feed("Plan <tool") == ("Plan", [])  # "<tool" may begin a call, after " "
    assert out.feed("s> are nice. ") == (" <tools> are nice.", [])
    content, calls = out.feed(
        '<tool_call name="read_lints">\n<paths>\na.py\nb.py\n</paths>\n</tool_call>'
    )
    assert content == "" and calls[0]["id"] == "call_3_0"
    assert json.loads(calls[0]["function"]["arguments"]) == {"paths": ["a.py", "b.py"]}
    assert out.finish() == ("", [])
    assert out.content == "Plan <tools> are nice."


def test_check_tools_rejects_what_is_not_a_function_tool():
    with pytest.raises(ChatToolsError, match=r"tools\[0\] must be"):
        check_tools([{"type": "retrieval"}])
    with pytest.raises(ChatToolsError, match="parameters must be a JSON schema"):
        check_tools([{"type": "function", "function": {"name": "f", "parameters": []}}])

"""Native tool calling for `openai:` policies (agent/policy.py, agent/executor.py): the
OpenAI `tools` form in, streamed `tool_calls` out, against a real HTTP server on
127.0.0.1 that sends the delta shapes vLLM, llama.cpp, Ollama and OpenAI send."""

from __future__ import annotations

import json
import threading

import pytest

from agent import events as ev
from agent.executor import Executor, is_malformed_result
from agent.policy import FunctionCall, Message, OpenAIPolicy, PolicyError, load_policy
from agent.render import SYSTEM_PROMPT_HEAD_NATIVE
from agent.tools import ALL_TOOLS
from tests.agent.test_policy import FakeServer, delta, reply, sse
from tests.conftest import make_context

MESSAGES = [Message("system", "be brief"), Message("user", "read two files")]


def call_delta(index: int | None, *, id=None, name=None, arguments=None, finish=None) -> dict:
    fragment: dict = {"function": {}}
    if index is not None:
        fragment["index"] = index
    if id is not None:
        fragment |= {"id": id, "type": "function"}
    if name is not None:
        fragment["function"]["name"] = name
    if arguments is not None:
        fragment["function"]["arguments"] = arguments
    return {"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}, "finish_reason": finish}]}


def finish(reason: str = "tool_calls") -> dict:
    return {"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}


# vLLM / OpenAI: id and name first, then the arguments in pieces, calls by index
VLLM_TWO_CALLS = [
    delta(None, role="assistant"),
    call_delta(0, id="call_a", name="read_file", arguments=""),
    call_delta(0, arguments='{"pa'),
    call_delta(0, arguments='th": "README.md"}'),
    call_delta(1, id="call_b", name="list_dir", arguments=""),
    call_delta(1, arguments="{}"),
    finish(),
]


def native(server: FakeServer, **options) -> OpenAIPolicy:
    return OpenAIPolicy(server.base_url, "m", backoff_s=0.01, tool_calls="native", **options)


async def stream_all(policy: OpenAIPolicy, tools=None) -> list:
    try:
        return [c async for c in policy.stream(list(MESSAGES), ["<tool_result"], tools)]
    finally:
        await policy.aclose()


async def test_streamed_argument_pieces_make_whole_calls_in_order():
    with FakeServer(sse(*VLLM_TWO_CALLS)) as server:
        got = await stream_all(native(server), tools=[{"type": "function"}])
    assert got == [
        FunctionCall("call_a", "read_file", '{"path": "README.md"}'),
        FunctionCall("call_b", "list_dir", "{}"),
    ]
    assert server.requests[0][2]["tools"] == [{"type": "function"}]


async def test_ollama_whole_calls_without_index_and_text_around_them():
    whole = [
        {"id": "o1", "function": {"name": "read_file", "arguments": {"path": "a.py"}}},
        {"id": "o2", "function": {"name": "read_file", "arguments": {"path": "b.py"}}},
    ]
    ollama = [
        delta("Reading."),
        {"choices": [{"index": 0, "delta": {"tool_calls": whole}, "finish_reason": None}]},
        finish("stop"),
    ]
    with FakeServer(sse(*ollama, done=False)) as server:
        got = await stream_all(native(server))
    assert got == [
        "Reading.",
        FunctionCall("o1", "read_file", '{"path": "a.py"}'),
        FunctionCall("o2", "read_file", '{"path": "b.py"}'),
    ]


async def test_a_server_that_ignores_stream_returns_its_calls_whole():
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "x1", "type": "function",
                        "function": {"name": "grep", "arguments": '{"pattern": "def"}'}}],
    }}]}  # fmt: skip
    with FakeServer(reply(200, json.dumps(body), "application/json")) as server:
        got = await stream_all(native(server))
    assert got == [FunctionCall("x1", "grep", '{"pattern": "def"}')]


async def test_a_call_is_handed_back_as_soon_as_the_next_one_begins():
    """The first call comes out while the server still holds the rest of the stream."""
    release = threading.Event()

    def respond(handler) -> None:
        sse(*VLLM_TWO_CALLS[:5], done=False)(handler)
        release.wait(10)
        for event in VLLM_TWO_CALLS[5:]:
            handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        handler.wfile.write(b"data: [DONE]\n\n")

    with FakeServer(respond) as server:
        policy = native(server)
        got = []
        try:
            async for item in policy.stream(list(MESSAGES), [], None):
                got.append(item)
                release.set()  # only after the first call arrived
        finally:
            release.set()
            await policy.aclose()
    assert [c.name for c in got] == ["read_file", "list_dir"]


@pytest.mark.parametrize(
    ("spec", "env", "native_tools"),
    [
        ("openai:http://127.0.0.1:9/v1#qwen3:8b?tools=native", None, True),
        ("openai:http://127.0.0.1:9/v1#qwen3:8b", "native", True),
        ("openai:http://127.0.0.1:9/v1#qwen3:8b?tools=text", "native", False),
        ("openai:http://127.0.0.1:9/v1#qwen3:8b", None, False),
    ],
)
async def test_native_tools_from_the_spec_or_the_environment(monkeypatch, spec, env, native_tools):
    if env is None:
        monkeypatch.delenv("TACHY_TOOL_CALLS", raising=False)
    else:
        monkeypatch.setenv("TACHY_TOOL_CALLS", env)
    policy = load_policy(spec)
    try:
        assert policy.native_tools is native_tools
        assert policy.model == "qwen3:8b"
    finally:
        await policy.aclose()


@pytest.mark.parametrize("spec", ["openai:http://h/v1#m?tools=json", "openai:http://h/v1#m?temp=1"])
def test_an_unknown_option_is_a_clear_error(spec):
    with pytest.raises(PolicyError, match="the one option is tools=native or tools=text"):
        load_policy(spec)


# ------------------------------------------------------------- through the executor
def final_answer(text: str = "Done.") -> list:
    return [delta(text), finish("stop")]


async def run_native(repo, *turns) -> tuple[Executor, FakeServer]:
    with FakeServer(*(sse(*t) for t in turns)) as server:
        policy = native(server)
        executor = Executor(make_context(repo), policy)
        try:
            await executor.run("what is here?")
        finally:
            await policy.aclose()
    return executor, server


async def test_native_results_are_tool_messages_holding_the_rendered_results(repo):
    executor, server = await run_native(repo, VLLM_TWO_CALLS, final_answer())
    first = server.requests[0][2]
    assert first["tools"] == [tool.function_schema() for tool in ALL_TOOLS]
    assert first["messages"][0]["content"].startswith(SYSTEM_PROMPT_HEAD_NATIVE)
    assert "<tool_call" not in first["messages"][0]["content"]
    second = server.requests[1][2]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert second[2]["tool_calls"] == [
        {"id": "call_a", "type": "function",
         "function": {"name": "read_file", "arguments": '{"path": "README.md"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}},
    ]  # fmt: skip
    results = [e for e in executor.events if isinstance(e, ev.ToolResult)]
    assert [(m["tool_call_id"], m["content"]) for m in second[3:]] == [
        ("call_a", results[0].content), ("call_b", results[1].content)
    ]  # fmt: skip
    assert "# demo" in results[0].content and not results[0].is_error
    calls = [e for e in executor.events if isinstance(e, ev.ToolCall)]
    assert [(c.call_id, c.tool, c.args) for c in calls] == [
        ("call_1_0", "read_file", {"path": "README.md"}), ("call_1_1", "list_dir", {})
    ]  # fmt: skip
    assert executor.events[-1].stop_reason == "end_turn"


async def test_native_and_text_calls_give_byte_identical_results(repo, tmp_path):
    """The same calls written in the text syntax and sent natively: the model sees the
    same bytes (the one renderer)."""
    native_run, _ = await run_native(repo, VLLM_TWO_CALLS, final_answer())
    text_turn = (
        '<tool_call name="read_file">\n<path>README.md</path>\n</tool_call>\n'
        '<tool_call name="list_dir">\n</tool_call>'
    )
    with FakeServer(sse(delta(text_turn)), sse(delta("Done."))) as server:
        policy = OpenAIPolicy(server.base_url, "m", backoff_s=0.01)
        text_run = Executor(make_context(repo), policy)
        try:
            await text_run.run("what is here?")
        finally:
            await policy.aclose()

    def results(executor: Executor) -> list:
        return [
            (e.tool, e.is_error, e.content) for e in executor.events if isinstance(e, ev.ToolResult)
        ]

    assert results(native_run) == results(text_run)


@pytest.mark.parametrize(
    ("name", "arguments", "problem"),
    [
        ("read_file", '{"path": "README.md"', "the tool call could not be parsed: the arguments are not valid JSON"),
        ("read_file", '["README.md"]', "the tool call could not be parsed: the arguments must be a JSON object"),
        ("fly", "{}", "there is no tool named 'fly'"),
        ("", "{}", "there is no tool named ''"),
        ("read_file", '{"path": 3}', "invalid call to read_file: parameter <path> (given 3)"),
    ],
)  # fmt: skip
async def test_bad_native_calls_get_the_text_syntax_errors_and_the_run_goes_on(
    repo, name, arguments, problem
):
    turn = [call_delta(0, id="bad", name=name, arguments=arguments), finish()]
    executor, server = await run_native(repo, turn, final_answer())
    (result,) = [e for e in executor.events if isinstance(e, ev.ToolResult)]
    assert result.is_error and result.content.startswith("Error: " + problem)
    assert is_malformed_result(result.content, result.is_error)
    tool_message = server.requests[1][2]["messages"][-1]
    assert tool_message == {"role": "tool", "content": result.content, "tool_call_id": "bad"}
    assert executor.events[-1].stop_reason == "end_turn"


async def test_a_native_call_starts_while_the_model_is_still_writing(repo):
    """The first call is submitted (its tool_call event emitted) before the server sends
    the rest of the turn, so tools overlap generation."""
    started = threading.Event()

    def respond(handler) -> None:
        sse(*VLLM_TWO_CALLS[:5], done=False)(handler)
        assert started.wait(10), "the first call did not start before the stream ended"
        for event in VLLM_TWO_CALLS[5:]:
            handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        handler.wfile.write(b"data: [DONE]\n\n")

    def on_event(event: ev.Event) -> None:
        if isinstance(event, ev.ToolCall):
            started.set()

    with FakeServer(respond, sse(*final_answer())) as server:
        policy = native(server)
        executor = Executor(make_context(repo), policy, on_event=on_event)
        try:
            result = await executor.run("go")
        finally:
            started.set()
            await policy.aclose()
    assert result.stop_reason == "end_turn"
    assert len([e for e in executor.events if isinstance(e, ev.ToolResult)]) == 2


async def test_a_bad_native_call_is_shown_the_valid_form_as_json_arguments(repo):
    turn = [call_delta(0, id="bad", name="read_file", arguments='{"file": "a.py"}'), finish()]
    executor, _ = await run_native(repo, turn, final_answer())
    (result,) = [e for e in executor.events if isinstance(e, ev.ToolResult)]
    assert result.content.endswith(
        'The valid form is:\nread_file with the arguments {"path":"string",'
        '"start_line":"integer, optional","end_line":"integer, optional"}'
    )

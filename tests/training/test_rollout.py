"""Rollouts: the executor, unchanged, working a task in a sandbox from the pool, scored
by the task's tests; and the scripted expert solving a task through the tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.policy import ReplayPolicy
from training.env.episode import run_episode
from training.env.pool import EnvLimits, EnvPool
from training.tasks.expert import ExpertPolicy, runner_command
from training.tasks.taskset import Mutation, Task, TaskMeta, append_tasks

pytestmark = pytest.mark.timeout(300)

OPS = '''"""Small arithmetic helpers."""


def add(a, b):
    """The sum of a and b."""
    return a + b


def clamp(x, low, high):
    """x limited to [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x
'''
TESTS = """from calc.ops import add, clamp


def test_add():
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-2, -3) == -5


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(-1, 0, 3) == 0
"""


@pytest.fixture
def taskset(tmp_path: Path) -> Path:
    repo = tmp_path / "set" / "repos" / "calc"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(OPS)
    (repo / "tests" / "test_ops.py").write_text(TESTS)
    buggy = OPS.replace("return a + b", "return a - b")
    task = Task(
        id="calc-1",
        repo="repos/calc",
        instruction="tests/test_ops.py::test_add fails: add(2, 3) gives -1. Please fix it.",
        test_command="{python} -m pytest -q -p no:cacheprovider tests",
        fail_to_pass=["tests/test_ops.py::test_add", "tests/test_ops.py::test_add_negative"],
        pass_to_pass=["tests/test_ops.py::test_clamp"],
        files={"calc/ops.py": buggy},
        test_files=["tests/test_ops.py"],
        metadata=TaskMeta(
            source="test",
            project="calc",
            sites=[
                Mutation(
                    operator="binary_operator",
                    path="calc/ops.py",
                    line=6,
                    original="a + b",
                    mutated="a - b",
                    description="`+` changed to `-` in `add`",
                )
            ],
        ),
    )
    append_tasks(tmp_path / "set", [task])
    return tmp_path / "set"


@pytest.fixture
def pool(taskset: Path):
    with EnvPool(taskset, size=1, limits=EnvLimits(rollout_timeout_s=120)) as pool:
        yield pool


def replay(*turns: str) -> ReplayPolicy:
    return ReplayPolicy(list(turns))


class Recording:
    """Wraps a policy and keeps the messages it was given on each turn."""

    def __init__(self, inner) -> None:
        self.inner, self.seen = inner, []

    async def stream(self, messages, stop):
        self.seen.append(list(messages))
        async for chunk in self.inner.stream(messages, stop):
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_the_expert_solves_the_task_through_the_tools(pool):
    task = pool.task("calc-1")
    env = pool.acquire(task)
    try:
        policy = Recording(
            ExpertPolicy(task, {"calc/ops.py": env.workspace.read_bytes("calc/ops.py").decode()})
        )
        episode = await run_episode(env, policy, max_turns=10)
    finally:
        pool.release(env)
    assert episode.stop_reason == "end_turn" and not episode.truncated
    assert episode.score.reward == 1.0, episode.score
    assert episode.score.fixed == task.fail_to_pass and not episode.score.broken
    assert episode.changed_files == ["calc/ops.py"]
    tools = [e.tool for e in episode.events if type(e).__name__ == "ToolCall"]
    assert tools == [
        "run_terminal_cmd", "grep", "read_file", "edit_file", "run_terminal_cmd", "read_lints",
    ]  # fmt: skip
    assert episode.shape.turns == 5 and episode.shape.max_parallel_calls == 2
    assert episode.shape.tool_errors == 0
    # the conversation kept with the episode is exactly what the policy was shown
    assert episode.messages[: len(policy.seen[-1])] == policy.seen[-1]
    assert episode.messages[-1].role == "assistant"
    results = [e for e in episode.events if type(e).__name__ == "ToolResult"]
    assert "2 passed" in results[-2].content  # the re-run after the fix
    # released: the next rollout starts from the buggy state again
    env = pool.acquire(task)
    try:
        assert "return a - b" in env.workspace.read_bytes("calc/ops.py").decode()
    finally:
        pool.release(env)


async def test_doing_nothing_scores_zero(pool):
    env = pool.acquire("calc-1")
    try:
        episode = await run_episode(env, replay("I could not find anything wrong."))
    finally:
        pool.release(env)
    assert episode.score.reward == 0.0 and episode.stop_reason == "end_turn"
    assert episode.score.still_failing == env.task.fail_to_pass
    assert episode.changed_files == []


async def test_editing_the_tests_does_not_pass(pool):
    cheat = (
        '<tool_call name="write_file">\n<path>tests/test_ops.py</path>\n<content>\n'
        "def test_add():\n    pass\n\n\ndef test_add_negative():\n    pass\n\n\n"
        "def test_clamp():\n    pass\n</content>\n</tool_call>"
    )
    env = pool.acquire("calc-1")
    try:
        episode = await run_episode(env, replay(cheat, "Done: the tests pass now."))
    finally:
        pool.release(env)
    assert episode.changed_files == ["tests/test_ops.py"]
    assert episode.score.reward == 0.0  # the task's tests were put back before scoring


async def test_a_conftest_that_passes_everything_is_removed_before_scoring(pool):
    hook = (
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    cheat = f'<tool_call name="write_file">\n<path>conftest.py</path>\n<content>\n{hook}</content>\n</tool_call>'
    env = pool.acquire("calc-1")
    try:
        episode = await run_episode(env, replay(cheat, "Done."))
        assert not (env.root / "conftest.py").exists()
    finally:
        pool.release(env)
    assert episode.changed_files == ["conftest.py"]
    assert episode.score.reward == 0.0


async def test_a_rollout_over_its_time_limit_is_cut_and_marked_truncated(pool):
    slow = '<tool_call name="run_terminal_cmd">\n<command>sleep 50</command>\n</tool_call>'
    env = pool.acquire("calc-1")
    try:
        episode = await run_episode(env, replay(slow, "done"), timeout_s=2)
    finally:
        pool.release(env)
    assert episode.stop_reason == "timeout" and episode.truncated
    assert episode.seconds < 40 and "exceeded" in (episode.error or "")


async def test_lints_introduced_are_counted(pool):
    fix_with_junk = (
        '<tool_call name="edit_file">\n<path>calc/ops.py</path>\n'
        "<old_string>return a - b</old_string>\n"
        "<new_string>\nimport os\n    return a + b\n</new_string>\n</tool_call>"
    )
    env = pool.acquire("calc-1")
    try:
        episode = await run_episode(env, replay(fix_with_junk, "Fixed."))
    finally:
        pool.release(env)
    assert episode.score.reward == 1.0
    assert episode.score.lints_introduced >= 1  # the unused import


def test_test_runner_drops_the_test_paths():
    task = Task(
        id="x-1", repo="repos/x", instruction="i",
        test_command="PYTHONPATH=src {python} -m pytest -q -p no:cacheprovider tests",
        fail_to_pass=["t"], pass_to_pass=[], metadata=TaskMeta(source="s", project="x"),
    )  # fmt: skip
    assert runner_command(task) == "PYTHONPATH=src python -m pytest -q -p no:cacheprovider"
    assert json.dumps(runner_command(task))  # plain text


async def test_scoring_never_writes_through_a_folder_a_rollout_swapped_for_a_symlink(
    pool, tmp_path: Path
):
    # The tests are put back before scoring; a `tests` folder replaced by a link to a
    # host folder must not make that restore write on the host.
    outside = tmp_path / "outside"
    outside.mkdir()
    task = pool.task("calc-1")
    env = pool.acquire(task)
    try:
        swap = f'<tool_call name="run_terminal_cmd">\n<command>rm -rf tests && ln -s {outside} tests</command>\n</tool_call>'
        episode = await run_episode(env, replay(swap, "Done."), max_turns=3)
        assert not (env.root / "tests").is_symlink()
        assert (env.root / "tests" / "test_ops.py").read_text() == TESTS
    finally:
        pool.release(env)
    assert list(outside.iterdir()) == []
    assert episode.score.reward < 1.0  # the bug is still there

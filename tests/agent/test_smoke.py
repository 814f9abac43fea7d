from tests.conftest import call_tool


async def test_read_file_shows_numbered_lines(ctx):
    is_error, content = await call_tool(ctx, "read_file", path="src/calc.py")
    assert not is_error
    assert content.splitlines()[:3] == [
        "src/calc.py (6 lines)",
        "     1\tdef add(a, b):",
        "     2\t    return a - b",
    ]

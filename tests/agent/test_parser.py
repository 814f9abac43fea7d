"""The streaming tool-call parser (agent/parser.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.parser import CLOSE_TAG, RawCall, ToolCallParser, format_call, parse_all


def feed_chunks(text: str, cuts: list[int]) -> list[RawCall]:
    """Parse `text` fed in pieces split at `cuts` (positions, any order, duplicates ok)."""
    parser = ToolCallParser()
    calls: list[RawCall] = []
    position = 0
    for cut in sorted({c % (len(text) + 1) for c in cuts}):
        calls += parser.feed(text[position:cut])
        position = cut
    calls += parser.feed(text[position:])
    calls += parser.finish()
    return calls


def feed_chars(text: str) -> list[RawCall]:
    parser = ToolCallParser()
    calls: list[RawCall] = []
    for char in text:
        calls += parser.feed(char)
    return calls + parser.finish()


def summary(calls: list[RawCall]) -> list[tuple]:
    return [(c.index, c.name, c.params, c.error) for c in calls]


EDIT_CALL = """<tool_call name="edit_file">
<path>src/calc.py</path>
<old_string>
    return a - b
</old_string>
<new_string>
    return a + b
</new_string>
</tool_call>"""


# ------------------------------------------------------------------ well-formed
def test_single_line_params():
    (call,) = parse_all('<tool_call name="read_file">\n<path>src/calc.py</path>\n</tool_call>')
    assert call.name == "read_file"
    assert call.params == {"path": "src/calc.py"}
    assert call.error is None
    assert call.index == 0


def test_single_line_value_keeps_inner_spaces_and_tags():
    (call,) = parse_all(
        '<tool_call name="grep">\n<pattern>  a <b> </c> x  </pattern>\n<glob></glob>\n</tool_call>'
    )
    assert call.error is None
    assert call.params == {"pattern": "  a <b> </c> x  ", "glob": ""}


def test_multi_line_params():
    (call,) = parse_all(EDIT_CALL)
    assert call.error is None
    assert call.name == "edit_file"
    assert call.params == {
        "path": "src/calc.py",
        "old_string": "    return a - b",
        "new_string": "    return a + b",
    }


def test_multi_line_value_keeps_blank_lines_and_indentation():
    text = '<tool_call name="write_file">\n<path>a.py</path>\n<content>\n\n  x = 1\n\n\ty\n\n</content>\n</tool_call>'
    (call,) = parse_all(text)
    assert call.error is None
    assert call.params["content"] == "\n  x = 1\n\n\ty\n"


def test_single_quoted_name_and_spaces_in_opening_tag():
    (call,) = parse_all("<tool_call  name = 'list_dir' >\n</tool_call>")
    assert call.name == "list_dir"
    assert call.params == {}
    assert call.error is None


def test_crlf_line_endings():
    text = EDIT_CALL.replace("\n", "\r\n")
    (call,) = parse_all(text)
    assert call.error is None
    assert call.params["old_string"] == "    return a - b"


def test_several_calls_in_one_turn_keep_their_order_and_indices():
    text = "\n".join(
        format_call("read_file", {"path": f"f{i}.py"}) for i in range(5)
    )  # no prose in between
    calls = parse_all(text)
    assert [c.index for c in calls] == [0, 1, 2, 3, 4]
    assert [c.params["path"] for c in calls] == [f"f{i}.py" for i in range(5)]
    assert all(c.error is None for c in calls)


def test_prose_around_calls_is_ignored():
    text = (
        "I will read the file first.\nIt has <b>tags</b> and a </tool_call> stray closer.\n"
        + format_call("read_file", {"path": "a"})
        + "\nThen list.\n"
        + format_call("list_dir", {"path": "src"})
        + "\nDone <p>x</p>."
    )
    calls = parse_all(text)
    assert summary(calls) == [
        (0, "read_file", {"path": "a"}, None),
        (1, "list_dir", {"path": "src"}, None),
    ]


def test_no_calls_in_plain_text():
    assert parse_all("The answer is 42.\n<b>bold</b>\n") == []
    assert parse_all("") == []


def test_call_on_one_line_with_prose_after():
    calls = parse_all('text <tool_call name="list_dir"></tool_call> more text')
    assert summary(calls) == [(0, "list_dir", {}, None)]


def test_parameter_and_close_on_the_same_line():
    text = '<tool_call name="read_file"><path>a.py</path></tool_call> then\n<tool_call name="grep">\n<pattern>x</pattern></tool_call>\n'
    calls = parse_all(text)
    assert [(c.name, c.params, c.error) for c in calls] == [
        ("read_file", {"path": "a.py"}, None),
        ("grep", {"pattern": "x"}, None),
    ]


def test_single_line_value_containing_the_close_tag_stays_a_value():
    text = '<tool_call name="grep">\n<pattern>x</tool_call>y</pattern>\n</tool_call>'
    assert [(c.params, c.error) for c in parse_all(text)] == [({"pattern": "x</tool_call>y"}, None)]


def test_closing_tags_inside_multi_line_value_are_verbatim():
    content = (
        'print("</tool_call>")\n'
        "</tool_call>\n"
        '<tool_call name="delete_file">\n'
        "<path>x</path>\n"
        "</contents>\n"
        "  </tool_call>  "
    )
    text = format_call("write_file", {"path": "t.py", "content": content})
    text += "\n" + format_call("read_file", {"path": "t.py"})
    calls = parse_all(text)
    assert summary(calls) == [
        (0, "write_file", {"path": "t.py", "content": content}, None),
        (1, "read_file", {"path": "t.py"}, None),
    ]


def test_multi_line_value_closes_only_at_its_own_tag_alone_on_a_line():
    text = (
        '<tool_call name="write_file">\n<content>\nx </content>\n</content> y\n'
        "  </content>  \n</tool_call>"
    )
    (call,) = parse_all(text)
    assert call.error is None
    assert call.params == {"content": "x </content>\n</content> y"}


def test_format_call_output_is_the_canonical_syntax():
    assert format_call(
        "edit_file", {"path": "src/calc.py", "old_string": "    return a - b\n"}
    ) == (
        '<tool_call name="edit_file">\n<path>src/calc.py</path>\n<old_string>\n'
        "    return a - b\n\n</old_string>\n</tool_call>"
    )


# --------------------------------------------------------------------- streaming
STREAM_SAMPLE = (
    "Let me look.\n"
    + EDIT_CALL
    + "\nand <tool_call name='read_file'>\n<path>src/x.py</path>\n<start_line>3</start_line>\n"
    "</tool_call>\n"
    + format_call("write_file", {"path": "a", "content": 'x\n</tool_call>\n<tool_call name="q">'})
    + "\nbroken: <tool_call>\n<path>a</path>\n</tool_call>\ntail"
)


def test_streaming_one_character_at_a_time_matches_parse_all():
    expected = parse_all(STREAM_SAMPLE)
    assert len(expected) == 4
    assert summary(feed_chars(STREAM_SAMPLE)) == summary(expected)


@pytest.mark.parametrize("seed", range(30))
def test_streaming_random_chunkings_match_parse_all(seed):
    rng = random.Random(seed)
    cuts = [rng.randrange(len(STREAM_SAMPLE) + 1) for _ in range(rng.randrange(1, 60))]
    assert summary(feed_chunks(STREAM_SAMPLE, cuts)) == summary(parse_all(STREAM_SAMPLE))


def test_feed_returns_a_call_as_soon_as_its_closing_tag_arrives():
    parser = ToolCallParser()
    assert parser.feed('<tool_call name="read_file">\n<path>a.py</path>\n') == []
    assert parser.in_call
    assert parser.feed("</tool_call") == []
    (call,) = parser.feed(">")  # nothing after the closing tag yet, not even a newline
    assert (call.name, call.params, call.error) == ("read_file", {"path": "a.py"}, None)
    assert not parser.in_call
    assert parser.feed("\nsome prose") == []
    assert parser.finish() == []


def test_feed_returns_each_call_before_the_next_one_is_written():
    parser = ToolCallParser()
    first = parser.feed(format_call("read_file", {"path": "a"}))
    assert [c.params for c in first] == [{"path": "a"}]
    assert parser.feed('\n<tool_call name="read_file">\n<path>b</path>\n') == []
    second = parser.feed("</tool_call>")
    assert [(c.index, c.params) for c in second] == [(1, {"path": "b"})]


def test_multi_line_call_closes_in_the_same_feed_as_its_closing_tag():
    parser = ToolCallParser()
    text = EDIT_CALL
    body, closer = text[: -len(CLOSE_TAG)], text[-len(CLOSE_TAG) :]
    assert parser.feed(body) == []
    (call,) = parser.feed(closer)
    assert call.params["new_string"] == "    return a + b"


# --------------------------------------------------------------------- malformed
def test_opening_tag_without_name():
    calls = parse_all("<tool_call>\n<path>a</path>\n</tool_call>")
    assert len(calls) == 1
    assert calls[0].name is None
    assert "no tool name" in calls[0].error


def test_opening_tag_with_empty_name():
    (call,) = parse_all('<tool_call name="">\n</tool_call>')
    assert call.name is None
    assert "no tool name" in call.error


def test_malformed_opening_tag():
    (call,) = parse_all('<tool_call tool="read_file">\n<path>a</path>\n</tool_call>')
    assert "malformed opening tag" in call.error
    assert '<tool_call name="TOOL_NAME">' in call.error


def test_unfinished_opening_tag():
    (call,) = parse_all('prose <tool_call name="read_fi')
    assert "never finished" in call.error


def test_unterminated_call():
    (call,) = parse_all('<tool_call name="read_file">\n<path>a.py</path>\n')
    assert call.name == "read_file"
    assert call.params == {"path": "a.py"}
    assert "never closed" in call.error
    assert "</tool_call>" in call.error


def test_unterminated_call_is_only_reported_by_finish():
    parser = ToolCallParser()
    assert parser.feed('<tool_call name="read_file">\n<path>a.py</path>') == []
    (call,) = parser.finish()
    assert call.params == {"path": "a.py"}
    assert "never closed" in call.error


def test_unterminated_param():
    (call,) = parse_all(
        '<tool_call name="write_file">\n<path>a</path>\n<content>\nx\n</tool_call>\n'
    )
    assert "<content> was never closed" in call.error
    assert "</content>" in call.error
    # The closing tool_call line is part of the (unterminated) value.
    assert "content" not in call.params


def test_junk_line_inside_a_call():
    (call,) = parse_all(
        '<tool_call name="read_file">\n<path>a</path>\nplease read it\n</tool_call>'
    )
    assert call.name == "read_file"
    assert "unexpected text inside the tool call" in call.error
    assert "please read it" in call.error
    assert "<name>value</name>" in call.error


def test_long_junk_line_is_shortened_in_the_error():
    (call,) = parse_all(f'<tool_call name="x">\n{"j" * 500}\n</tool_call>')
    assert "..." in call.error
    assert len(call.error) < 400


def test_duplicate_param():
    (call,) = parse_all(
        '<tool_call name="read_file">\n<path>a</path>\n<path>\nb\n</path>\n</tool_call>'
    )
    assert "<path> is given twice" in call.error
    assert call.params == {"path": "a"}


def test_first_error_is_kept():
    (call,) = parse_all('<tool_call name="x">\njunk\n<a>1</a>\n<a>2</a>\n</tool_call>')
    assert "unexpected text" in call.error
    assert "twice" not in call.error


def test_next_call_starting_before_the_previous_closed():
    text = (
        '<tool_call name="read_file">\n<path>a</path>\n'
        '<tool_call name="list_dir">\n<path>src</path>\n</tool_call>'
    )
    calls = parse_all(text)
    assert summary(calls)[1] == (1, "list_dir", {"path": "src"}, None)
    first = calls[0]
    assert (first.index, first.name, first.params) == (0, "read_file", {"path": "a"})
    assert "not closed" in first.error
    assert summary(feed_chars(text)) == summary(calls)


def test_errors_do_not_affect_following_calls():
    text = "<tool_call>\n</tool_call>\n" + format_call("read_file", {"path": "ok"})
    calls = parse_all(text)
    assert calls[0].error is not None
    assert summary(calls[1:]) == [(1, "read_file", {"path": "ok"}, None)]


# ------------------------------------------------------------- property-based
_PIECES = st.sampled_from(
    [
        '<tool_call name="a">',
        "<tool_call name='b'>",
        "<tool_call",
        CLOSE_TAG,
        "</tool_call",
        "<p>",
        "</p>",
        "<q>",
        "</q>",
        "\n",
        "\r\n",
        "\r",
        " ",
        ">",
        "<",
        '"',
        "name=",
        "x",
        "é",
    ]
)
_ALMOST_SYNTAX = st.lists(_PIECES, max_size=40).map("".join)
_ANY_TEXT = st.one_of(st.text(max_size=200), _ALMOST_SYNTAX)
_CUTS = st.lists(st.integers(min_value=0, max_value=10_000), max_size=20)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_ANY_TEXT, cuts=_CUTS)
def test_random_text_never_raises_and_chunking_does_not_matter(text, cuts):
    whole = parse_all(text)
    assert summary(feed_chunks(text, cuts)) == summary(whole)
    assert [c.index for c in whole] == list(range(len(whole)))
    for call in whole:
        assert isinstance(call.params, dict)
        assert call.error is None or isinstance(call.error, str)


_TOOL_NAMES = st.text(
    st.characters(blacklist_characters='">', blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)
_KEYS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_\-]{0,12}", fullmatch=True).filter(
    lambda key: not key.startswith("tool_call")
)
_VALUES = st.one_of(
    st.text(st.characters(blacklist_characters="\r", blacklist_categories=("Cs",)), max_size=80),
    st.lists(
        st.sampled_from(
            ["", " ", "x", "  indented", "</tool_call>", '<tool_call name="z">', "<p>"]
        ),
        max_size=6,
    ).map("\n".join),
)


@st.composite
def _valid_call(draw):
    name = draw(_TOOL_NAMES)
    params = draw(st.dictionaries(_KEYS, _VALUES, max_size=5))
    # A multi-line value may not hold a line that is its own closing tag.
    params = {
        key: value
        for key, value in params.items()
        if all(line.strip() != f"</{key}>" for line in value.split("\n"))
    }
    return name, params


_PROSE = st.text(max_size=30).filter(lambda s: "<tool_call" not in s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(_valid_call(), max_size=4), prose=_PROSE, cuts=_CUTS)
def test_valid_calls_round_trip(calls, prose, cuts):
    text = (
        prose + "\n" + "\n".join(format_call(name, params) + "\n" + prose for name, params in calls)
    )
    expected = [(i, name, params, None) for i, (name, params) in enumerate(calls)]
    assert summary(parse_all(text)) == expected
    assert summary(feed_chunks(text, cuts)) == expected


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(_valid_call(), min_size=1, max_size=3))
def test_valid_calls_round_trip_one_character_at_a_time(calls):
    text = "\n".join(format_call(name, params) for name, params in calls)
    assert summary(feed_chars(text)) == [(i, n, p, None) for i, (n, p) in enumerate(calls)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(_valid_call(), min_size=1, max_size=3), data=st.data())
def test_any_truncation_of_valid_text_never_raises(calls, data):
    text = "\n".join(format_call(name, params) for name, params in calls)
    cut = data.draw(st.integers(min_value=0, max_value=len(text)))
    truncated = text[:cut]
    parser = ToolCallParser()
    got = parser.feed(truncated) + parser.finish()
    assert summary(got) == summary(parse_all(truncated))
    # A call either comes back intact or carries an error; never a silently wrong call.
    for i, call in enumerate(got):
        assert call.index == i
        if call.error is None:
            assert (call.name, call.params) == calls[i]
    if cut == len(text):
        assert all(call.error is None for call in got)
        assert len(got) == len(calls)


# ------------------------------------------------- the JSON form (Hermes, Qwen)
HERMES_TURN = """Let me look first.
<tool_call>
{"name": "read_file", "arguments": {"path": "src/calc.py", "start_line": 3}}
</tool_call>
<tool_call>
{"name": "write_file", "arguments": {"path": "gen.py", "content": "s = '</tool_call>'\\n"}}
</tool_call>
<tool_call>{"name": "grep", "arguments": "{\\"pattern\\": \\"def \\"}"}</tool_call>
"""


def test_hermes_json_calls_map_onto_the_same_calls_with_their_json_types():
    calls = parse_all(HERMES_TURN)
    assert summary(calls) == [
        (0, "read_file", {"path": "src/calc.py", "start_line": 3}, None),
        # a </tool_call> inside a JSON string does not end the block
        (1, "write_file", {"path": "gen.py", "content": "s = '</tool_call>'\n"}, None),
        # arguments sent as a JSON string holding the object
        (2, "grep", {"pattern": "def "}, None),
    ]


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_hermes_json_calls_do_not_depend_on_chunking(cuts):
    assert summary(feed_chunks(HERMES_TURN, cuts)) == summary(parse_all(HERMES_TURN))
    assert summary(feed_chars(HERMES_TURN)) == summary(parse_all(HERMES_TURN))


def test_a_json_call_is_handed_back_as_soon_as_it_closes():
    parser = ToolCallParser()
    assert parser.feed('<tool_call>\n{"name": "list_dir", "arguments": {}}\n') == []
    (call,) = parser.feed("</tool_call>\nmore text")
    assert (call.name, call.params, call.error) == ("list_dir", {}, None)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('<tool_call>{"name": "x", "arguments": {oops}}</tool_call>', "JSON does not parse"),
        ('<tool_call>{"arguments": {"path": "a"}}</tool_call>', "names no tool"),
        ('<tool_call>{"name": "read_file", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "read_file", "arguments": {"path": "a"', "not closed"),
        ('<tool_call>{"name": "read_file", "arguments": {"path": "a</tool_call>', "not closed"),
        ("<tool_call>\n<path>a.py</path>\n</tool_call>", "has no tool name"),
    ],
)
def test_a_broken_json_call_gets_an_error_and_the_next_call_still_parses(text, error):
    calls = parse_all(text + '\n<tool_call name="list_dir">\n</tool_call>')
    assert error in (calls[0].error or "")
    assert summary(calls[1:]) == [(1, "list_dir", {}, None)]


def test_a_json_call_cut_off_inside_a_string_says_so():
    (call,) = parse_all('<tool_call>{"name": "read_file", "arguments": {"path": "a</tool_call>')
    assert call.error == "the JSON object of the tool call is not finished before </tool_call>"

"""What `tachy acp` reads without a client: the user's config file (server.config.user_settings) and the sessions it saved."""

from __future__ import annotations

import json

from server.config import Settings, config_path, user_settings


def test_the_file_is_found_by_tachy_config_or_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("TACHY_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert config_path() == tmp_path / "tachy" / "settings.json"
    monkeypatch.setenv("TACHY_CONFIG", str(tmp_path / "mine.json"))
    assert config_path() == tmp_path / "mine.json"


def test_no_file_is_the_defaults_and_a_bad_key_is_reported_not_fatal(monkeypatch, tmp_path):
    monkeypatch.setenv("TACHY_CONFIG", str(tmp_path / "settings.json"))
    assert user_settings() == (Settings(), [])
    (tmp_path / "settings.json").write_text(json.dumps({"approval": "auto", "sandbox": "nope"}))
    settings, problems = user_settings()
    assert settings.approval == "auto" and settings.sandbox == "auto"
    assert problems == ["setting tachy.sandbox ignored: Invalid enum value 'nope' - at `$.sandbox`"]
    (tmp_path / "settings.json").write_text("{not json")
    settings, problems = user_settings()
    assert settings == Settings() and "was ignored" in problems[0]


def test_a_damaged_acp_session_record_loads_as_none_or_without_its_bad_parts(tmp_path):
    """`.tachy/acp/ID.json` written by an earlier agent: garbage is no session; a bad
    option value falls back to the default."""
    from index import statedir
    from server.acp_agent import SESSIONS_DIR, TachyAgent

    agent = TachyAgent("replay:/nonexistent.jsonl")
    statedir.ensure(tmp_path, SESSIONS_DIR)
    (tmp_path / ".tachy" / SESSIONS_DIR / "bad.json").write_text("{not json")
    assert agent._load(tmp_path, "bad") is None
    record = {"history": [{"role": "user"}], "updates": []}  # a message without content
    (tmp_path / ".tachy" / SESSIONS_DIR / "noContent.json").write_text(json.dumps(record))
    assert agent._load(tmp_path, "noContent") is None
    record = {"config": {"approval": "yolo", "sandbox": "none"}, "history": [], "updates": [3]}
    (tmp_path / ".tachy" / SESSIONS_DIR / "odd.json").write_text(json.dumps(record))
    session = agent._load(tmp_path, "odd")
    assert session.config == {"approval": "ask", "sandbox": "none"} and session.updates == []
    assert agent._load(tmp_path, "../../etc") is None  # not a session id

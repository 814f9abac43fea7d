"""The user's config file (server.config.user_settings), which `tachy acp` reads."""

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

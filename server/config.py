"""Server settings: from `initializationOptions` and the `tachy` section of
workspace/configuration, in that order (the later one wins, key by key). `tachy acp`,
whose clients have no settings to send, reads the same keys from the user's config
file (`user_settings`).

A setting of the wrong type is reported to the user and ignored; the rest of the
configuration still applies, so one typo never leaves the server unusable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import msgspec

SECTION = "tachy"


class IndexSettings(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    enabled: bool = True
    # Embeddings for meaning-based search; lexical search works without them.
    dense: bool = True
    # Which model makes them: "static" (tachy's code model, thousands of chunks a
    # second) or "minilm" (a transformer, ~30 a second on two cores).
    embedder: Literal["static", "minilm"] = "static"
    # Where the index lives (default: .tachy/index inside each workspace folder).
    cache_dir: str | None = None


class Settings(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    # The model: openai:BASE_URL#MODEL, replay:FILE.jsonl (DESIGN.md policy spec).
    policy: str | None = None
    # review: every agent edit waits for the user's accept; auto: edits apply at once
    # (and can still be rejected, which reverts them).
    approval: Literal["review", "auto"] = "review"
    sandbox: Literal["auto", "bubblewrap", "none"] = "auto"
    allow_secrets: bool = False
    max_turns: int = msgspec.field(default=50)
    index: IndexSettings = msgspec.field(default_factory=IndexSettings)


def defaults() -> Settings:
    return Settings(policy=os.environ.get("TACHY_POLICY") or None)


def merge(base: Settings, raw: Any) -> tuple[Settings, list[str]]:
    """`base` updated with the keys of `raw` (a JSON object); returns the settings and
    a problem message for each key that was ignored."""
    if raw is None:
        return base, []
    if not isinstance(raw, dict):
        return base, [f"tachy settings must be an object, not {type(raw).__name__}"]
    current = msgspec.to_builtins(base)
    problems = []
    for key, value in raw.items():
        trial = dict(current)
        if key == "index" and isinstance(value, dict):
            trial["index"] = {**current.get("index", {}), **value}
        else:
            trial[key] = value
        try:
            msgspec.convert(trial, Settings, strict=True)
        except msgspec.ValidationError as exc:
            problems.append(f"setting tachy.{key} ignored: {_explain(exc)}")
            continue
        current = trial
    settings = msgspec.convert(current, Settings, strict=True)
    if settings.max_turns < 1:
        problems.append("setting tachy.maxTurns ignored: it must be at least 1")
        settings = msgspec.structs.replace(settings, max_turns=base.max_turns)
    return settings, problems


def _explain(exc: msgspec.ValidationError) -> str:
    text = str(exc)
    return text.replace("Object contains unknown field", "unknown setting")


def config_path() -> Path:
    """The user's tachy config file: $TACHY_CONFIG, else
    $XDG_CONFIG_HOME/tachy/settings.json (~/.config/tachy/settings.json)."""
    if os.environ.get("TACHY_CONFIG"):
        return Path(os.environ["TACHY_CONFIG"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "tachy" / "settings.json"


def user_settings() -> tuple[Settings, list[str]]:
    """The settings in the user's config file (a JSON object of the keys above: policy,
    approval, sandbox, allowSecrets, maxTurns, index) over the defaults, and a problem
    message for each key ignored. No file: the defaults."""
    path = config_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Settings(), []
    except (OSError, ValueError) as exc:
        return Settings(), [f"{path} was ignored: {exc}"]
    return merge(Settings(), raw)

"""Project rules: what a repository tells agents about itself.

AGENTS.md at the root, Cursor's .cursor/rules/*.mdc and Cline's .clinerules (a file
or a folder of Markdown files) go into the system prompt, as users of those agents
expect.
"""

from __future__ import annotations

from pathlib import Path

MAX_RULE_CHARS = 16_000
MAX_TOTAL_CHARS = 32_000


def _read(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""
    if len(text) > MAX_RULE_CHARS:
        text = text[:MAX_RULE_CHARS] + "\n[... rest of the file cut]"
    return text


def _split_front_matter(text: str) -> tuple[dict[str, str], str]:
    if not text.startswith("---"):
        return {}, text
    end = text.find("\n---", 3)
    if end < 0:
        return {}, text
    fields = {}
    for line in text[3:end].strip().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    return fields, text[end + 4 :].strip()


def load_project_rules(root: Path) -> str:
    """The project's rules as one Markdown text ('' when there are none)."""
    sections: list[tuple[str, str]] = []
    agents = _read(root / "AGENTS.md")
    if agents:
        sections.append(("AGENTS.md", agents))
    for mdc in sorted((root / ".cursor" / "rules").glob("*.mdc")):
        fields, body = _split_front_matter(_read(mdc))
        if not body:
            continue
        if fields.get("alwaysApply", "").lower() != "true":
            scope = []
            if fields.get("globs"):
                scope.append(f"applies to files matching {fields['globs']}")
            if fields.get("description"):
                scope.append(f"use when: {fields['description']}")
            if scope:
                body = f"({'; '.join(scope)})\n\n{body}"
        sections.append((mdc.relative_to(root).as_posix(), body))
    cline = root / ".clinerules"
    if cline.is_file():
        if text := _read(cline):
            sections.append((".clinerules", text))
    elif cline.is_dir():
        for rule in sorted(cline.glob("*.md")):
            if text := _read(rule):
                sections.append((rule.relative_to(root).as_posix(), text))
    out, used = [], 0
    for name, text in sections:
        block = f"## {name}\n\n{text}"
        if used + len(block) > MAX_TOTAL_CHARS:
            out.append(
                f"## {name}\n\n[omitted: the project rules exceed {MAX_TOTAL_CHARS} characters]"
            )
            continue
        out.append(block)
        used += len(block)
    return "\n\n".join(out)

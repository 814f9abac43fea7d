"""Project rules: what a repository tells agents about itself.

AGENTS.md at the root, Cursor's .cursor/rules/*.mdc and Cline's .clinerules (a file
or a folder of Markdown files) go into the system prompt, as users of those agents
expect. They are read through the workspace like any file the model sees: a rule file
that is a symlink to a secret or to a file outside the workspace, or that the ignore
rules hide, is left out.
"""

from __future__ import annotations

from agent.workspace import Workspace, WorkspaceError

MAX_RULE_CHARS = 16_000
MAX_TOTAL_CHARS = 32_000


def _read(workspace: Workspace, rel: str) -> str:
    try:
        rel = workspace.resolve(rel, kind="file")
        text = workspace.read_disk(rel).decode("utf-8", errors="replace").strip()
    except (OSError, WorkspaceError):
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


def _listing(workspace: Workspace, directory: str, suffix: str) -> list[str]:
    """Visible files directly in `directory` whose names end with `suffix`."""
    try:
        directory = workspace.resolve(directory, kind="dir")
    except WorkspaceError:
        return []
    return [
        rel
        for rel, is_dir in workspace.walk(directory, max_depth=1)
        if not is_dir and rel.endswith(suffix)
    ]


def load_project_rules(workspace: Workspace) -> str:
    """The project's rules as one Markdown text ('' when there are none)."""
    sections: list[tuple[str, str]] = []
    agents = _read(workspace, "AGENTS.md")
    if agents:
        sections.append(("AGENTS.md", agents))
    for mdc in _listing(workspace, ".cursor/rules", ".mdc"):
        fields, body = _split_front_matter(_read(workspace, mdc))
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
        sections.append((mdc, body))
    if text := _read(workspace, ".clinerules"):
        sections.append((".clinerules", text))
    for rule in _listing(workspace, ".clinerules", ".md"):
        if text := _read(workspace, rule):
            sections.append((rule, text))
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

"""The agent's tools. Names and parameters are a contract (DESIGN.md): the model is
trained on them, so change them only with an issue that changes DESIGN.md."""

from agent.tools.base import BindError, Tool, ToolContext, ToolError, bind_args
from agent.tools.edit import EditFile
from agent.tools.files import DeleteFile, ListDir, ReadFile, WriteFile
from agent.tools.find import CodebaseSearch, FileSearch, Grep
from agent.tools.lint import ReadLints
from agent.tools.terminal import RunTerminalCmd
from agent.tools.todo import TodoWrite

# In the order the system prompt documents them.
ALL_TOOLS: tuple[type[Tool], ...] = (
    ReadFile,
    ListDir,
    FileSearch,
    Grep,
    CodebaseSearch,
    EditFile,
    WriteFile,
    DeleteFile,
    RunTerminalCmd,
    ReadLints,
    TodoWrite,
)

__all__ = ["ALL_TOOLS", "BindError", "Tool", "ToolContext", "ToolError", "bind_args"]

"""The index's errors, in a module light enough for the agent's tools to import."""


class CodeIndexError(Exception):
    """The index cannot do what was asked; the message says why, for users."""


class IndexBusyError(CodeIndexError):
    """Another process is updating this index."""

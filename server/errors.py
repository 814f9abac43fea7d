"""The errors a handler answers with: a request that could not be done (`failed`) and
params that do not fit their method's type (`decode`), plus `clip` for the text of a
message shown to the user."""

from __future__ import annotations

from typing import Any

from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams

from server import protocol as p

REQUEST_FAILED = -32803  # LSP's RequestFailed: a valid request that could not be done


def failed(message: str) -> JsonRpcException:
    return JsonRpcException(message, code=REQUEST_FAILED)


def decode(params: Any, kind: type[p.Wire]) -> Any:
    """Typed params, or an InvalidParams error that names the bad field."""
    try:
        return p.decode(params, kind)
    except p.ParamsError as exc:
        raise JsonRpcInvalidParams(str(exc)) from None


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

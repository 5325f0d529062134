"""Errors a handler raises; the router renders each as the contract's error object."""

from __future__ import annotations

from collections.abc import Mapping

NOT_FOUND_MESSAGE = "Not found."
SERVER_ERROR_MESSAGE = "Server Error"


class ApiError(Exception):
    """An answer with the error object `{message[, errors]}` and the given status."""

    def __init__(self, status_code: int, message: str, errors: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.errors = errors


class NotFound(ApiError):
    """Every 404 of the API: unknown route, unknown or hidden model, controller abort."""

    def __init__(self) -> None:
        super().__init__(404, NOT_FOUND_MESSAGE)


class ValidationFailed(ApiError):
    """422 with every message of every field; the first message is the top-level one."""

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        first = next(iter(errors.values()))[0]
        super().__init__(422, first, errors)


class ServerError(ApiError):
    """The contract's deliberate 500 (an array `q` on search)."""

    def __init__(self) -> None:
        super().__init__(500, SERVER_ERROR_MESSAGE)

"""`GET /storage/{path}`: files of the storage folder (icons, avatars), never outside it.

A path is resolved inside the folder (symbolic links followed) and served only when it stays
inside and names a regular file; anything else, including a name the file system refuses (too
long, a loop of links, a NUL byte), is a plain 404.
"""

from __future__ import annotations

import mimetypes
import os
import stat
from pathlib import Path

from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

PREFIX = "/storage/"


class StorageFiles:
    def __init__(self, directory: str) -> None:
        self.root = Path(directory).resolve()

    def resolve(self, relative: str) -> tuple[Path, os.stat_result] | None:
        """The file `relative` names inside the folder and its status; None if it escapes it, is no
        regular file, or cannot be named at all."""
        if not relative or "\x00" in relative:
            return None
        try:
            candidate = (self.root / relative).resolve()
            if candidate != self.root and self.root not in candidate.parents:
                return None
            status = candidate.stat()
        except (OSError, RuntimeError, ValueError):
            # ENAMETOOLONG, ELOOP, ENOENT...; RuntimeError is Python's own report of a link loop.
            return None
        return (candidate, status) if stat.S_ISREG(status.st_mode) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response: Response
        if scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse(
                "Method Not Allowed", status_code=405, headers={"Allow": "GET, HEAD"}
            )
        else:
            found = self.resolve(scope["path"][len(PREFIX) :])
            if found is None:
                response = PlainTextResponse("Not Found", status_code=404)
            else:
                path, status = found
                media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                response = FileResponse(path, media_type=media_type, stat_result=status)
        await response(scope, receive, send)

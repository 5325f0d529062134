"""`GET /storage/{path}`: files of the storage folder (icons, avatars), never outside it."""

from __future__ import annotations

import mimetypes
from pathlib import Path

from starlette.responses import FileResponse, PlainTextResponse, Response
from starlette.types import Receive, Scope, Send

PREFIX = "/storage/"


class StorageFiles:
    def __init__(self, directory: str) -> None:
        self.root = Path(directory).resolve()

    def resolve(self, relative: str) -> Path | None:
        """The file `relative` names inside the folder; None if it escapes it or is no regular file."""
        if not relative or "\x00" in relative:
            return None
        candidate = (self.root / relative).resolve()
        if candidate != self.root and self.root not in candidate.parents:
            return None
        return candidate if candidate.is_file() else None

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
                media_type = mimetypes.guess_type(found.name)[0] or "application/octet-stream"
                response = FileResponse(found, media_type=media_type)
        await response(scope, receive, send)

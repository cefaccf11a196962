"""Server-sent events: the wire format, and a streaming response that always notices a disconnect.

Each event is ``data: <json>\\n\\n``; the stream ends with ``data: [DONE]\\n\\n``; lines starting with
``:`` are keep-alive comments that clients skip.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

__all__ = ["sse_data", "SSE_DONE", "SSE_KEEPALIVE", "SSEResponse"]

SSE_DONE = "data: [DONE]\n\n"
SSE_KEEPALIVE = ": keep-alive\n\n"


def sse_data(obj: Any) -> str:
    """One event: ``data: {"a":1}\\n\\n`` (compact JSON, UTF-8 kept as is)."""
    return f"data: {json.dumps(obj, separators=(',', ':'), ensure_ascii=False)}\n\n"


class SSEResponse(StreamingResponse):
    """A ``text/event-stream`` response that listens for the client's disconnect the whole time,
    including while the request still waits in the engine's queue and nothing is being sent, and
    then cancels the body generator (whose ``finally`` cancels the generation)."""

    media_type = "text/event-stream"

    def __init__(self, content: Any, **kwargs: Any) -> None:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **kwargs.pop("headers", {})}
        super().__init__(content, headers=headers, media_type=self.media_type, **kwargs)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def stream() -> None:
                    try:
                        await self.stream_response(send)
                    except OSError:  # the client went away while we were sending
                        pass
                    group.cancel_scope.cancel()

                group.start_soon(stream)
                await self.listen_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()

"""trtlade's OpenAI-compatible server: FastAPI app (:mod:`.app`), request admission and per-request
lookahead rules (:mod:`.admission`), the engine interface and the reference-engine adapter
(:mod:`.engines`), metrics (:mod:`.metrics`), SSE (:mod:`.sse`), the serve plan (:mod:`.plan`) and
the uvicorn runner (:mod:`.runner`). Importing this package imports nothing heavy; the submodules
import fastapi/uvicorn as needed."""

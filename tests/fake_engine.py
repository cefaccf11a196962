"""A scripted engine with the reference engine's sync API, for fast server tests.

``FakeEngine`` has what :class:`trtlade.reference.serving_adapter.ReferenceServingEngine` uses from
``trtlade.reference.engine.ReferenceEngine``: ``spec``, ``default_request_spec``, ``tokenizer``,
``model_id``, ``max_seq_len``, ``eos_token_ids``, ``new_batch(max_batch_size, max_num_tokens)`` (a
:class:`FakeBatch`: every step advances each running request's generator once),
``stream_request(req)`` (a generator yielding one StepChunk per step; ``close()`` cancels) and
``generate_request(req)``.

Tokenizer: one token per character, id = code point; id 0 is EOS. Output: the characters of
``reply`` in a cycle, the same whatever the (w,n,g), like a lossless lookahead engine; step ``i``
emits ``min(n, 1 + i % n)`` tokens where ``n`` is the request's ngram size (1 token with (1,1,0)).

Markers inside the prompt script one request:

=================  ==============================================================
``[fail@K]``       raise RuntimeError after K steps (an engine failure)
``[reject]``       raise ValueError before the first step (engine refuses)
``[eos@K]``        emit EOS as the K-th generated token (finish "stop")
``[slow=S]``       sleep S seconds before every step
``[hang]``         sleep 0.05 s per step and never finish (until cancelled)
=================  ==============================================================
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator, Optional

from trtlade.contract.protocol import GenerationRequest, GenerationResult, GenerationStats, StepChunk
from trtlade.spec import LookaheadSpec

EOS = 0
DEFAULT_REPLY = "The quick brown fox jumps over the lazy dog. "


class CharTokenizer:
    """One token per character (id = code point), EOS = 0, and a trivial chat template."""

    eos_token_id = EOS
    chat_template = "{role}: {content}\n ... assistant:"

    def __len__(self) -> int:
        return 0x110000

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(i) for i in ids if i != EOS)

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True) -> str:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return text + ("assistant:" if add_generation_prompt else "")


@dataclass
class FakeEngine:
    spec: LookaheadSpec = field(default_factory=lambda: LookaheadSpec(4, 2, 4))
    request_default: Optional[LookaheadSpec] = None
    reply: str = DEFAULT_REPLY
    step_delay: float = 0.0
    max_seq_len: int = 512
    model_id: str = "fake-model"
    sampling_mode: str = "greedy"
    supports_logprobs: bool = False  # its scripted steps carry no logits

    def __post_init__(self) -> None:
        self.tokenizer = CharTokenizer()
        self.eos_token_ids = (EOS,)
        self._lock = threading.Lock()
        self.started = 0
        self.closed = 0
        self.completed = 0
        self.requests: list[GenerationRequest] = []
        self.active_threads: set[int] = set()
        self.max_parallel = 0

    @property
    def default_request_spec(self) -> LookaheadSpec:
        return self.request_default or self.spec

    # ------------------------------------------------------------------------------- generation
    def stream_request(self, req: GenerationRequest) -> Iterator[StepChunk]:
        spec = req.lookahead if req.lookahead is not None else self.default_request_spec
        if not self.spec.admits(spec):
            raise ValueError(f"request lookahead ({spec}) is not admitted by the engine's ({self.spec})")
        if "[reject]" in self.tokenizer.decode(req.prompt_ids):
            raise ValueError("the fake engine rejects this prompt")
        return self._steps(req, spec)

    def new_batch(self, max_batch_size: int = 8, max_num_tokens: Optional[int] = None,
                  prefill_chunk: Optional[int] = None, prefill_stall: Optional[float] = None,
                  idle_chunk: Optional[int] = None) -> "FakeBatch":
        return FakeBatch(self, max_batch_size)

    def _steps(self, req: GenerationRequest, spec: LookaheadSpec) -> Iterator[StepChunk]:
        prompt = self.tokenizer.decode(req.prompt_ids)
        fail_at = _marker_int(prompt, "fail")
        eos_at = _marker_int(prompt, "eos")
        delay = _marker_float(prompt, "slow", self.step_delay)
        hang = "[hang]" in prompt
        with self._lock:
            self.started += 1
            self.requests.append(req)
            self.active_threads.add(threading.get_ident())
            self.max_parallel = max(self.max_parallel, len(self.active_threads))
        stops = req.stop
        hold = max((len(s) for s in stops), default=1) - 1
        out: list[int] = []
        text = ""
        emitted = 0
        hist: dict[int, int] = {}
        steps = 0
        finished = False
        try:
            while True:
                if delay or hang:
                    time.sleep(delay or 0.05)
                if fail_at is not None and steps >= fail_at:
                    raise RuntimeError(f"scripted failure after {steps} steps")
                per_step = 1 if spec.ngram_size == 1 else min(spec.ngram_size, 1 + steps % spec.ngram_size)
                step_tokens: list[int] = []
                finish: Optional[str] = None
                for _ in range(per_step):
                    k = len(out)
                    token = EOS if (eos_at is not None and k + 1 == eos_at) else ord(self.reply[k % len(self.reply)])
                    if token == EOS and k < req.min_tokens:
                        token = ord(self.reply[k % len(self.reply)])
                    if token == EOS and not req.ignore_eos:
                        finish = "stop"
                        break
                    if token in req.stop_token_ids and k >= req.min_tokens:
                        finish = "stop"  # like EOS: ends the text, is not part of it
                        break
                    out.append(token)
                    step_tokens.append(token)
                    if len(out) >= req.max_tokens and not hang:
                        finish = "length"
                        break
                steps += 1
                hist[len(step_tokens)] = hist.get(len(step_tokens), 0) + 1
                text = self.tokenizer.decode(out)
                cut = _find_stop(text, stops, emitted)
                if cut is not None:
                    # trim the tokens of this step to the text before the stop string
                    keep = max(0, len(step_tokens) - (len(text) - cut))
                    out = out[: len(out) - len(step_tokens) + keep]
                    step_tokens = step_tokens[:keep]
                    text, finish = text[:cut], "stop"
                end = len(text) if finish else max(emitted, len(text) - hold)
                delta, emitted = text[emitted:end], end
                stats = None
                if finish:
                    stats = GenerationStats(spec=spec, steps=steps, tokens=len(out), tokens_per_step_hist=hist,
                                            rows_per_step=[spec.decoding_tokens] * steps,
                                            prompt_tokens=len(req.prompt_ids))
                    finished = True
                yield StepChunk(tokens=step_tokens, text=delta, finish_reason=finish, stats=stats)  # type: ignore[arg-type]
                if finish:
                    return
        finally:
            with self._lock:
                self.active_threads.discard(threading.get_ident())
                if finished:
                    self.completed += 1
                else:
                    self.closed += 1

    def generate_request(self, req: GenerationRequest) -> GenerationResult:
        tokens: list[int] = []
        parts: list[str] = []
        last = None
        for chunk in self.stream_request(req):
            tokens += chunk.tokens
            parts.append(chunk.text)
            last = chunk
        assert last is not None and last.finish_reason is not None and last.stats is not None
        return GenerationResult(tokens=tokens, text="".join(parts), finish_reason=last.finish_reason,
                                stats=last.stats)


class FakeBatch:
    """The reference engine's :class:`~trtlade.reference.batching.Batch` interface over per-request
    generators: first come first served, at most ``max_batch_size`` running; one step advances each
    running generator once. ``max_running`` / ``admitted`` record what the scheduler did."""

    def __init__(self, engine: FakeEngine, max_batch_size: int) -> None:
        from trtlade.reference.batching import OutsideWork
        from trtlade.reference.scheduler import StepReport

        self.outside = OutsideWork()  # the server's admission work, as the real batch keeps it
        self.engine = engine
        self.max_batch_size = max_batch_size
        self._waiting: list[tuple[int, Iterator[StepChunk]]] = []
        self._running: list[tuple[int, Iterator[StepChunk]]] = []
        self._next = 0
        self.max_running = 0
        self.admitted: list[int] = []
        self.last = StepReport()
        self.failed: list[tuple[int, BaseException]] = []
        self._report = StepReport

    running = property(lambda self: len(self._running))
    waiting = property(lambda self: len(self._waiting))

    def __len__(self) -> int:
        return len(self._running) + len(self._waiting)

    def add(self, req: GenerationRequest, enqueued_at: Optional[float] = None) -> int:
        gen = self.engine.stream_request(req)
        self._next += 1
        self._waiting.append((self._next, gen))
        return self._next

    def cancel(self, seq_id: int) -> bool:
        for queue in (self._waiting, self._running):
            for item in queue:
                if item[0] == seq_id:
                    queue.remove(item)
                    item[1].close()
                    return True
        return False

    def close(self) -> None:
        for seq_id, _ in list(self._waiting) + list(self._running):
            self.cancel(seq_id)

    def step(self, on_chunk=None) -> list[tuple[int, StepChunk]]:
        while self._waiting and len(self._running) < self.max_batch_size:
            item = self._waiting.pop(0)
            self._running.append(item)
            self.admitted.append(item[0])
        self.max_running = max(self.max_running, len(self._running))
        out = []
        self.failed = []
        for item in list(self._running):
            try:
                chunk = next(item[1])
            except Exception as exc:  # noqa: BLE001 - like the real batch: this request alone fails
                self.failed.append((item[0], exc))
                self._running.remove(item)
                continue
            out.append((item[0], chunk))
            if chunk.finish_reason is not None:
                self._running.remove(item)
                item[1].close()
            if on_chunk is not None:
                on_chunk(item[0], chunk)
        self.last = self._report(running=len(out), rows=len(out))
        return out


def _marker_int(prompt: str, name: str) -> Optional[int]:
    m = re.search(rf"\[{name}@(\d+)\]", prompt)
    return int(m.group(1)) if m else None


def _marker_float(prompt: str, name: str, default: float) -> float:
    m = re.search(rf"\[{name}=([0-9.]+)\]", prompt)
    return float(m.group(1)) if m else default


def _find_stop(text: str, stops: tuple[str, ...], emitted: int) -> Optional[int]:
    best = None
    for s in stops:
        pos = text.find(s, max(0, emitted - len(s)))
        if pos >= 0 and (best is None or pos < best):
            best = pos
    return best


# ------------------------------------------------------------------------------------------ tokenizer
TINY_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Lookahead decoding generates several tokens per step.",
    "Hello world! How are you today? I am fine, thank you.",
    "def add(a, b):\n    return a + b\n",
]

TINY_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tiny_tokenizer(folder) -> "object":
    """Save a small byte-level BPE tokenizer (a few hundred tokens, EOS ``</s>``, a chat template)
    as a Hugging Face tokenizer folder; returns the loaded ``PreTrainedTokenizerFast``."""
    from pathlib import Path

    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TINY_CORPUS * 4, vocab_size=400, min_frequency=1,
                            special_tokens=["<pad>", "</s>", "<s>"])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="</s>", pad_token="<pad>",
                                  bos_token="<s>")
    tok.chat_template = TINY_CHAT_TEMPLATE
    Path(folder).mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(folder))
    return tok


# ------------------------------------------------------------------------------------------ server helpers
# An in-process client over httpx's ASGI transport, SSE parsing, and a real uvicorn server in a thread.
import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
from typing import Any, AsyncIterator, Callable  # noqa: E402

import httpx  # noqa: E402


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def client_for(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """Start ``app``'s lifespan, wait until its engine is loaded (or failed), yield a client."""
    async with app.router.lifespan_context(app):
        await asyncio.wait_for(app.state.trtlade.loaded.wait(), 30)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=30) as c:
            yield c


def fake_app(engine: Optional[FakeEngine] = None, *, max_queue: int = 64, settings: Any = None,
             **adapter: Any) -> tuple[Any, FakeEngine]:
    from trtlade.server.app import create_app
    from trtlade.reference.serving_adapter import ReferenceServingEngine

    engine = engine or FakeEngine()
    app = create_app(lambda: ReferenceServingEngine(engine, max_queue=max_queue, **adapter), settings)
    return app, engine


def sse_events(text: str) -> list[Any]:
    """Parse an SSE body into a list of JSON objects and the string "[DONE]" (comments skipped)."""
    events: list[Any] = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if not block or block.startswith(":"):
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def uvicorn_thread(app: Any, port: Optional[int] = None) -> Iterator[str]:  # noqa: F821
    """Serve ``app`` with uvicorn in a background thread; yields the base URL; stops it afterwards."""
    import uvicorn

    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           lifespan="on", timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    else:
        raise RuntimeError("the test server did not become ready")
    try:
        yield base
    finally:
        server.should_exit = True
        thread.join(20)


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def metric_value(text: str, name: str, labels: Optional[dict[str, str]] = None) -> float:
    """The value of one sample in Prometheus text (0.0 when absent)."""
    want = "" if not labels else "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        key, _, value = line.rpartition(" ")
        if key == name + want or (labels and key.startswith(name + "{") and _labels(key) == labels):
            return float(value)
    return 0.0


def _labels(key: str) -> dict[str, str]:
    inner = key[key.index("{") + 1: key.rindex("}")]
    out = {}
    for part in inner.split(","):
        k, _, v = part.partition("=")
        out[k] = v.strip('"')
    return out


def metric_sum(text: str, name: str) -> float:
    """Sum over every labelled sample of ``name``."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rpartition(" ")[2])
    return total


def close_while_shutdown_hangs(engine: Any, instance: Any, monkeypatch: Any, caplog: Any) -> tuple[float, bool]:
    """Close ``engine`` while TensorRT-LLM's ``instance.shutdown`` hangs (released afterwards): the seconds the close
    took, and whether it logged that the shutdown did not return."""
    import threading
    import time

    released = threading.Event()
    monkeypatch.setattr(instance, "shutdown", lambda: released.wait(30))
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="trtlade"):
        run(engine.aclose())
    took = time.monotonic() - started
    released.set()
    return took, any("did not return within" in r.getMessage() for r in caplog.records)

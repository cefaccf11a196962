"""A scripted engine with the reference engine's sync API, for fast server tests.

``FakeEngine`` has what :class:`trtlade.server.engines.ReferenceServingEngine` uses from
``trtlade.engine.reference.ReferenceEngine``: ``spec``, ``default_request_spec``, ``tokenizer``,
``model_id``, ``max_seq_len``, ``eos_token_ids``, ``stream_request(req)`` (a generator yielding one
StepChunk per step; ``close()`` cancels) and ``generate_request(req)``.

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

from trtlade.engine.protocol import GenerationRequest, GenerationResult, GenerationStats, StepChunk
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
        return self._steps(req, spec)

    def _steps(self, req: GenerationRequest, spec: LookaheadSpec) -> Iterator[StepChunk]:
        prompt = self.tokenizer.decode(req.prompt_ids)
        fail_at = _marker_int(prompt, "fail")
        eos_at = _marker_int(prompt, "eos")
        delay = _marker_float(prompt, "slow", self.step_delay)
        hang = "[hang]" in prompt
        if "[reject]" in prompt:
            raise ValueError("the fake engine rejects this prompt")
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
                    out.append(token)
                    step_tokens.append(token)
                    if token in req.stop_token_ids and k + 1 >= req.min_tokens:
                        finish = "stop"
                        break
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

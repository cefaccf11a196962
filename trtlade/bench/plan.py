"""What a bench run will do, as validated data: modes, targets (servers), series, endpoint, settings.

No network and no heavy imports here: the CLI builds a :class:`BenchPlan` from flags (every user
mistake raises :class:`PlanError` naming the flag, the value, what is allowed and a hint), and the
runner executes it.

A *series* is one line in the report: one mode on one server. With one server the series are the
modes (``ar``, ``lookahead``, ``4-2-4`` ...); with two servers (``--base-url-b``) they are the
server labels (``a``, ``b``), or ``a/ar``, ``b/ar`` ... when several modes run on each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional
from urllib.parse import urlsplit

from trtlade.errors import PlanError, did_you_mean
from trtlade.bench.datasets import Prompt
from trtlade.drafting.config import DRAFTER_MODE_HINT, DraftConfigError, drafter_mode, is_drafter_mode
from trtlade.spec import AUTOREGRESSIVE, LookaheadSpec, SpecError

__all__ = [
    "BenchPlan", "Endpoint", "Mode", "PlanError", "Series", "Target",
    "parse_base_url", "parse_concurrency", "parse_endpoint", "parse_metadata", "parse_modes",
    "build_payload", "make_series", "resolve_server_modes", "check_modes_for_servers",
]

EndpointKind = Literal["chat", "completions"]

#: Mode names that send no ``lookahead`` field (the server's default applies: its policy).
#: ``lookahead`` sends the server's full (W,N,G) once it is known (:func:`resolve_server_modes`).
SERVER_DEFAULT_MODES = ("lookahead", "default")
#: Mode names sent as a trtlade draft policy by name (``"lookahead": "auto"``).
POLICY_MODES = ("auto", "schedule")
#: NGram / SA modes (sent as ``"speculation": {...}``): see :func:`trtlade.drafting.config.drafter_mode`.


@dataclass(frozen=True)
class Mode:
    """How requests ask for lookahead: ``spec`` is sent as ``{"w","n","g"}``; None sends nothing.

    >>> [(m.name, m.payload()) for m in parse_modes(["ar,lookahead", "4-2-4,auto"])]
    [('ar', {'w': 1, 'n': 1, 'g': 0}), ('lookahead', None), ('4-2-4', {'w': 4, 'n': 2, 'g': 4}), ('auto', 'auto')]
    >>> parse_modes(["sa-6--1-global"])[0].speculation
    {'decoding_type': 'SA', 'max_draft_len': 6, 'max_matching_ngram_size': -1, 'enable_global_pool': True}
    """

    name: str
    spec: Optional[LookaheadSpec]
    #: a trtlade draft policy asked for by name instead of a spec (``auto``, ``schedule``)
    policy: Optional[str] = None
    #: an NGram / SA block sent as ``speculation`` (TensorRT-LLM's speculative_config)
    speculation: Optional[dict[str, Any]] = None

    def payload(self) -> Optional[dict[str, int] | str]:
        if self.policy is not None:
            return self.policy
        return None if self.spec is None else self.spec.to_wire()

    def describe(self) -> str:
        if self.speculation is not None:
            return f"speculation {self.speculation}"
        if self.policy is not None:
            return f'lookahead "{self.policy}" (the trtlade server\'s {self.policy} policy)'
        if self.spec is None:
            return "no lookahead field (the server's default: its schedule, if it has one)"
        if self.spec.is_autoregressive:
            return f"lookahead {self.spec.as_tuple()} (autoregressive)"
        return f"lookahead {self.spec.as_tuple()}"


def resolve_server_modes(series: list[Series]) -> list[Series]:
    """The ``lookahead`` mode sends the server's own (W,N,G) explicitly when the server says what it
    is (trtlade's /version), so that it measures the fixed spec even where a schedule is the
    default; ``default`` / ``schedule`` keep sending nothing. Other servers: unchanged.

    >>> t = Target("a", "http://h", server_info={"engine": {"spec": {"window_size": 2, "ngram_size": 4,
    ...                                                              "verification_set_size": 2}}})
    >>> [s.mode.payload() for s in resolve_server_modes([Series("lookahead", t, Mode("lookahead", None)),
    ...                                                  Series("default", t, Mode("default", None))])]
    [{'w': 2, 'n': 4, 'g': 2}, None]
    """
    out = []
    for s in series:
        engine = s.target.server_info.get("engine") if isinstance(s.target.server_info, dict) else None
        if s.mode.name == "lookahead" and s.mode.spec is None and isinstance(engine, dict):
            try:
                s = Series(s.label, s.target, Mode("lookahead", LookaheadSpec.parse(engine.get("spec"))))
            except SpecError:
                pass
        out.append(s)
    return out


def check_modes_for_servers(series: list[Series]) -> None:
    """A server whose every request drafts with its own config (trtlade on TensorRT-LLM's PyTorch backend:
    ``per_request_drafting`` false in /version) answers a ``lookahead`` or ``speculation`` field with 400: only
    ``default`` can run there. PlanError before any request is sent.

    >>> t = Target("a", "http://h", server_info={"engine": {"per_request_drafting": False}})
    >>> check_modes_for_servers([Series("default", t, Mode("default", None))])   # sends nothing: runs
    >>> check_modes_for_servers([Series("ar", t, Mode("ar", AUTOREGRESSIVE))])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trtlade.errors.PlanError: --modes: mode 'ar' sends a lookahead field, which the server at http://h refuses: ...
    """
    for s in series:
        engine = s.target.server_info.get("engine") if isinstance(s.target.server_info, dict) else None
        if not isinstance(engine, dict):
            continue
        if engine.get("per_request_drafting", True):
            _check_admitted(s, engine)
            continue
        field = "speculation" if s.mode.speculation is not None else "lookahead"
        if s.mode.payload() is not None or s.mode.speculation is not None:
            raise PlanError(f"mode {s.mode.name!r} sends a {field} field, which the server at {s.target.base_url} "
                            "refuses: it runs TensorRT-LLM's PyTorch backend, where every request drafts with the "
                            "server's speculative_config", option="--modes",
                            hint="use --modes default, and compare with a server without speculative_config "
                                 "through --base-url-b (docs/guides/migrate-1.3.md)")


def _check_admitted(s: Series, engine: dict) -> None:
    """A spec mode larger than the server's (W,N,G), or a drafter on a server that offers none, would be refused
    request by request: PlanError before the sweep.

    >>> t = Target("a", "http://h", server_info={"engine": {"spec": {"window_size": 2, "ngram_size": 4,
    ...                                                              "verification_set_size": 2}}})
    >>> _check_admitted(Series("9-9-9", t, Mode("9-9-9", LookaheadSpec(9, 9, 9))), t.server_info["engine"])
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trtlade.errors.PlanError: --modes: mode '9-9-9' asks for (9,9,9), more than the server at http://h admits ...
    """
    if s.mode.spec is not None and s.mode.policy is None and isinstance(engine.get("spec"), dict):
        try:
            server = LookaheadSpec.parse(engine["spec"])
        except SpecError:
            return
        if excess := server.excess(s.mode.spec):
            parts = ", ".join(f"{f} {r} > {m}" for f, r, m in excess)
            raise PlanError(f"mode {s.mode.name!r} asks for ({s.mode.spec}), more than the server at "
                            f"{s.target.base_url} admits (({server}): {parts}): it would refuse every request",
                            option="--modes",
                            hint=f"use a spec with w<={server.window_size}, n<={server.ngram_size}, "
                                 f"g<={server.verification_set_size}, or lookahead (the server's own)")
    offered = (engine.get("speculation") or {}) if isinstance(engine.get("speculation"), dict) else {}
    if s.mode.speculation is not None and "speculation" in engine and not offered.get("drafters"):
        raise PlanError(f"mode {s.mode.name!r} drafts with {s.mode.speculation.get('decoding_type')}, which the server "
                        f"at {s.target.base_url} does not offer per request (its /version lists no drafters)",
                        option="--modes", hint="drafters run per request on the reference engine (`trtlade serve`); "
                                               "drop the mode for this server")


def _split_list(values: list[str]) -> list[str]:
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


#: What a mode may be (every refusal of one says it)
MODES_HINT = ("modes are ar (lookahead off: (1,1,0)), lookahead (the server's (W,N,G)), default (no field: the "
              "server's default), auto or schedule (trtlade's draft policies), a W-N-G spec such as 4-2-4 or 7-7-7, "
              "or a drafter: ngram[-D[-K]], sa[-D[-K]], ngram-auto (commas separate modes)")


def parse_modes(values: list[str]) -> list[Mode]:
    """``ar`` (sends (1,1,0)), ``lookahead`` / ``default`` (send nothing), or specs like ``4-2-4``."""
    items = _split_list(values)
    if not items:
        raise PlanError("no mode given", option="--modes", hint="e.g. --modes ar,lookahead")
    modes: list[Mode] = []
    for item in items:
        low = item.lower()
        if low == "ar":
            mode = Mode("ar", AUTOREGRESSIVE)
        elif low in SERVER_DEFAULT_MODES:
            mode = Mode(low, None)
        elif low in POLICY_MODES:
            mode = Mode(low, None, policy=low)
        elif is_drafter_mode(low):
            mode = _drafter_mode(low)
        else:
            try:
                spec = LookaheadSpec.parse(item)
            except SpecError as exc:
                if not any(ch.isdigit() for ch in item):  # a word: a misspelt mode name, not a malformed spec
                    raise PlanError(f"{item!r} is not a mode", option="--modes", hint=_mode_hint(low)) from None
                raise PlanError(
                    f"{item!r} is not a mode: {exc.message}", option="--modes",
                    hint=MODES_HINT,
                ) from None
            mode = Mode("-".join(map(str, spec.as_tuple())), spec)
        if any(m.name == mode.name for m in modes):
            raise PlanError(f"mode {mode.name!r} is given twice", option="--modes", hint="list each mode once")
        modes.append(mode)
    return modes


def _mode_hint(word: str) -> str:
    """A did-you-mean among the named modes, then every kind of mode.

    >>> _mode_hint("ngramm")[:22]
    "did you mean 'ngram'? "
    """
    names = ["ar", *SERVER_DEFAULT_MODES, *POLICY_MODES, "ngram", "sa", "ngram-auto"]
    return did_you_mean(word, names) + MODES_HINT


def _drafter_mode(name: str) -> Mode:
    """``ngram-4-2-private``, ``sa``, ``sa-6--1-global``, ``ngram-auto`` ... as a speculation mode."""
    try:
        return Mode(name, None, speculation=drafter_mode(name))
    except DraftConfigError as exc:
        where = f"{exc.field}: " if exc.field else ""
        raise PlanError(f"{where}{exc.message}" if name in exc.message else f"{name!r}: {where}{exc.message}",
                        option="--modes", hint=exc.hint or DRAFTER_MODE_HINT) from None


def parse_concurrency(values: list[str]) -> list[int]:
    """``1,2,4`` (or the flag repeated) -> [1, 2, 4]; each an integer >= 1, no repeats, order kept."""
    if any(not item.strip() for value in values for item in value.split(",")) and "".join(values).strip():
        raise PlanError(f"an empty level in {','.join(values)!r}", option="--max-concurrency",
                        hint="give integers >= 1 separated by single commas, e.g. 1,2,4")
    items = _split_list(values)
    if not items:
        raise PlanError("no concurrency level given", option="--max-concurrency", hint="e.g. 1,2,4,8")
    levels: list[int] = []
    for item in items:
        try:
            level = int(item)
        except ValueError:
            raise PlanError(f"{item!r} is not an integer", option="--max-concurrency",
                            hint="give integers >= 1, e.g. 1,2,4,6,8,10,16") from None
        if level < 1:
            raise PlanError(f"concurrency {level} is below 1", option="--max-concurrency",
                            hint="give integers >= 1, e.g. 1,2,4,6,8,10,16")
        if level in levels:
            raise PlanError(f"concurrency {level} is given twice", option="--max-concurrency",
                            hint="list each level once")
        levels.append(level)
    return levels


def parse_metadata(values: list[str]) -> dict[str, str]:
    """``k=v`` pairs (the flag repeated) -> dict; the value may contain ``=``."""
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise PlanError(f"{item!r} is not key=value", option="--metadata", hint="e.g. --metadata gpu=A10")
        if key.strip() in out:
            raise PlanError(f"metadata key {key.strip()!r} is given twice", option="--metadata",
                            hint="give each key once")
        out[key.strip()] = value
    return out


def parse_base_url(value: str, *, option: str = "--base-url") -> str:
    """Validate an http(s) server root; a trailing ``/v1`` (as the openai client writes it) or ``/``
    is accepted and names the same server: ``http://h:8000/v1/`` -> ``http://h:8000``."""
    url = value.strip()
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise PlanError(f"{value!r} is not a valid URL: {exc}", option=option,
                        hint="e.g. http://127.0.0.1:8000") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PlanError(f"{value!r} is not an http(s) URL with a host", option=option,
                        hint="e.g. http://127.0.0.1:8000 (the server root, or with /v1)")
    if parts.query or parts.fragment:
        raise PlanError(f"{value!r} has a query or fragment", option=option, hint="give the server root only")
    del port
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass(frozen=True)
class Endpoint:
    kind: EndpointKind
    path: str


def parse_endpoint(value: str) -> Endpoint:
    """``chat`` -> /v1/chat/completions, ``completions`` -> /v1/completions, or a path starting
    with ``/`` (its kind: chat if the path contains 'chat', else completions)."""
    v = value.strip()
    if v == "chat":
        return Endpoint("chat", "/v1/chat/completions")
    if v == "completions":
        return Endpoint("completions", "/v1/completions")
    if v.startswith("/") and len(v) > 1:
        return Endpoint("chat" if "chat" in v else "completions", v)
    raise PlanError(f"{value!r} is not an endpoint", option="--endpoint",
                    hint="chat, completions, or a path such as /v1/chat/completions")


@dataclass
class Target:
    """One server: its label (a, b), root URL and the model name sent."""

    label: str
    base_url: str
    model: str = ""
    api_key: Optional[str] = None
    server_info: dict[str, Any] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass(frozen=True)
class Series:
    label: str
    target: Target
    mode: Mode


def make_series(targets: list[Target], modes: list[Mode]) -> list[Series]:
    """Series in run order: one per mode on one server; per (server, mode) with two servers."""
    if len(targets) == 1:
        return [Series(m.name, targets[0], m) for m in modes]
    if len(modes) == 1:
        return [Series(t.label, t, modes[0]) for t in targets]
    return [Series(f"{t.label}/{m.name}", t, m) for t in targets for m in modes]


@dataclass
class BenchPlan:
    series: list[Series]
    levels: list[int]
    endpoint: Endpoint
    prompts: list[Prompt]          #: the prompt sequence of every (level, series): num_prompts long
    warmup_prompts: list[Prompt]
    max_tokens: int
    temperature: float
    ignore_eos: bool
    timeout: float
    #: every level x series runs this many times, the series interleaved and their order rotated by one
    #: each repeat
    repeats: int = 1
    #: with temperature > 0: the nucleus, and the base of the per-prompt seeds (prompt i: seed + i, in
    #: every series, level and repeat, so a lossless server gives every series the same answers)
    top_p: float = 1.0
    seed: int = 0
    #: "clear": empty each server's prefix cache (POST /admin/prefix-cache/clear) before every series, so
    #: that no mode finds another's prompts computed; "keep": leave it (what a long-running server sees)
    prefix_cache: str = "clear"

    @property
    def num_prompts(self) -> int:
        return len(self.prompts)

    @property
    def targets(self) -> list[Target]:
        out: list[Target] = []
        for s in self.series:
            if all(t is not s.target for t in out):
                out.append(s.target)
        return out


def build_payload(prompt: Prompt, series: Series, plan: BenchPlan) -> dict[str, Any]:
    """The JSON body of one streamed request.

    >>> from trtlade.bench.datasets import Prompt
    >>> t = Target("a", "http://h", model="m")
    >>> p = BenchPlan([], [1], Endpoint("completions", "/v1/completions"), [], [], 50, 0.0, True, 60)
    >>> build_payload(Prompt(0, text="Hi"), Series("ar", t, Mode("ar", AUTOREGRESSIVE)), p)
    ... # doctest: +NORMALIZE_WHITESPACE
    {'model': 'm', 'max_tokens': 50, 'temperature': 0.0, 'stream': True,
     'stream_options': {'include_usage': True}, 'prompt': 'Hi', 'ignore_eos': True,
     'lookahead': {'w': 1, 'n': 1, 'g': 0}}
    >>> import dataclasses
    >>> sampled = dataclasses.replace(p, temperature=0.7, top_p=0.95, seed=100)
    >>> body = build_payload(Prompt(3, text="Hi"), Series("ar", t, Mode("ar", AUTOREGRESSIVE)), sampled)
    >>> {k: v for k, v in body.items() if k in ("temperature", "top_p", "seed")}
    {'temperature': 0.7, 'top_p': 0.95, 'seed': 103}
    """
    body: dict[str, Any] = {
        "model": series.target.model,
        "max_tokens": plan.max_tokens,
        "temperature": plan.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if plan.temperature > 0:
        if plan.top_p < 1.0:
            body["top_p"] = plan.top_p
        body["seed"] = plan.seed + prompt.index
    if plan.endpoint.kind == "chat":
        body["messages"] = prompt.chat_messages()
    else:
        if prompt.text is None:
            raise PlanError(f"prompt {prompt.where} is a chat message list; the completions endpoint "
                            "takes text", option="--endpoint", hint="use --endpoint chat with this dataset")
        body["prompt"] = prompt.text
    if plan.ignore_eos:
        body["ignore_eos"] = True
    lookahead = series.mode.payload()
    if lookahead is not None:
        body["lookahead"] = lookahead
    if series.mode.speculation is not None:
        body["speculation"] = dict(series.mode.speculation)
    return body

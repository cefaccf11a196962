"""Which TensorRT-LLM releases run which drafter, and which trtlade commands serve them: one table.

TensorRT-LLM's TensorRT-engine backend (``trtllm-build`` engines, the C++ executor) is the only one that ever
ran Lookahead; its PyTorch backend drafts without a model with NGram (from 1.0) and SA (from a 1.3.0 release
candidate), and from 1.3 on it is the only backend. trtlade deploys Lookahead engines on 0.16 <= v < 1.3 and
NGram / SA / AUTO on the PyTorch backend from 1.0 (its 1.0-1.2 NGram is the host-side pool,
``serve.ngram_implementation: host_pool`` on the reference engine). Every row names the sources it was read
from; the table is printed by ``trtlade build --architectures`` and kept in docs/reference/trtllm-compat.md.

    >>> release_for("1.2.1").lookahead, release_for("1.3.0").lookahead, release_for("1.3.0").drafters
    (True, False, ('NGram', 'SA', 'AUTO'))
    >>> release_for("0.19.0").drafters
    ()
    >>> release_for("9.0.0").note                                  # newer than any release read: accepted
    'newer than 1.3.0rc25, the newest release read: assumed like 1.3 (check its release notes)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from trtlade.trtllm.compat import MAX_VERSION_EXCLUSIVE, MIN_VERSION, parse_version, release_key

if TYPE_CHECKING:
    from trtlade.schedule import LookaheadSchedule

__all__ = ["Release", "RELEASES", "NEWEST_READ", "release_for", "lookahead_refusal_1_3", "EQUIVALENT_SPECULATION",
           "flow_mapping", "equivalent_speculation", "releases_markdown", "ENGINE_BACKEND_GONE", "serve_config_flag",
           "FLAGS_VS_FILE"]

#: The newest release the sources read mention (a 1.3.0 release candidate whose quickstart builds
#: NGramDecodingConfig: ai-dynamo/dynamo PR #14339, 2026-09-04).
NEWEST_READ = "1.3.0rc25"

#: The one statement of when the TensorRT-engine backend (and Lookahead with it) went away, for code and docs.
ENGINE_BACKEND_GONE = (
    "trtlade treats every 1.3 release, release candidates included, as having no TensorRT-engine backend and no "
    "Lookahead (as pip's '<1.3' excludes 1.3.0rcN too): upstream deprecated the backend in NVIDIA/TensorRT-LLM#11723 "
    "and removed it in #15918 / #16369; the first tag without it is 1.3.0rc21 (ai-dynamo/dynamo#11769), so "
    "1.3.0rc1 to rc20 may still carry it, but trtlade does not build or serve Lookahead on them")

#: Which side wins when a trtllm-serve flag and its --config file set the same LLM argument.
FLAGS_VS_FILE = (
    "the file wins where trtllm-serve merges it with update_llm_args_with_extra_dict(llm_args, file) alone "
    "(tensorrt_llm/commands/serve.py@00209af1 and every earlier serve.py read); explicit flags win where it also "
    "passes explicit_cli_keys (the parameter exists from llm_args.py@00043967 on; which release's serve.py first "
    "passes it is not pinned by the sources read). trtlade's trtllm-serve commands pass no LLM argument as a flag "
    "(only the checkpoint, --host, --port and --tokenizer), so both readings give the same server")


def serve_config_flag(release: str) -> str:
    """trtllm-serve's option for the YAML file on ``release``: ``--extra_llm_api_options`` exists on every release
    trtlade supports; ``--config`` is its alias from NVIDIA/TensorRT-LLM#9104 (merged 2025-11, with
    ``env_overrides``), so trtlade writes ``--config`` only from 1.3 on, where every release has it.

    >>> serve_config_flag("1.2.1"), serve_config_flag("1.3.0rc25")
    ('--extra_llm_api_options', '--config')
    """
    return "--config" if not release_for(release).engine_backend else "--extra_llm_api_options"


#: What trtlade proposes instead of a Lookahead spec on 1.3+ until `trtlade tune` measured your traffic: SA with
#: 4 draft tokens and the longest match, the best of the model-free drafters on the `mix` prompts
#: (docs/results/2026-11-28-drafters.md).
EQUIVALENT_SPECULATION = {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}


@dataclass(frozen=True)
class Release:
    """A range of releases ``first <= v < end`` (None: open) and what it runs."""

    first: str
    end: Optional[str]
    engine_backend: bool         #: trtllm-build engines and the C++ executor
    lookahead: bool              #: Lookahead decoding (engine backend only)
    drafters: tuple[str, ...]    #: model-free drafters of the PyTorch backend (speculative_config)
    ngram: Optional[str]         #: how its NGram drafts: host_pool or one_model (None: no NGram)
    commands: str                #: what trtlade does with it
    sources: str
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.first} <= v" + (f" < {self.end}" if self.end else "")


RELEASES: tuple[Release, ...] = (
    Release("0.16.0", "1.0.0", True, True, (), None,
            "build --wng, serve --engine trtllm (executor), export triton / k8s, export grps (0.16 engines: "
            "grps_trtllm runs TensorRT-LLM 0.16), validate-config",
            "Lookahead in the engine flow from 0.13 (0.16: the oldest trtlade was checked against); the PyTorch "
            "backend is a preview without NGram (release notes up to 1.0)"),
    Release("1.0.0", "1.3.0", True, True, ("NGram", "AUTO"), "host_pool",
            "all of the above but export grps; NGram / AUTO on the PyTorch backend: build --speculation, serve "
            "--engine trtllm (LLM API), export triton (llmapi) / k8s",
            "release notes 1.0 (\"Add NGrams V2 support\", \"Auto-enable ngram with concurrency <= 32\"); "
            "tensorrt_llm/_torch/speculative/ngram.py@02499765 (NGramPoolManager, host side); "
            "auto_heuristic.py@7274a594"),
    Release("1.3.0", None, False, False, ("NGram", "SA", "AUTO"), "one_model",
            "build --speculation, serve --engine trtllm (LLM API), export triton (llmapi) / k8s, validate-config; "
            "no Lookahead, no engine, no grps_trtllm",
            "NVIDIA/TensorRT-LLM#11723 (engine backend deprecated), #15918 / #16369 / #15907 (removed: TrtLlmArgs, "
            "BuildConfig, the C++ executor, Triton's inflight_batcher_llm; the first tag without them is 1.3.0rc21 "
            "per ai-dynamo/dynamo#11769, and trtlade treats every 1.3.0rcN as without); SA: #11434; "
            "llm_args.py@a1a20970 (no LookaheadDecodingConfig); NGram on the GPU: ngram.py@a1a20970 (the first "
            "release with it is not pinned by the sources read)"),
)


def releases_markdown() -> str:
    """:data:`RELEASES` as the Markdown table of docs/reference/trtllm-compat.md (a test keeps the page equal to it)."""
    head = ("releases", "Lookahead engine", "PyTorch-backend drafters", "NGram drafts on", "what trtlade does",
            "sources")
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    where = {"host_pool": "the host (NGramPoolManager)", "one_model": "the GPU (one-model)", None: "-"}
    for row in RELEASES:
        lines.append(f"| {row.label} | {'yes' if row.lookahead else 'no'} | {', '.join(row.drafters) or '-'} | "
                     f"{where[row.ngram]} | {row.commands} | {row.sources} |")
    return "\n".join(lines) + "\n"


def release_for(version: str) -> Release:
    """The row of ``version`` (a newer one than the table's: the last row, with a note); ValueError for text
    that is not a version, and for releases older than trtlade's floor."""
    v = parse_version(version)
    minor = (v.major, v.minor)  # 1.3.0rcN counts as 1.3, as pip's "<1.3" excludes 1.3 pre-releases too
    if minor < MIN_VERSION:
        raise ValueError(f"TensorRT-LLM {version} is older than 0.16, the oldest release trtlade supports")
    for row in RELEASES:
        if _minor(row.first) <= minor and (row.end is None or minor < _minor(row.end)):
            if row.end is None and minor > MAX_VERSION_EXCLUSIVE and release_key(version) > release_key(NEWEST_READ):
                return Release(**{**row.__dict__, "note": f"newer than {NEWEST_READ}, the newest release read: "
                                                          "assumed like 1.3 (check its release notes)"})
            return row
    return RELEASES[-1]  # pragma: no cover - the last row is open-ended


def _minor(version: str) -> tuple[int, int]:
    v = parse_version(version)
    return (v.major, v.minor)


def flow_mapping(block: dict) -> str:
    """A block as a YAML flow mapping, for hints: ``{decoding_type: SA, max_draft_len: 4}``.

    >>> flow_mapping(EQUIVALENT_SPECULATION)
    '{decoding_type: SA, max_draft_len: 4, max_matching_ngram_size: -1}'
    """
    def text(value: object) -> str:
        return ("true" if value else "false") if isinstance(value, bool) else str(value)
    return "{" + ", ".join(f"{k}: {text(v)}" for k, v in block.items()) + "}"


def equivalent_speculation(schedule: Optional["LookaheadSchedule"] = None, max_batch_size: int = 8) -> dict:
    """:data:`EQUIVALENT_SPECULATION`, with a load-aware Lookahead schedule carried over as upstream's gate: a
    schedule that drafts up to ``k`` requests and then stops is ``max_concurrency: k``; one that drafts less as
    load grows is a ``draft_len_schedule`` whose draft lengths shrink with the bands' own draft budgets (the
    first band drafts ``max_draft_len``, as upstream requires; a band without ``up_to`` that still drafts is
    keyed by ``max_batch_size``). Upstream keys by the batch of each step, trtlade's bands by the requests in
    flight at admission: the same load, counted per step rather than fixed per request.

    >>> from trtlade.schedule import LookaheadSchedule as S
    >>> equivalent_speculation(S.parse([{"up_to": 4, "spec": "4,2,4"}, {"spec": "1,1,0"}]))["max_concurrency"]
    4
    >>> equivalent_speculation(S.parse([{"up_to": 2, "spec": "4,3,4"}, {"up_to": 8, "spec": "2,2,2"},
    ...                                 {"spec": "1,1,0"}]))["draft_len_schedule"]
    {2: 4, 8: 1}
    """
    block = dict(EQUIVALENT_SPECULATION)
    if schedule is None:
        return block
    bands = list(schedule.bands)
    while bands and bands[-1].spec.max_draft_len == 0:
        bands.pop()  # above every key upstream drafts nothing
    if not bands:
        return block
    draft = block["max_draft_len"]
    if len(bands) == 1:
        if bands[0].up_to is not None:
            block["max_concurrency"] = bands[0].up_to
        return block
    top = bands[0].spec.max_draft_len or 1
    table: dict[int, int] = {}
    for band in bands:
        key = band.up_to if band.up_to is not None else max(max_batch_size, max(table, default=0) + 1)
        budget = band.spec.max_draft_len
        table[key] = 0 if budget == 0 else max(1, min(draft, round(draft * budget / top)))
    table[min(table)] = draft
    block["draft_len_schedule"] = table
    return block


def lookahead_refusal_1_3(version: str) -> Optional[str]:
    """Why a Lookahead deployment cannot target ``version`` (None: it can).

    >>> lookahead_refusal_1_3("1.2.1") is None, lookahead_refusal_1_3("1.3.0rc21")[:50]
    (True, 'TensorRT-LLM 1.3.0rc21 has no TensorRT-engine back')
    """
    if release_for(version).lookahead:
        return None
    return (f"TensorRT-LLM {version} has no TensorRT-engine backend and no Lookahead: from 1.3 on only the PyTorch "
            "backend serves, and its model-free drafters are NGram, SA and AUTO (NVIDIA/TensorRT-LLM#15918, "
            "#16369; llm_args.py has no LookaheadDecodingConfig; release candidates 1.3.0rcN count as 1.3)")

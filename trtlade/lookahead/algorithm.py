"""Lookahead decoding, one sequence, as TensorRT-LLM's ``LookaheadAlgorithm`` runs it (greedy).

No model in here: the caller runs the forward pass. One request is driven as::

    algo = LookaheadAlgorithm(LookaheadSpec(3, 3, 2), eos_token_ids=(eos,), seed=0)
    algo.setup(prompt, golden)             # golden = argmax of the prefill's last row, at p = len(prompt)
    while not done:
        batch = algo.prepare()             # rows: tokens, positions (depth from p), mask, logit_rows
        argmax = forward(batch)            # one argmax per row (rows outside logit_rows: anything, e.g. -1)
        v = algo.verify(argmax)            # v.tokens: 1..N new tokens; v.kept_rows: whose KV to keep
        algo.commit(len(v.tokens))         # or fewer, when EOS / a stop string / max_tokens cut the run

Notation: W window size, N n-gram size, G verification set size; the golden token g is the last
accepted token, at position p, without KV yet. Window cell (column j, level l) guesses position
p + j + l; column 0 level 0 *is* g.

Worked example, W=3 N=3 G=2 in steady state: window level 0 = g a1 a2, level 1 = b0 b1 b2, pool
candidates for g: (u1 u2) and (v1 v2). Rows, TensorRT-LLM order (column-major window, then
candidates), with depth (position - p) and visibility (x = row sees column)::

              g  b0 a1 b1 a2 b2 u1 u2 v1 v2
    g    0    x
    b0   1    x  x
    a1   1    x     x
    b1   2    x     x  x
    a2   2    x     x     x
    b2   3    x     x     x  x
    u1   1    x                 x
    u2   2    x                 x  x
    v1   1    x                       x
    v2   2    x                       x  x

The mask is derived from the depths alone (:func:`parents_from_positions`): every row sees g, its
ancestors and itself. After the forward, y[i] = argmax of row i:

* verify: t0 = y[g]; every root path (a candidate chain, a1 -> b1, a1 -> a2 -> b2, ...) is walked
  while draft == expected and draft is not EOS; the longest walk wins (first on ties), at most N-1
  drafts; emitted = t0 and y after each accepted draft (1..N tokens).
* commit: Jacobi update: the new top level of column j is y[top row of column j] (b0, b1, b2 here),
  one n-gram per column is harvested into the pool (key = level 0, value = levels 1.. + the new
  token; TensorRT-LLM keys column 0 by y[g] instead of g), the window shifts down one level
  (b0 b1 b2 becomes level 0); every n-gram ending in an emitted token enters the pool; the last
  emitted token becomes the new g.

Rows with identical root paths are merged into a trie (TensorRT-LLM's ``treeEncode``, window and
candidate rows alike): fewer rows, the same tokens, positions are depths.

Two deliberate, token-neutral differences from the C++ code: the trie keeps first-seen order
(``std::unordered_map`` order is unspecified) and a walk stops at N-1 drafts (TensorRT-LLM walks on
and clamps afterwards), so rows deeper than N-1 need no logits unless the Jacobi update reads them.
Neither changes an emitted token or the pool/window state; only which of several equivalent rows
is reported in ``kept_rows``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from trtlade.lookahead.pool import NgramPool, ngrams
from trtlade.lookahead.prompt_lookup import PromptIndex
from trtlade.lookahead.suffix_automaton import SuffixAutomaton
from trtlade.spec import LookaheadSpec

__all__ = [
    "DraftBatch",
    "Verification",
    "LookaheadAlgorithm",
    "parents_from_positions",
    "ancestors_from_parents",
    "mask_from_parents",
    "window_layout",
    "window_tokens",
    "tree_encode",
    "select_logit_rows",
    "verify_tree",
    "jacobi_update",
    "ALONE_SOURCES",
]

NO_PARENT = -1
#: candidate sources verified only on their own (``prepare(source=...)``), never in the tree of every
#: candidate (``source=None``, with or without the window): another sequence's text (``public``)
ALONE_SOURCES = ("public",)
#: a match of the text's longest earlier suffix this long or longer drafts a longer suffix candidate
#: (:func:`suffix_chain_length`)
LONG_MATCH = 4


def suffix_chain_length(base: int, match: int) -> int:
    """Draft tokens of the suffix candidate after a match of ``match`` tokens, ``base`` being the
    ``suffix_lookup`` of the algorithm: ``base``, and after a match of :data:`LONG_MATCH` tokens or more
    that many more, at most ``3 * base`` (a step with the window still verifies N-1 of them). The longer
    the earlier suffix the text repeats, the longer the repeat tends to go on: replaying the greedy answers
    of the bundled ``mix`` prompts (the embedded model, bfloat16), SA's chain of 4 accepts 0.47 drafts on
    average after a 1-token match, 1.1 after 2, 1.6 after 3, 2.2-3.2 after 4 or more; with this length the
    same answers take 639 steps instead of 655 for 3.10 rows a step instead of 2.96
    (``benchmarks/history_replay.py``).

    >>> [suffix_chain_length(4, m) for m in (1, 3, 4, 6, 8, 20)]
    [4, 4, 8, 10, 12, 12]
    """
    return base if match < LONG_MATCH else min(base + match, 3 * base)


# ----------------------------------------------------------------------------------------- data
@dataclass(frozen=True, eq=False)
class DraftBatch:
    """The rows of one lookahead step. Row 0 is the golden token g at depth 0.

    ``tokens[i]`` is fed at position ``p + positions[i]``; ``parents[i]`` is the row it extends
    (-1 for row 0; 0 for depth-1 rows); row i sees the KV prefix, g, its ancestors and itself
    (``ancestors[i]``, ``mask_array()``). ``logit_rows``: the only rows whose argmax
    :meth:`LookaheadAlgorithm.verify` / ``commit`` read (ascending, row 0 first).

    Counts: ``num_window_rows`` / ``num_candidate_rows`` are before dedup (g excluded);
    ``num_rows_before_dedup = 1 + both``; ``num_rows`` is after dedup.
    """

    tokens: list[int]
    positions: list[int]
    parents: list[int]
    logit_rows: list[int]
    num_window_rows: int = 0
    num_candidate_rows: int = 0
    num_candidates: int = 0
    #: for every window column, the row whose argmax becomes the column's new top level
    window_top_rows: tuple[int, ...] = ()
    #: pre-dedup row -> row in this batch (identity when nothing was merged)
    encode_map: tuple[int, ...] = field(default=(), repr=False)
    #: whether the Jacobi window's rows are in the batch (False: candidates only, see ``prepare``)
    with_window: bool = True
    #: candidates cut to this many tokens (None: whole)
    depth: int | None = None
    #: only the candidates of this source (``pool``, ``prompt_lookup``, ``suffix``, ``public``; None: every source
    #: but the ones verified alone, :data:`ALONE_SOURCES`)
    source: str | None = None
    #: per row, where its token came from: ``golden``, ``window`` (the Jacobi branch), ``pool`` (the n-gram
    #: pool), ``prompt_lookup``, ``suffix`` (the longest earlier suffix) or ``public`` (another sequence's
    #: text); a row several candidates share is the first one's
    row_sources: tuple[str, ...] = ()
    #: the most drafts a path of these rows may accept (None: N-1): N-1 with the window; without it, the
    #: longest candidate
    max_drafts: int | None = None

    @property
    def num_rows(self) -> int:
        return len(self.tokens)

    @property
    def num_rows_before_dedup(self) -> int:
        return 1 + self.num_window_rows + self.num_candidate_rows

    @cached_property
    def ancestors(self) -> tuple[tuple[int, ...], ...]:
        """Per row, the rows it sees, ascending (row 0 and itself included)."""
        return ancestors_from_parents(self.parents)

    def mask_array(self) -> np.ndarray:
        """``num_rows x num_rows`` boolean array, ``[i, j]`` = row i sees row j (read-only, cached)."""
        return self._mask

    @cached_property
    def _mask(self) -> np.ndarray:
        mask = mask_from_parents(self.parents)
        mask.flags.writeable = False
        return mask

    def expand_argmax(self, logit_row_argmax: Sequence[int], fill: int = -1) -> list[int]:
        """Argmax values given for ``logit_rows`` only -> one value per row (``fill`` elsewhere)."""
        if len(logit_row_argmax) != len(self.logit_rows):
            raise ValueError(
                f"expected {len(self.logit_rows)} argmax values (one per logit row), got {len(logit_row_argmax)}"
            )
        full = [fill] * len(self.tokens)
        for row, value in zip(self.logit_rows, logit_row_argmax):
            full[row] = int(value)
        return full


@dataclass(frozen=True)
class Verification:
    """What a step emits: ``tokens`` (y[g], then y after each accepted draft) and ``kept_rows``
    (row 0, then the accepted draft rows, root first); ``len(tokens) == len(kept_rows)``. The KV of
    ``kept_rows`` is kept, compacted at positions p, p+1, ...
    """

    tokens: list[int]
    kept_rows: list[int]

    @property
    def num_accepted_drafts(self) -> int:
        return len(self.tokens) - 1


# ----------------------------------------------------------------------------------------- layout
def parents_from_positions(positions: Sequence[int]) -> list[int]:
    """TensorRT-LLM's position-to-mask rule as parents. ``positions[0]`` must be the root (g).

    Walk the rows in order with a stack: pop entries whose position is >= this row's, the position
    must then be top + 1, the top is the parent, push.

    >>> parents_from_positions([0, 1, 1, 2, 2, 3, 1, 2, 1, 2])   # g | b0 a1 b1 a2 b2 | u1 u2 v1 v2
    [-1, 0, 0, 2, 2, 4, 0, 6, 0, 8]
    """
    if not positions:
        return []
    parents = [NO_PARENT]
    stack = [(0, positions[0])]
    for row in range(1, len(positions)):
        pos = positions[row]
        while stack and stack[-1][1] >= pos:
            stack.pop()
        if not stack or pos != stack[-1][1] + 1:
            raise ValueError(f"row {row} at position {pos} does not extend any open path (positions {list(positions)})")
        parents.append(stack[-1][0])
        stack.append((row, pos))
    return parents


def ancestors_from_parents(parents: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Per row: ancestors and itself, ascending. Parents must precede their children.

    >>> ancestors_from_parents([-1, 0, 0, 2])
    ((0,), (0, 1), (0, 2), (0, 2, 3))
    """
    out: list[tuple[int, ...]] = []
    for row, parent in enumerate(parents):
        out.append((row,) if parent < 0 else out[parent] + (row,))
    return tuple(out)


def mask_from_parents(parents: Sequence[int]) -> np.ndarray:
    """The boolean visibility matrix: ``[i, j]`` is True iff row j is row i or one of its ancestors."""
    n = len(parents)
    mask = np.zeros((n, n), dtype=bool)
    for row, parent in enumerate(parents):
        if parent >= 0:
            mask[row] = mask[parent]
        mask[row, row] = True
    return mask


@lru_cache(maxsize=256)
def window_layout(w: int, n: int, filling: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Depths, parents and per-column top rows of the lookahead branch (rows numbered from 1; 0 = g).

    ``filling`` = number of filled window levels (1..N-1). Warm-up (filling < N-1): a chain of
    N-2-filling prefill tokens at depths 1.., then column j's filled levels l at depth
    N-1-filling+j+l. Steady state (filling = N-1): column 0's levels 1..N-2 at depths 1..N-2, column
    j >= 1 levels 0..N-2 at depths j+l. Top row of a column = its highest filled level (column 0's
    top in steady state with N = 2 is g itself, row 0).

    >>> window_layout(3, 3, 2)        # b0 | a1 b1 | a2 b2
    ((1, 1, 2, 2, 3), (0, 0, 2, 2, 4), (1, 3, 5))
    >>> window_layout(3, 3, 1)        # warm-up: level 0 only, a chain at depths 1, 2, 3
    ((1, 2, 3), (0, 1, 2), (1, 2, 3))
    """
    depths: list[int] = []
    tops: list[int] = []
    if filling < n - 1:
        prefill = n - 2 - filling
        depths.extend(range(1, prefill + 1))
        for col in range(w):
            start = prefill + 1 + col
            depths.extend(range(start, start + filling))
            tops.append(len(depths))  # row index = count so far (row 0 is g)
    else:
        depths.extend(range(1, n - 1))
        tops.append(len(depths))  # n == 2: no column-0 rows, top is g (row 0)
        for col in range(1, w):
            depths.extend(range(col, col + n - 1))
            tops.append(len(depths))
    parents = parents_from_positions([0, *depths])[1:]
    return tuple(depths), tuple(parents), tuple(tops)


def window_tokens(window: Sequence[Sequence[int]], prefills: Sequence[int], filling: int, n: int) -> list[int]:
    """The lookahead-branch tokens in :func:`window_layout` order (``window[j][l]`` = column j, level l)."""
    if filling < n - 1:
        out = list(prefills[filling:])
        for column in window:
            out.extend(column[:filling])
        return out
    out = list(window[0][1:])
    for column in window[1:]:
        out.extend(column)
    return out


# ----------------------------------------------------------------------------------------- dedup
def tree_encode(
    tokens: Sequence[int], parents: Sequence[int]
) -> tuple[list[int], list[int], list[int], list[int]]:
    """Merge rows with identical root paths into a trie; return (tokens, depths, parents, encode_map).

    Row 0 is the root. Rows come out in depth-first pre-order, children in first-seen order, so the
    result is again a layout whose mask follows from its depths; ``encode_map[i]`` is the new row of
    input row i. Without duplicates the layout is returned unchanged.

    >>> tree_encode([9, 4, 5, 4, 6], [-1, 0, 1, 0, 3])      # g->4->5 and g->4->6 share "4"
    ([9, 4, 5, 6], [0, 1, 2, 2], [-1, 0, 1, 1], [0, 1, 2, 1, 3])
    """
    node_of = [0] * len(tokens)
    children: list[list[int]] = [[]]
    node_token = [tokens[0]]
    index: dict[tuple[int, int], int] = {}
    for row in range(1, len(tokens)):
        key = (node_of[parents[row]], tokens[row])
        node = index.get(key)
        if node is None:
            node = len(node_token)
            index[key] = node
            node_token.append(tokens[row])
            children.append([])
            children[key[0]].append(node)
        node_of[row] = node
    # depth-first pre-order renumbering
    order: list[int] = []
    new_parent: list[int] = []
    depth: list[int] = []
    new_index = [0] * len(node_token)
    stack: list[tuple[int, int, int]] = [(0, NO_PARENT, 0)]
    while stack:
        node, parent_row, d = stack.pop()
        new_index[node] = len(order)
        order.append(node)
        new_parent.append(parent_row)
        depth.append(d)
        row = new_index[node]
        for child in reversed(children[node]):
            stack.append((child, row, d + 1))
    return [node_token[nd] for nd in order], depth, new_parent, [new_index[nd] for nd in node_of]


# ----------------------------------------------------------------------------------------- verify
def select_logit_rows(
    tokens: Sequence[int], positions: Sequence[int], parents: Sequence[int], max_drafts: int,
    eos: frozenset[int], extra: Iterable[int] = (),
) -> list[int]:
    """Rows whose argmax can be read: row 0, every row that could be accepted (depth <= max_drafts,
    not EOS, parent acceptable) and ``extra`` (the Jacobi top rows)."""
    acceptable = [False] * len(tokens)
    acceptable[0] = True
    for row in range(1, len(tokens)):
        acceptable[row] = (
            positions[row] <= max_drafts and acceptable[parents[row]] and tokens[row] not in eos
        )
    chosen = set(extra)
    chosen.update(row for row, ok in enumerate(acceptable) if ok)
    return sorted(chosen)


def verify_tree(
    tokens: Sequence[int], positions: Sequence[int], parents: Sequence[int], argmax: Sequence[int],
    max_drafts: int, eos: frozenset[int],
) -> Verification:
    """Greedy acceptance over every root path of the tree (parents precede children).

    A row is accepted iff its parent is accepted, its token equals the parent's argmax and it is not
    EOS; the deepest accepted row (first on ties, at most ``max_drafts`` deep) gives the path.

    >>> # g=9 | b0=7  a1=3 b1=4  a2=5 b2=6 ; y[g]=3, y[a1]=5, y[a2]=8: path a1 -> a2 (b2=6 != 8)
    >>> verify_tree([9, 7, 3, 4, 5, 6], [0, 1, 1, 2, 2, 3], [-1, 0, 0, 2, 2, 4],
    ...             [3, -1, 5, -1, 8, -1], max_drafts=2, eos=frozenset())
    Verification(tokens=[3, 5, 8], kept_rows=[0, 2, 4])
    """
    accepted = [False] * len(tokens)
    accepted[0] = True
    best, best_depth = 0, 0
    for row in range(1, len(tokens)):
        depth = positions[row]
        if depth > max_drafts:
            continue
        parent = parents[row]
        if accepted[parent] and tokens[row] == argmax[parent] and tokens[row] not in eos:
            accepted[row] = True
            if depth > best_depth:
                best, best_depth = row, depth
    path: list[int] = []
    row = best
    while row > 0:
        path.append(row)
        row = parents[row]
    path.append(0)
    path.reverse()
    return Verification(tokens=[int(argmax[r]) for r in path], kept_rows=path)


# ----------------------------------------------------------------------------------------- update
def jacobi_update(
    window: list[list[int]], filling: int, new_tops: Sequence[int]
) -> list[tuple[int, tuple[int, ...]]]:
    """Apply one Jacobi step to ``window`` in place; return the harvested (key, value) per column.

    Warm-up (``filling`` < N-1 levels filled): the new tokens fill level ``filling``; nothing is
    harvested. Steady state: column j's n-gram is (level 0; levels 1.. + new token), harvested with
    key = level 0, then the column shifts down one level and the new token becomes its top.

    >>> w = [[1, 2], [3, 4]]
    >>> jacobi_update(w, 2, [5, 6]), w
    ([(1, (2, 5)), (3, (4, 6))], [[2, 5], [4, 6]])
    """
    levels = len(window[0]) if window else 0
    if filling < levels:
        for column, token in zip(window, new_tops):
            column[filling] = token
        return []
    harvested = []
    for column, token in zip(window, new_tops):
        key = column[0]
        del column[0]
        column.append(token)
        harvested.append((key, tuple(column)))
    return harvested


# ----------------------------------------------------------------------------------------- algorithm
def glibc_rand(seed: int) -> Iterator[int]:
    """The numbers glibc's ``rand()`` gives after ``srand(seed)`` (its default generator: the additive feedback
    ``r[i] = r[i-31] + r[i-3]`` over 32 bits, seeded by ``16807 * r mod (2**31 - 1)``, its first 310 outputs
    discarded, each output ``r >> 1``), in pure Python so that every platform draws what TensorRT-LLM, a Linux
    program, draws for a lookahead window.

    >>> draw = glibc_rand(1)
    >>> [next(draw) for _ in range(3)]                  # glibc: srand(1); rand(), rand(), rand()
    [1804289383, 846930886, 1681692777]
    >>> next(glibc_rand(0)) == next(glibc_rand(1))      # glibc takes a seed of 0 as 1
    True
    """
    state = list(_glibc_state(seed & 0xFFFFFFFF))
    while True:
        value = (state[-31] + state[-3]) & 0xFFFFFFFF
        state.append(value)
        del state[0]
        yield value >> 1


@lru_cache(maxsize=64)
def _glibc_state(seed: int) -> tuple[int, ...]:
    """The last 34 words of glibc's ``srandom_r`` state after seeding and its 310 discarded outputs."""
    word = seed or 1
    word = word - 2**32 if word >= 2**31 else word  # glibc keeps the seed as an int32
    r = [word]
    for _ in range(30):  # Schrage's method for 16807 * word mod (2**31 - 1), C's truncating division
        hi = abs(word) // 127773 * (1 if word >= 0 else -1)
        word = 16807 * (word - hi * 127773) - 2836 * hi
        word += 2147483647 if word < 0 else 0
        r.append(word)
    r += r[:3]
    for _ in range(310):
        r.append((r[-31] + r[-3]) & 0xFFFFFFFF)
    return tuple(r[-34:])


class LookaheadAlgorithm:
    """Lookahead decoding state for one sequence: n-gram pool, Jacobi window, golden token.

    ``spec``: the request's (w, n, g) (anything :meth:`LookaheadSpec.parse` reads). Specs with
    ``max_draft_len == 0`` ((1,1,0), (1,2,0)) are plain autoregressive decoding: ``prepare`` returns
    only the golden row. ``eos_token_ids``: drafts equal to one of them are never accepted.
    ``seed``: the window is initialised from the prompt with glibc's ``srand(seed)`` / ``rand()`` (:func:`glibc_rand`,
    what TensorRT-LLM's ``LookaheadAlgorithm::setup`` draws with) at every
    ``setup`` (same seed, same prompt -> same run). ``corrected_keying``: key column 0's harvested
    n-gram by g (as the authors' lade does) instead of y[g] (TensorRT-LLM, default).
    ``full_guess_set``: verify up to G candidates; by default, like TensorRT-LLM (its
    ``guess(lastToken, mW)`` in ``lookaheadAlgorithm.cpp`` at 2a9abd95, NVIDIA/TensorRT-LLM#4003), at most
    min(W, G) candidates are verified, which differs only when W < G (a later revision, 22d95135, asks for G:
    ``full_guess_set=True``). ``dedup``: merge identical root paths (results are identical
    either way; False is for tests). ``prompt_lookup`` / ``suffix_lookup``: draft tokens of one more
    candidate each (0: off, TensorRT-LLM's algorithm exactly): the tokens after the latest earlier
    occurrence of the text's last 1-3 tokens (:mod:`~trtlade.lookahead.prompt_lookup`), and after the
    earliest occurrence of its longest suffix seen earlier (:mod:`~trtlade.lookahead.suffix_automaton`: what
    TensorRT-LLM's SA drafter proposes). A step with the Jacobi window verifies at most N-1 of their tokens
    (a path there accepts at most N-1 drafts, as in TensorRT-LLM); a step without it (``prepare(window=False)``)
    verifies them whole, as NGram and SA verify their drafts. ``peers``: a collaborator giving up to k draft
    tokens from other sequences' text (NGram's public pool: what followed this text's last tokens there), the
    ``public`` candidate, verified only alone (``prepare(window=False, source="public")``); None: none.
    """

    def __init__(
        self, spec: LookaheadSpec | Sequence[int] | str, *, eos_token_ids: Iterable[int] = (), seed: int = 0,
        corrected_keying: bool = False, full_guess_set: bool = False, dedup: bool = True,
        prompt_lookup: int = 0, suffix_lookup: int = 0, peers: Callable[[int], Sequence[int]] | None = None,
    ) -> None:
        self.spec = LookaheadSpec.parse(spec)
        for name, value in (("prompt_lookup", prompt_lookup), ("suffix_lookup", suffix_lookup)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a whole number of draft tokens >= 0, got {value!r}")
        #: draft tokens of the prompt-lookup / suffix candidates (0: off; cut to N-1 in a step with the window)
        self.prompt_lookup = prompt_lookup
        self.suffix_lookup = suffix_lookup
        self._suffixes: SuffixAutomaton | None = None
        self.peers = peers
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer (runs are reproducible), got {seed!r}")
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.seed = seed
        self.corrected_keying = corrected_keying
        self.full_guess_set = full_guess_set
        self.dedup = dedup
        w, n, g = self.spec.as_tuple()
        self._w, self._n, self._g = w, n, g
        #: candidates verified per step (TensorRT-LLM asks the pool for W of its <= G entries)
        self.max_candidates = g if full_guess_set else min(w, g)
        self._max_drafts = n - 1
        self.autoregressive = self.spec.is_autoregressive
        self.pool = NgramPool(capacity_per_key=g)
        self.window: list[list[int]] = []
        self.prefills: list[int] = []
        self.filling = 0
        self.golden: int | None = None
        self.position = 0  # p: position of the golden token
        self._tail: list[int] = []  # the last N-1 committed tokens (g included)
        #: prompt + committed tokens (g included), indexed for prompt lookup
        self._history = PromptIndex()
        self._batch: DraftBatch | None = None
        #: this step's candidates with their source (found once per step; None: not yet)
        self._step_candidates: tuple[tuple[tuple[int, ...], str], ...] | None = None
        self._argmax: list[int] | None = None
        self._verification: Verification | None = None

    # ------------------------------------------------------------------------- setup
    def setup(self, prompt: Sequence[int], golden: int) -> None:
        """Start a sequence: ``golden`` is the first generated token (at p = len(prompt), no KV yet).

        Seeds the pool with every n-gram of prompt + [golden]; draws the N-2 warm-up prefill tokens,
        then level 0 of each of the W columns, each ``prompt[rand() % len(prompt)]`` after ``srand(seed)``, as
        TensorRT-LLM's ``LookaheadAlgorithm::setup`` draws them (``cpp/tensorrt_llm/layers/lookaheadAlgorithm.cpp``),
        so that a request's window, and so its steps, are the ones a TensorRT-LLM server's would be.
        """
        prompt = [int(t) for t in prompt]
        if not prompt:
            raise ValueError("the prompt is empty: lookahead needs at least one prompt token")
        n, w = self._n, self._w
        self.pool.clear()
        self.golden = int(golden)
        self.position = len(prompt)
        context = prompt + [self.golden]
        self._tail = _last(context, n - 1)
        self._history = PromptIndex(context if self.prompt_lookup else ())
        self._suffixes = SuffixAutomaton(context) if self.suffix_lookup and not self.autoregressive else None
        self._batch = self._argmax = self._verification = self._step_candidates = None
        if self.autoregressive:
            self.window, self.prefills, self.filling = [], [], 0
            return
        self.pool.seed_from(context, n)
        draw = glibc_rand(self.seed)
        self.prefills = [prompt[next(draw) % len(prompt)] for _ in range(n - 2)]
        self.window = [[-1] * (n - 1) for _ in range(w)]
        for column in self.window:
            column[0] = prompt[next(draw) % len(prompt)]
        self.filling = 1

    # ------------------------------------------------------------------------- prepare
    def prepare(self, window: bool = True, depth: int | None = None, source: str | None = None) -> DraftBatch:
        """The rows of the next forward pass (the same batch again until ``commit``).

        ``window=False``: the golden row and the candidates only (n-gram pool and prompt lookup),
        without the Jacobi window's rows -- fewer rows, the same verification; the window then does
        not move at ``commit`` (as after :meth:`advance`). ``depth``: candidates cut to their first
        ``depth`` tokens (fewer rows, at most ``depth`` accepted drafts). ``source``: only that source's
        candidates (:meth:`sources`; with ``window=False``: one drafter's chain, as NGram or SA would
        verify it). Lossless either way.

        >>> algo = LookaheadAlgorithm((2, 3, 2), seed=0)
        >>> algo.setup([5, 6, 7, 5, 6], golden=7)
        >>> full, short = algo.prepare().num_rows, algo.prepare(window=False)
        >>> full, short.num_rows, short.tokens, short.with_window
        (5, 3, [7, 5, 6], False)

        One source's chain cut short keeps its rows where another source's guess starts the same way: prompt
        lookup's ``8 9 5`` cut to one draft is ``8``, as the pool's ``8 9`` starts.

        >>> algo = LookaheadAlgorithm((2, 3, 2), seed=0, prompt_lookup=3)
        >>> algo.setup([5, 6, 7, 8, 9, 5, 6], golden=7)
        >>> algo.candidates(), algo.prepare(window=False, depth=1, source="prompt_lookup").tokens
        ([((8, 9), 'pool'), ((8, 9, 5), 'prompt_lookup')], [7, 8])
        """
        if self.golden is None:
            raise RuntimeError("prepare() before setup(): call setup(prompt, golden) first")
        if self._batch is not None and ((self._batch.with_window, self._batch.depth, self._batch.source)
                                        == (window, depth, source) or self.autoregressive):
            return self._batch
        if self.autoregressive:
            self._batch = DraftBatch(tokens=[self.golden], positions=[0], parents=[NO_PARENT], logit_rows=[0],
                                     encode_map=(0,))
            return self._batch
        self._batch = self._build_batch(window, depth, source)
        return self._batch

    def sources(self) -> dict[str, int]:
        """This step's candidates by source: draft tokens each source proposes (its rows beyond the
        golden one when verified alone); a source without a candidate now is absent.

        >>> algo = LookaheadAlgorithm((2, 3, 2), seed=0, prompt_lookup=2, suffix_lookup=2)
        >>> algo.setup([5, 6, 7, 5, 6], golden=7)
        >>> algo.sources(), algo.prepare(window=False, source="pool").tokens
        ({'pool': 2}, [7, 5, 6])

        Another sequence wrote ``6 7 8 9`` (``peers``): its ``public`` candidate is verified only alone.

        >>> algo = LookaheadAlgorithm((2, 3, 2), seed=0, prompt_lookup=2, suffix_lookup=2, peers=lambda k: [8, 9][:k])
        >>> algo.setup([5, 6, 7, 5, 6], golden=7)
        >>> algo.sources(), algo.prepare(window=False, source="public").tokens, algo.prepare(window=False).tokens
        ({'pool': 2, 'public': 2}, [7, 8, 9], [7, 5, 6])
        """
        if self.golden is None or self.autoregressive:
            return {}
        out: dict[str, int] = {}
        for cand, source in self._all_candidates():
            out[source] = out.get(source, 0) + len(cand)
        return out

    def candidates(self, depth: int | None = None) -> list[tuple[tuple[int, ...], str]]:
        """This step's whole candidates with their source (what :meth:`sources` counts); ``depth``: cut to their
        first ``depth`` tokens as :meth:`prepare`'s rows are (a cut candidate the same as an earlier one's is
        that one's).

        >>> algo = LookaheadAlgorithm((2, 3, 2), seed=0, prompt_lookup=3)
        >>> algo.setup([5, 6, 7, 8, 5, 6], golden=7)
        >>> algo.candidates(), algo.candidates(depth=1)
        ([((8, 5), 'pool'), ((8, 5, 6), 'prompt_lookup')], [((8,), 'pool')])
        """
        return [] if self.golden is None or self.autoregressive else self._candidates(depth)

    def _build_batch(self, with_window: bool = True, depth: int | None = None,
                     source: str | None = None) -> DraftBatch:
        n = self._n
        if with_window:
            w_depths, w_parents, tops = window_layout(self._w, n, self.filling)
            w_tokens = window_tokens(self.window, self.prefills, self.filling, n)
        else:
            w_depths, w_parents, tops, w_tokens = (), (), (), []
        tokens = [self.golden, *w_tokens]
        positions = [0, *w_depths]
        parents = [NO_PARENT, *w_parents]
        num_window = len(w_depths)
        only = source
        cut = depth  # a path through the window accepts at most N-1 drafts: longer candidates are cut
        if with_window:
            cut = n - 1 if depth is None else min(depth, n - 1)
        if only is not None:  # one source's candidates, cut within it (not lost to another source's equal cut)
            cut_own: dict[tuple[int, ...], str] = {}
            for cand, source in self._all_candidates():
                if source == only:
                    cut_own.setdefault(cand if cut is None else cand[:cut], source)
            candidates = list(cut_own.items())
        else:  # a source verified alone never joins the other candidates' tree
            candidates = [c for c in self._candidates(cut) if c[1] not in ALONE_SOURCES]
        sources = ["golden", *(["window"] * num_window)]
        for cand, source in candidates:
            row = len(tokens)
            tokens.extend(cand)
            positions.extend(range(1, len(cand) + 1))
            parents.append(0)
            parents.extend(range(row, row + len(cand) - 1))
            sources.extend([source] * len(cand))
        num_cand_rows = len(tokens) - 1 - num_window
        if self.dedup:
            tokens, positions, parents, encode = tree_encode(tokens, parents)
            top_rows = tuple(encode[r] for r in tops)
        else:
            encode = list(range(len(tokens)))
            top_rows = tops
        row_sources = [""] * len(tokens)
        for before, after in enumerate(encode):
            row_sources[after] = row_sources[after] or sources[before]
        max_drafts = max([n - 1, *(len(c) for c, _ in candidates)]) if not with_window else n - 1
        logit_rows = select_logit_rows(tokens, positions, parents, max_drafts, self.eos_token_ids, top_rows)
        return DraftBatch(
            tokens=tokens, positions=positions, parents=parents, logit_rows=logit_rows,
            num_window_rows=num_window, num_candidate_rows=num_cand_rows, num_candidates=len(candidates),
            window_top_rows=top_rows, encode_map=tuple(encode), with_window=with_window, depth=depth,
            row_sources=tuple(row_sources), source=only, max_drafts=max_drafts,
        )

    def _candidates(self, depth: int | None) -> list[tuple[tuple[int, ...], str]]:
        """The step's guesses with their source: the pool's, then prompt lookup's and the longest earlier
        suffix's (each left out when it is a prefix of one before it), cut to ``depth`` tokens."""
        out = list(self._all_candidates())
        if depth is not None:
            cut: dict[tuple[int, ...], str] = {}
            for cand, source in out:
                cut.setdefault(cand[:depth], source)
            out = list(cut.items())
        return out

    def _all_candidates(self) -> tuple[tuple[tuple[int, ...], str], ...]:
        """The step's whole candidates, found once per step (kept until ``commit`` / ``advance``)."""
        if self._step_candidates is None:
            self._step_candidates = tuple(self._find_candidates())
        return self._step_candidates

    def suffix_drafts(self, match: int) -> int:
        """Draft tokens of the suffix candidate after a match of ``match`` tokens (:func:`suffix_chain_length`).

        >>> algo = LookaheadAlgorithm((2, 4, 2), suffix_lookup=4)
        >>> [algo.suffix_drafts(m) for m in (3, 4, 20)]
        [4, 8, 12]
        """
        return suffix_chain_length(self.suffix_lookup, match)

    def _find_candidates(self) -> list[tuple[tuple[int, ...], str]]:
        out = [(tuple(c), "pool") for c in self.pool.guess(self.golden, self.max_candidates)]
        extra = []
        if self.prompt_lookup:
            extra.append((tuple(self._history.propose(self.prompt_lookup)), "prompt_lookup"))
        if self._suffixes is not None and (found := self._suffixes.lookup()) is not None:
            extra.append((tuple(self._suffixes.continuation(found[0], self.suffix_drafts(found[1]))), "suffix"))
        if self.peers is not None:
            extra.append((tuple(int(t) for t in self.peers(max(self.prompt_lookup, self._n - 1))), "public"))
        for cand, source in extra:
            if cand and cand not in {c[:len(cand)] for c, _ in out}:
                out.append((cand, source))
        return out

    # ------------------------------------------------------------------------- verify
    def verify(self, argmax: Sequence[int], targets: Sequence[int] | None = None) -> Verification:
        """Accept the longest matching draft path (no state change besides remembering the result
        for ``commit``). ``argmax``: one entry per row of the prepared batch. ``targets``: the token
        each row chose when that is not its argmax -- a sampled request's keyed draw at the row
        (:mod:`trtlade.reference.sampling`); the path and the emitted tokens follow ``targets``, the
        Jacobi window still moves with ``argmax`` (drafts never read a draw).

        >>> algo = LookaheadAlgorithm((1, 3, 1), seed=0)
        >>> algo.setup([4, 5, 6, 4], golden=5)          # the pool guesses 6 4 after 5
        >>> algo.prepare(window=False).tokens           # g and the candidate only
        [5, 6, 4]
        >>> algo.verify([6, 4, 8]).tokens                # greedy: both drafts match, bonus 8
        [6, 4, 8]
        >>> algo.verify([6, 4, 8], targets=[6, 9, 8]).tokens   # the draw after 6 was 9, not 4
        [6, 9]
        """
        batch = self._batch
        if batch is None:
            raise RuntimeError("verify() before prepare(): call prepare() and run its rows first")
        for name, values in (("argmax", argmax), ("targets", targets)):
            if values is not None and len(values) != batch.num_rows:
                raise ValueError(f"expected one {name} entry per row ({batch.num_rows}), got {len(values)}")
        argmax = [int(a) for a in argmax]
        chosen = argmax if targets is None else [int(t) for t in targets]
        max_drafts = self._max_drafts if batch.max_drafts is None else batch.max_drafts
        result = verify_tree(batch.tokens, batch.positions, batch.parents, chosen, max_drafts, self.eos_token_ids)
        self._argmax, self._verification = argmax, result
        return result

    # ------------------------------------------------------------------------- commit
    def commit(self, num_tokens: int | None = None) -> None:
        """Apply the step, keeping the first ``num_tokens`` (default all) of the last verification's tokens.

        Order as in TensorRT-LLM: Jacobi update and window harvest, then every n-gram ending in a
        kept token enters the pool, then the last kept token becomes the golden token.
        """
        v, argmax, batch = self._verification, self._argmax, self._batch
        if v is None or argmax is None or batch is None:
            raise RuntimeError("commit() before verify(): call prepare(), verify(argmax), then commit()")
        count = len(v.tokens) if num_tokens is None else num_tokens
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= len(v.tokens):
            raise ValueError(
                f"num_tokens must be between 1 and {len(v.tokens)} (the verified tokens), got {num_tokens!r}"
            )
        kept = v.tokens[:count]
        if not self.autoregressive:
            if batch.with_window:
                self._update_window(batch, argmax)
            self._accept(kept)
        self.golden = kept[-1]
        self.position += count
        self._batch = self._argmax = self._verification = self._step_candidates = None

    def advance(self, token: int) -> None:
        """A step that ran the golden row only -- its drafts were dropped because the batch's token
        budget had no room for them (TensorRT-LLM's ``fitDraftTokens``): ``token``, the argmax of
        that row, becomes the new golden token. The window does not move (no Jacobi rows ran); the
        n-grams ending in ``token`` enter the pool. Lossless like any step.

        >>> algo = LookaheadAlgorithm((2, 3, 2), seed=0)
        >>> algo.setup([5, 6, 7, 5, 6], golden=7)
        >>> window = [list(col) for col in algo.window]
        >>> algo.prepare().num_rows > 1       # what the step would have computed
        True
        >>> algo.advance(9)                    # ... but only g ran, and its argmax was 9
        >>> algo.golden, algo.position, algo.window == window, algo.pool.guess(6, 2)   # 6 7 9 entered
        (9, 6, True, [(7, 5), (7, 9)])
        """
        if self.golden is None:
            raise RuntimeError("advance() before setup(): call setup(prompt, golden) first")
        if not self.autoregressive:
            self._accept([int(token)])
        self.golden = int(token)
        self.position += 1
        self._batch = self._argmax = self._verification = self._step_candidates = None

    def _update_window(self, batch: DraftBatch, argmax: Sequence[int]) -> None:
        steady = self.filling >= self._n - 1
        harvested = jacobi_update(self.window, self.filling, [argmax[r] for r in batch.window_top_rows])
        if steady:
            key0 = self.golden if self.corrected_keying else argmax[0]
            harvested[0] = (key0, harvested[0][1])
            self.pool.insert_all(harvested)
        else:
            self.filling += 1

    def _accept(self, kept: Sequence[int]) -> None:
        if self.prompt_lookup:
            self._history.extend(kept)
        if self._suffixes is not None:
            for token in kept:
                self._suffixes.extend(token)
        seq = self._tail + list(kept)
        self.pool.insert_all(ngrams(seq, self._n))
        self._tail = _last(seq, self._n - 1)


def _last(seq: list[int], count: int) -> list[int]:
    """The last ``count`` items of ``seq`` (all of them if shorter; none if count <= 0)."""
    return seq[max(0, len(seq) - count):] if count > 0 else []

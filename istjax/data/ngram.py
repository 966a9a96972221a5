"""Character n-gram count tables: the trivial baselines of a character-level language model.

A language model that does not beat a table of counts has learned nothing but counting. An order-``n`` table
predicts the next character from the ``n - 1`` before it, with add-one (Laplace) smoothing, so every character of
the vocabulary (``V`` of them) has a probability::

    P(c | h) = (count(h c) + a) / (count(h .) + a V)        a = ``smoothing`` (1: add-one)

with ``count(h c)`` the times the training text holds ``h`` followed by ``c`` and ``count(h .)`` the times ``h`` is
followed by any character (the unigram table: ``h`` empty, ``count(.)`` the characters counted).

On a data set of windows (`istjax.data.text`: ``x [N, C]``, ``y [N, C]`` the next character at every position),
the table is fit on the training windows (each window's ``C + 1`` characters: ``x`` then ``y``'s last; an n-gram is
counted within a window) and scored on the same windows the model is evaluated on: the cross-entropy in nats per
character, the mean of ``-log P(y[t] | x[t-n+2 .. t])`` over every position of every window, which is what the
model's ``test_loss`` is. A position has only the window's own characters before it, as the model does: where the
window holds fewer than ``n - 1`` of them (``t < n - 2``), the table of the longest history it holds scores it (a
trigram table scores position 0 with the bigram table). ``test_accuracy`` is the fraction of positions whose most
likely next character (the lowest id among equals) is the true one.

Counts are kept sparse (the n-grams seen, sorted), so a large vocabulary costs the text's n-grams, not ``V**n``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from istjax.core.errors import ArgError

__all__ = ["NGramTable", "fit_ngram", "window_text", "ngram_scores", "ngram_baselines"]

NAMES = {1: "unigram", 2: "bigram", 3: "trigram"}


class NGramTable(NamedTuple):
    """Order-``order`` counts over ``vocab_size`` characters: ``grams [G]`` the codes (``sum_j id_j V^(n-1-j)``)
    of the n-grams seen, sorted, with their ``gram_counts [G]``; ``histories [H]`` the codes of their first ``n - 1``
    characters, sorted, with ``history_counts [H]`` (``count(h .)``); ``smoothing`` the ``a`` above."""
    order: int
    vocab_size: int
    smoothing: float
    grams: np.ndarray
    gram_counts: np.ndarray
    histories: np.ndarray
    history_counts: np.ndarray

    def count(self, ids: Sequence[int]) -> int:
        """How often the n-gram ``ids`` (``order`` character ids) occurs in the text the table was fit on; with
        fewer ids, how often that history is followed by a character."""
        ids = [int(i) for i in ids]
        codes, counts = ((self.grams, self.gram_counts) if len(ids) == self.order
                         else (self.histories, self.history_counts))
        return int(_lookup(codes, counts, _code(np.asarray(ids, np.int64)[None, :], self.vocab_size))[0])

    def log_prob(self, history: np.ndarray, nxt: np.ndarray) -> np.ndarray:
        """``log P(next | history)`` (module docstring), elementwise: ``history [..., order - 1]`` and ``next
        [...]`` character ids."""
        history, nxt = np.asarray(history, np.int64), np.asarray(nxt, np.int64)
        h = _code(history, self.vocab_size)
        gram = h * self.vocab_size + nxt
        a = self.smoothing
        num = _lookup(self.grams, self.gram_counts, gram) + a
        den = _lookup(self.histories, self.history_counts, h) + a * self.vocab_size
        return np.log(num) - np.log(den)


def _code(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    """``[..., k]`` ids -> ``[...]`` codes ``sum_j id_j V^(k-1-j)`` (0 for k = 0)."""
    code = np.zeros(ids.shape[:-1], np.int64)
    for j in range(ids.shape[-1]):
        code = code * vocab_size + ids[..., j]
    return code


def _lookup(codes: np.ndarray, counts: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``counts`` at ``query``'s codes in the sorted ``codes``, 0 where a code is absent (float64)."""
    if not len(codes):
        return np.zeros(np.shape(query))
    i = np.clip(np.searchsorted(codes, query), 0, len(codes) - 1)
    return np.where(codes[i] == query, counts[i], 0).astype(np.float64)


def fit_ngram(sequences: Sequence[Any] | np.ndarray, vocab_size: int, order: int,
              smoothing: float = 1.0) -> NGramTable:
    """The order-``order`` table of ``sequences`` (each a 1-D array of character ids in ``[0, vocab_size)``; a
    ``[N, T]`` array is N sequences), n-grams counted within each sequence (`window_text` gives a data set's).

    Raises:
      ArgError: an order below 1, a smoothing that is not positive, ids outside the vocabulary, or no n-gram.
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise ArgError("order", order, f"order={order!r}:", "give 1 (unigram), 2 (bigram), 3 (trigram) or more.")
    if not smoothing > 0:
        raise ArgError("smoothing", smoothing, f"smoothing={smoothing!r}:", "give a positive count, e.g. 1 (add-one).")
    grams = []
    for seq in sequences:
        s = np.asarray(seq, np.int64)
        if s.size and (s.min() < 0 or s.max() >= vocab_size):
            raise ArgError("sequences", int(s.max() if s.max() >= vocab_size else s.min()),
                           f"a character id lies outside [0, {vocab_size});", "pass ids of the vocabulary the table "
                                                                              "is over.")
        if len(s) >= order:
            grams.append(_code(np.lib.stride_tricks.sliding_window_view(s, order), vocab_size))
    if not grams:
        raise ArgError("sequences", 0, f"no sequence holds {order} characters;", "fit on longer text.")
    grams, gram_counts = np.unique(np.concatenate(grams), return_counts=True)
    heads = grams // vocab_size  # each n-gram's history
    histories = np.unique(heads)
    history_counts = np.bincount(np.searchsorted(histories, heads), weights=gram_counts,
                                 minlength=len(histories)).astype(np.int64)
    return NGramTable(int(order), int(vocab_size), float(smoothing), grams, gram_counts.astype(np.int64),
                      histories, history_counts)


def window_text(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[N, C + 1]``: each window's characters (``x``, then the next character of its last position)."""
    x, y = np.asarray(x), np.asarray(y)
    return np.concatenate([x, y[:, -1:]], axis=1)


def _position_log_probs(tables: Sequence[NGramTable], x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[N, C]`` ``log P(y[:, t] | ...)`` under ``tables[-1]`` (``tables[k - 1]`` of order ``k``), positions
    with a shorter history in the window under the longest table they allow (module docstring)."""
    x, y = np.asarray(x, np.int64), np.asarray(y, np.int64)
    out = np.empty(x.shape, np.float64)
    n = tables[-1].order
    for t in range(x.shape[1]):
        table = tables[min(n, t + 2) - 1]
        k = table.order - 1
        out[:, t] = table.log_prob(x[:, t - k + 1:t + 1] if k else x[:, :0], y[:, t])
    return out


def ngram_scores(tables: Sequence[NGramTable], x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """``{"test_loss", "test_accuracy"}`` of ``tables[-1]`` on the windows ``x``, ``y`` (module docstring):
    nats per character and next-character accuracy. ``tables``: orders 1 .. n of one text."""
    loss = -_position_log_probs(tables, x, y).mean()
    V = tables[-1].vocab_size
    best = np.zeros(np.shape(x), np.float64) - np.inf
    guess = np.zeros(np.shape(x), np.int64)
    for c in range(V):  # the most likely next character, the lowest id among equals
        lp = _position_log_probs(tables, x, np.full(np.shape(y), c))
        better = lp > best
        best, guess = np.where(better, lp, best), np.where(better, c, guess)
    return {"test_loss": float(loss), "test_accuracy": float(np.mean(guess == np.asarray(y)))}


def ngram_baselines(data: Any, orders: Sequence[int] = (1, 2, 3), smoothing: float = 1.0) -> dict[str, dict]:
    """``{"unigram": {...}, "bigram": {...}, "trigram": {...}}``: each order's table fit on ``data``'s training
    windows, scored on its evaluated windows (`ngram_scores`), with what it is (a character-level text
    `istjax.data.Dataset`)."""
    if not getattr(data, "vocabulary", None):
        raise ArgError("data", getattr(data, "name", data), "n-gram tables are baselines of character-level text;",
                       "use a data set with a vocabulary (data.name='shakespeare' or 'text').")
    text = window_text(data.train_x, data.train_y)
    tables = [fit_ngram(text, int(data.num_classes), k, smoothing) for k in range(1, max(orders) + 1)]
    return {NAMES.get(k, f"{k}-gram"): {
        "what": f"{NAMES.get(k, f'{k}-gram')} count table, add-{smoothing:g} smoothing, fit on the training windows",
        **ngram_scores(tables[:k], data.test_x, data.test_y)} for k in orders}

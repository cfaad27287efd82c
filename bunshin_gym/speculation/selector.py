"""Spec Tool Selector (BunshinRL §3.3): predicts a rollout's next tool call(s) from its history.

Owns: featurising a call history, the trained classifier, its n-gram backoff fallback, top-k and K-call
chain prediction, evaluation, and the saved-model format. Does not own: running predicted calls, forking,
or deciding which samples to speculate for (`tail.py`); it knows nothing of a concrete env (signatures
are opaque strings; the only structure used is the tool name = the text before the first ``(`` or space).

Model. A multinomial logistic regression (scikit-learn) over hashed sparse features of the history:

    =======================  =======================================================================
    feature                  meaning
    =======================  =======================================================================
    ``l{j}=<sig>``           the j-th last call (j = 1..window), ``<s>`` past the start
    ``t{j}=<tool>``          its tool name (generalises across argument values)
    ``g2=``, ``g3=``          the last 2 / 3 calls as one n-gram
    ``seen=<sig>``           every call seen so far in the rollout (bag; long-range dependencies such as
                             "which item was opened at step 0" that an n-gram window cannot see)
    ``task=<id>``            the task id, alone and crossed with the last call
    ``pos=<n>``              the number of calls so far (capped at 32)
    =======================  =======================================================================

An end-of-rollout label (``EOS``) is learned too, so a chain stops where rollouts usually stop.

Fallback. `NGramBackoff`: counts of the next call after the last ``order-1`` calls (task-specific first,
then across tasks), backing off to shorter contexts (stupid backoff, factor 0.4), with 1/(N+1) of the
probability left for an unseen call after a context seen N times. It is used when fewer
than ``min_train_examples`` training examples exist, and can be forced with ``source="ngram"`` (that is the
baseline `evaluate` compares against).
"""

from __future__ import annotations

import math
import pickle
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SelectorDependencyMissing, SelectorFormatError, SelectorNotTrained
from .trajectories import Trajectory

EOS = "\x00<eos>"
_FORMAT = "bunshin-spec-tool-selector"
_VERSION = 1


def _sklearn() -> Any:
    try:
        import sklearn
    except ImportError as e:
        raise SelectorDependencyMissing() from e
    return sklearn


def tool_name(signature: str) -> str:
    """The tool part of a signature: text before the first ``(`` or whitespace."""
    for i, ch in enumerate(signature):
        if ch == "(" or ch.isspace():
            return signature[:i]
    return signature


@dataclass(frozen=True)
class SelectorConfig:
    """Configuration of a `SpecToolSelector`."""

    model: str = "logreg"
    """``"logreg"`` (classifier + fallback; needs scikit-learn) or ``"ngram"`` (fallback only, no deps)."""
    window: int = 4
    """How many last calls become positional features."""
    ngram_order: int = 3
    """Order of the fallback n-gram model (context = last ``order - 1`` calls)."""
    n_features: int = 1 << 14
    """Hashed feature space size (the model holds ``n_features x classes`` weights)."""
    use_task_id: bool = True
    """Condition on the task id (features and fallback)."""
    bag_of_calls: bool = True
    """Add ``seen=`` features for every call so far (long-range context)."""
    min_train_examples: int = 100
    """Below this many (history, next call) examples only the fallback is trained and used."""
    max_classes: int = 512
    """The classifier learns the most frequent next calls up to this many; rarer ones are left to the
    fallback (their examples are dropped from the classifier's training set)."""
    min_class_count: int = 1
    """A next call must occur at least this often to be a classifier class."""
    C: float = 10.0
    """Inverse L2 regularisation of the logistic regression."""
    max_iter: int = 100
    """Optimiser epochs (saga: fast on sparse hashed features; lbfgs was ~10x slower here)."""
    tol: float = 1e-3
    """Optimiser stopping tolerance."""
    seed: int = 0


def validate_selector_config(cfg: SelectorConfig) -> None:
    checks = [("model", cfg.model in ("logreg", "ngram"), "'logreg' or 'ngram'"), ("window", cfg.window >= 1, ">= 1"), ("ngram_order", cfg.ngram_order >= 1, ">= 1"),
              ("n_features", cfg.n_features >= 16, ">= 16"), ("min_train_examples", cfg.min_train_examples >= 0, ">= 0"),
              ("max_classes", cfg.max_classes >= 2, ">= 2"), ("min_class_count", cfg.min_class_count >= 1, ">= 1"),
              ("C", cfg.C > 0, "> 0"), ("max_iter", cfg.max_iter >= 1, ">= 1"), ("tol", cfg.tol > 0, "> 0")]
    for name, ok, expected in checks:
        if not ok:
            raise ValueError(f"SelectorConfig.{name}={getattr(cfg, name)!r} is invalid: expected {expected}")


@dataclass(frozen=True, slots=True)
class Prediction:
    """A predicted next call.

    Attributes:
        signature: the predicted canonical signature.
        prob: the predictor's probability of this call given the history (and earlier chain calls).
        chain_prob: product of ``prob`` along a predicted chain up to and including this call.
        source: ``"model"`` (classifier) or ``"ngram"`` (fallback).
    """

    signature: str
    prob: float
    chain_prob: float
    source: str


@dataclass(frozen=True)
class SelectorReport:
    """Accuracy of a selector on held-out trajectories (every position of every rollout)."""

    examples: int
    top1: float
    """Fraction of positions whose true next call is the top prediction."""
    topk: float
    """Fraction whose true next call is among the top ``k``."""
    k: int
    chain_len: int
    chain_match: float
    """Mean number of leading calls of a ``chain_len``-call predicted chain that match the actual next calls,
    divided by ``chain_len`` (what speculation of K calls can adopt before the first mismatch aborts it)."""
    source: str


def features(history: Sequence[str], task_id: str | None, cfg: SelectorConfig) -> list[str]:
    """The hashed-feature strings of a history (see the module docstring's table)."""
    n = len(history)
    f = [f"pos={min(n, 32)}"]
    for j in range(1, cfg.window + 1):
        if n - j < 0:
            f.append(f"l{j}=<s>")
            break
        sig = history[n - j]
        f.append(f"l{j}={sig}")
        f.append(f"t{j}={tool_name(sig)}")
    for m in (2, 3):
        if n >= m:
            f.append(f"g{m}=" + "\x1f".join(history[n - m:]))
    if cfg.bag_of_calls:
        for sig in set(history):
            f.append(f"seen={sig}")
    if cfg.use_task_id and task_id is not None:
        f.append(f"task={task_id}")
        f.append(f"task={task_id}|l1={history[-1] if n else '<s>'}")
    return f


class NGramBackoff:
    """Frequency model of the next call given the last ``order - 1`` calls, with backoff (the fallback)."""

    def __init__(self, order: int = 3, use_task_id: bool = True):
        self.order = order
        self.use_task_id = use_task_id
        self.counts: dict[tuple[str | None, tuple[str, ...]], Counter[str]] = defaultdict(Counter)

    def fit(self, trajectories: Iterable[Trajectory], *, with_eos: bool = True) -> NGramBackoff:
        for t in trajectories:
            self.update(t.task_id, t.signatures, with_eos=with_eos)
        return self

    def update(self, task_id: str | None, signatures: Sequence[str], *, with_eos: bool = True) -> None:
        seq = list(signatures) + ([EOS] if with_eos else [])
        for i, nxt in enumerate(seq):
            for m in range(min(self.order - 1, i) + 1):
                ctx = tuple(seq[i - m:i])
                self.counts[(None, ctx)][nxt] += 1
                if self.use_task_id and task_id is not None:
                    self.counts[(task_id, ctx)][nxt] += 1

    def distribution(self, history: Sequence[str], task_id: str | None = None, top: int = 16) -> list[tuple[str, float]]:
        """``[(signature, prob)]`` best first (may include `EOS`); empty if nothing was ever seen.

        The probabilities sum to N/(N+1), N the number of times the most specific context matched was seen:
        1/(N+1) is left for a continuation never seen there (PPM's escape, method A). A context seen once
        predicts its call with 0.5, not 1: the speculator weighs a run-ahead by it.
        """
        scores: dict[str, float] = {}
        weight = 1.0
        evidence = 0
        for m in range(min(self.order - 1, len(history)), -1, -1):
            ctx = tuple(history[len(history) - m:]) if m else ()
            keys = ([(task_id, ctx)] if self.use_task_id and task_id is not None else []) + [(None, ctx)]
            for key in keys:
                c = self.counts.get(key)
                if not c:
                    continue
                total = sum(c.values())
                evidence = evidence or total
                for sig, cnt in c.most_common(top):
                    if sig not in scores:
                        scores[sig] = weight * cnt / total
                weight *= 0.4
            if len(scores) >= top:
                break
        z = sum(scores.values())
        if not z:
            return []
        seen = evidence / (evidence + 1)
        return sorted(((s, v / z * seen) for s, v in scores.items()), key=lambda x: -x[1])[:top]


class SpecToolSelector:
    """Predicts the next call(s) of a rollout. ``fit`` on recorded trajectories, then ``predict``.

    Example::

        sel = SpecToolSelector().fit(read_trajectories("runs/it3/trajectories.jsonl"))
        chain = sel.predict_chain(history, n_calls=3, task_id=task, min_chain_prob=0.3)
        # speculate chain[0].signature, chain[1].signature, ... on the live workspace (bunshin_gym.speculator)
        sel.save("runs/it3/selector.pkl"); sel = SpecToolSelector.load("runs/it3/selector.pkl")
    """

    def __init__(self, config: SelectorConfig | None = None):
        self.config = config or SelectorConfig()
        validate_selector_config(self.config)
        self.fallback = NGramBackoff(self.config.ngram_order, self.config.use_task_id)
        self.model: Any = None  # sklearn LogisticRegression once trained
        self.classes_: list[str] = []
        self.train_examples = 0
        self._hasher: Any = None
        self._w: Any = None  # fast-path weights, built on first prediction

    # -- training ----------------------------------------------------------------------------------------
    def _hasher_(self) -> Any:
        if self._hasher is None:
            _sklearn()
            from sklearn.feature_extraction import FeatureHasher
            self._hasher = FeatureHasher(n_features=self.config.n_features, input_type="string", alternate_sign=False)
        return self._hasher

    def _examples(self, trajectories: Iterable[Trajectory]) -> tuple[list[list[str]], list[str]]:
        X: list[list[str]] = []
        y: list[str] = []
        for t in trajectories:
            sigs = list(t.signatures) + [EOS]
            for i, nxt in enumerate(sigs):
                X.append(features(sigs[:i], t.task_id, self.config))
                y.append(nxt)
        return X, y

    def fit(self, trajectories: Iterable[Trajectory]) -> SpecToolSelector:
        """(Re)train from scratch on ``trajectories``. Returns self."""
        trajectories = list(trajectories)
        cfg = self.config
        self.fallback = NGramBackoff(cfg.ngram_order, cfg.use_task_id).fit(trajectories)
        X, y = self._examples(trajectories)
        self.train_examples = len(y)
        self.model, self.classes_ = None, []
        if cfg.model == "ngram" or len(y) < cfg.min_train_examples:
            return self
        _sklearn()
        freq = Counter(y)
        keep = {s for s, c in freq.most_common(cfg.max_classes) if c >= cfg.min_class_count}
        rows = [i for i, lab in enumerate(y) if lab in keep]
        if len(keep) < 2 or not rows:
            return self
        from sklearn.linear_model import LogisticRegression
        Xh = self._hasher_().transform([X[i] for i in rows])
        labels = [y[i] for i in rows]
        model = LogisticRegression(C=cfg.C, solver="saga", max_iter=cfg.max_iter, tol=cfg.tol, random_state=cfg.seed)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*(did not converge|max_iter was reached).*")
            model.fit(Xh, labels)
        self.model = model
        self.classes_ = [str(c) for c in model.classes_]
        self._w = None
        return self

    @property
    def trained(self) -> bool:
        return self.model is not None or bool(self.fallback.counts)

    # -- prediction --------------------------------------------------------------------------------------
    def _prepare_fast_path(self) -> None:
        """Cache the weights as a (features, classes) array and check that our direct murmurhash indexing
        reproduces FeatureHasher's (15x faster than predict_proba on one row; falls back if it doesn't)."""
        self._w = np.ascontiguousarray(self.model.coef_.T)
        self._b = np.asarray(self.model.intercept_, dtype=float)
        from sklearn.utils import murmurhash3_32
        self._mh = murmurhash3_32
        probe = ["l1=click(id=3)", "seen=type(text='x')", "task=t|l1=<s>", "pos=7", "g2=a\x1fb"]
        x = self._hasher_().transform([probe])
        ours = sorted(abs(murmurhash3_32(f, seed=0)) % self.config.n_features for f in probe)
        self._fast = ours == sorted(np.repeat(x.indices, x.data.astype(int)).tolist())

    def _proba(self, feats: list[str]) -> np.ndarray:
        if getattr(self, "_w", None) is None:
            self._prepare_fast_path()
        if self._fast:
            n = self.config.n_features
            idx = [abs(self._mh(f, seed=0)) % n for f in feats]
            z = self._w[idx].sum(axis=0) + self._b
        else:
            x = self._hasher_().transform([feats])
            z = x.data @ self._w[x.indices] + self._b
        if z.shape[0] == 1:  # binary: one logit for classes_[1]
            p1 = 1.0 / (1.0 + np.exp(-z[0]))
            return np.array([1.0 - p1, p1])
        z = np.exp(z - z.max())
        return z / z.sum()

    def _dist(self, history: Sequence[str], task_id: str | None, source: str) -> tuple[list[tuple[str, float]], str]:
        if not self.trained:
            raise SelectorNotTrained()
        if source == "auto":
            source = "model" if self.model is not None else "ngram"
        if source == "ngram":
            return self.fallback.distribution(history, task_id), "ngram"
        if source != "model":
            raise ValueError(f"source must be 'auto', 'model' or 'ngram', got {source!r}")
        if self.model is None:
            raise SelectorNotTrained()
        p = self._proba(features(history, task_id, self.config))
        order = np.argsort(-p)[:16]
        return [(self.classes_[i], float(p[i])) for i in order], "model"

    def predict(self, history: Sequence[str], task_id: str | None = None, k: int = 1, *,
                source: str = "auto") -> list[Prediction]:
        """Top-``k`` candidates for the next call, best first (fewer if fewer are known, empty if the
        predictor expects the rollout to end here).

        Args:
            history: the calls so far, oldest first.
            task_id: the task (improves predictions when trained with task ids).
            source: ``"auto"`` (model if trained, else fallback), ``"model"`` or ``"ngram"``.
        """
        dist, src = self._dist(history, task_id, source)
        out = []
        for sig, p in dist:
            if sig == EOS:
                if not out:
                    return []  # the most likely continuation is "no more calls"
                continue
            out.append(Prediction(sig, p, p, src))
            if len(out) == k:
                break
        return out

    def predict_chain(self, history: Sequence[str], n_calls: int, task_id: str | None = None, *,
                      min_chain_prob: float = 0.0, source: str = "auto") -> list[Prediction]:
        """A greedy chain of up to ``n_calls`` next calls (BunshinRL predicts K calls at a time).

        The chain stops early when the predicted continuation is the end of the rollout or when the
        chain probability drops below ``min_chain_prob``.
        """
        h = list(history)
        chain: list[Prediction] = []
        cum = 1.0
        for _ in range(n_calls):
            dist, src = self._dist(h, task_id, source)
            if not dist or dist[0][0] == EOS:
                break
            sig, p = dist[0]
            cum *= p
            if cum < min_chain_prob:
                break
            chain.append(Prediction(sig, p, cum, src))
            h.append(sig)
        return chain

    # -- evaluation --------------------------------------------------------------------------------------
    def evaluate(self, trajectories: Iterable[Trajectory], k: int = 3, chain_len: int = 3, *,
                 source: str = "auto") -> SelectorReport:
        """Top-1 / top-k accuracy and K-call chain match on ``trajectories`` (every position)."""
        n = top1 = topk = 0
        chain_hits = 0.0
        src_used = source
        for t in trajectories:
            sigs = t.signatures
            for i in range(len(sigs)):
                preds = self.predict(sigs[:i], t.task_id, k, source=source)
                if preds:
                    src_used = preds[0].source
                names = [p.signature for p in preds]
                n += 1
                top1 += bool(names) and names[0] == sigs[i]
                topk += sigs[i] in names
                chain = self.predict_chain(sigs[:i], chain_len, t.task_id, source=source)
                matched = 0
                for j, p in enumerate(chain):
                    if i + j < len(sigs) and p.signature == sigs[i + j]:
                        matched += 1
                    else:
                        break
                chain_hits += matched / chain_len
        if n == 0:
            return SelectorReport(0, math.nan, math.nan, k, chain_len, math.nan, src_used)
        return SelectorReport(n, top1 / n, topk / n, k, chain_len, chain_hits / n, src_used)

    def accuracy(self, test_trajectories: Iterable[Trajectory], k: int = 1, *, source: str = "auto") -> float:
        """Fraction of held-out positions whose true next call is in the top ``k`` predictions."""
        r = self.evaluate(test_trajectories, k=k, chain_len=1, source=source)
        return r.topk

    # -- persistence -------------------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Pickle the selector with a format/version header (load with `SpecToolSelector.load`)."""
        sklearn = _sklearn() if self.model is not None else None
        state = {"format": _FORMAT, "version": _VERSION, "sklearn_version": getattr(sklearn, "__version__", None),
                 "config": asdict(self.config), "model": self.model, "classes": self.classes_,
                 "train_examples": self.train_examples,
                 "fallback": {"order": self.fallback.order, "use_task_id": self.fallback.use_task_id,
                              "counts": {k: dict(v) for k, v in self.fallback.counts.items()}}}
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=5)
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> SpecToolSelector:
        """Load a selector saved by `save` (trusted files only: this unpickles)."""
        try:
            with open(path, "rb") as f:
                state = pickle.load(f)  # noqa: S301
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as e:
            raise SelectorFormatError(f"{path} is not a saved SpecToolSelector ({e}); retrain and save it") from e
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise SelectorFormatError(f"{path} is not a saved SpecToolSelector (format {state.get('format') if isinstance(state, dict) else type(state).__name__!r})")
        if state.get("version") != _VERSION:
            raise SelectorFormatError(f"{path} holds selector format version {state.get('version')}; this code "
                                      f"reads version {_VERSION}: retrain with SpecToolSelector().fit(...)")
        if state.get("model") is not None and state.get("sklearn_version") != _sklearn().__version__:
            warnings.warn(f"{path} was saved with scikit-learn {state.get('sklearn_version')}, running "
                          f"{_sklearn().__version__}; retrain if predictions look wrong", stacklevel=2)
        sel = cls(SelectorConfig(**state["config"]))
        sel.model, sel.classes_, sel.train_examples = state["model"], list(state["classes"]), state["train_examples"]
        fb = state["fallback"]
        sel.fallback = NGramBackoff(fb["order"], fb["use_task_id"])
        for k, v in fb["counts"].items():
            sel.fallback.counts[k] = Counter(v)
        return sel

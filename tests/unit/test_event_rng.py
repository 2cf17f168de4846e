"""The compiled seeding of the per-event generator gives numpy's own generator, draw for draw
(processors/event_rng.py): decisions, replays and archived logs do not depend on which one
seeded them."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np
import pytest

from banditflow.processors.event_rng import (
    _SeedWords,
    first_uniform,
    pcg64_seed_words,
    seeded_generator,
)
from banditflow.processors.redo import LazyGenerator, event_seed

# Where the entropy's word count changes (0 is one word; 2^32 needs two) and the extremes.
EDGES = [0, 1, 2**32 - 1, 2**32, 2**32 + 1, 2**63 - 1, 2**64 - 1]


def test_the_seed_words_are_seed_sequences_on_random_and_edge_seeds() -> None:
    draw = np.random.default_rng(2026)
    pairs = [(seed, digest) for seed in EDGES[:-1] for digest in EDGES]  # seeds are < 2^63
    pairs += [(int(draw.integers(0, 2**63)), int(draw.integers(0, 2**64, dtype=np.uint64)))
              for _ in range(3_000)]
    pairs += [(int(draw.integers(0, 100)), int(draw.integers(0, 2**32))) for _ in range(1_000)]
    for seed, digest in pairs:
        expected = np.random.SeedSequence([seed, digest]).generate_state(4, np.uint64)
        assert pcg64_seed_words(seed, digest).tolist() == expected.tolist(), (seed, digest)


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
@pytest.mark.parametrize("event_id", ["e1", "", "ü" * 300])
def test_event_seed_is_default_rng_of_the_seed_and_the_ids_digest(seed: int,
                                                                  event_id: str) -> None:
    digest = hashlib.blake2b(event_id.encode(), digest_size=8).digest()
    expected = np.random.default_rng([seed, int.from_bytes(digest, "little")])
    generator = event_seed(seed, event_id)
    assert generator.bit_generator.state == expected.bit_generator.state
    assert generator.random(5).tolist() == expected.random(5).tolist()
    assert generator.choice(10, p=np.full(10, 0.1)) == expected.choice(10, p=np.full(10, 0.1))


def test_the_first_uniform_is_the_generators_first_random() -> None:
    draw = np.random.default_rng(7)
    pairs = [(seed, digest) for seed in EDGES[:-1] for digest in EDGES]
    pairs += [(int(draw.integers(0, 2**63)), int(draw.integers(0, 2**64, dtype=np.uint64)))
              for _ in range(3_000)]
    for seed, digest in pairs:
        assert first_uniform(seed, digest) == np.random.default_rng([seed, digest]).random(), (
            seed, digest)


@pytest.mark.parametrize("calls", [
    [("random",), ("random",), ("random", 3)],
    [("random",), ("choice", 10), ("random",)],
    [("random", 2), ("random",)],
    [("integers", 5), ("random",)],
    [("random",), ("normal",), ("random",)],
])
def test_the_lazy_generator_gives_the_generators_values_in_any_order(
        calls: list[tuple]) -> None:
    # Its first random() skips building the generator; whatever comes after must go on from
    # the generator's own state.
    lazy, real = LazyGenerator(3, "e9"), event_seed(3, "e9")
    for name, *args in calls:
        got, expected = getattr(lazy, name)(*args), getattr(real, name)(*args)
        assert np.asarray(got).tolist() == np.asarray(expected).tolist(), (name, args)
    assert lazy.bit_generator.state == real.bit_generator.state


def test_a_lazy_generator_copies_and_pickles_with_its_first_draw() -> None:
    import copy
    import pickle

    lazy = LazyGenerator(3, "e9")
    first = lazy.random()
    for other in (copy.copy(lazy), copy.deepcopy(lazy), pickle.loads(pickle.dumps(lazy))):
        assert other.random() == event_seed(3, "e9").random(2)[1] != first


def test_generators_are_independent_objects() -> None:
    # A redo log keeps the generators of several decisions alive at once: one drawing must not
    # move another.
    first, second = seeded_generator(1, 2), seeded_generator(1, 2)
    first.random(100)
    assert second.random() == np.random.default_rng([1, 2]).random()


def test_the_seed_words_refuse_a_request_pcg64_does_not_make() -> None:
    with pytest.raises(ValueError, match="4 uint64 words"):
        _SeedWords(pcg64_seed_words(1, 2)).generate_state(8, np.uint32)


def test_numba_loads_at_the_first_draw_not_with_the_processors_or_ope() -> None:
    # A worker whose learners never draw (SPS) and `banditflow ope` on a log without candidate
    # sets do not pay for numba's import.
    done = subprocess.run(
        [sys.executable, "-c",
         "import sys; import banditflow.processors.processor, banditflow.offline.ope.evaluation; "
         "assert 'numba' not in sys.modules, 'numba imported'; "
         "from banditflow.processors.redo import LazyGenerator; LazyGenerator(1, 'e').random(); "
         "assert 'numba' in sys.modules"],
        capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

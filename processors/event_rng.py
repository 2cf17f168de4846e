"""The per-event generator's seeding, compiled: the very generator
``np.random.default_rng([seed, digest])`` gives, in a fifth of its time.

numpy seeds a PCG64 through :class:`numpy.random.SeedSequence`: it mixes the entropy words
into a pool of four 32-bit words, then hashes the pool into the generator's 128-bit state and
increment. Both steps are a few dozen 32-bit multiplications and shifts, but numpy runs them
through Python objects: 9 of the 11 µs an event's generator cost (measured, see
docs/results/graph_cb_candidates.md), more than a graph_cb decision's scores, p and draw
together. :func:`pcg64_seed_words` computes the same four 64-bit words in one compiled call
(SeedSequence's algorithm as numpy documents and implements it: ``hashmix`` and ``mix`` over
a pool of 4, ``generate_state`` with the second hash constants), and :class:`_SeedWords`
hands them to PCG64, which asks a seed sequence for exactly these words. The generators are
identical, draw for draw (``tests/unit/test_event_rng.py`` compares them with numpy's on
random and edge-case seeds), so decisions, replays and archived logs are unchanged.

:func:`first_uniform` goes one step further for the worker's
:class:`~banditflow.processors.redo.LazyGenerator`: the generator's first ``random()``, from
the seed words, without building the generator (most decisions that draw take one uniform).

Imported at a learner's first draw (:func:`banditflow.processors.redo.event_seed`,
``LazyGenerator.random``), not with the processors: a worker whose learners never draw (SPS)
does not load numba.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.random.bit_generator import ISeedSequence

_U = np.uint64
# SeedSequence's constants (numpy/random/bit_generator.pyx).
_INIT_A, _MULT_A = _U(0x43B0D7E5), _U(0x931E8875)
_INIT_B, _MULT_B = _U(0x8B51F9DD), _U(0x58F38DED)
_MIX_MULT_L, _MIX_MULT_R = _U(0xCA01F9DD), _U(0x4973F715)
_MASK32, _SHIFT16, _SHIFT32, _ZERO = _U(0xFFFFFFFF), _U(16), _U(32), _U(0)
_POOL = 4  # SeedSequence's pool of 32-bit words (DEFAULT_POOL_SIZE)
_ENTROPY_WORDS = 4  # at most: two integers below 2^64, two 32-bit words each
_STATE_WORDS = 4  # the uint64 words PCG64 asks for: its 128-bit state and increment


@njit("uint64[::1](uint64, uint64)", cache=True)
def pcg64_seed_words(seed: int, digest: int) -> np.ndarray:
    """``SeedSequence([seed, digest]).generate_state(4, np.uint64)``, for ``seed`` and
    ``digest`` below 2^64. (32-bit arithmetic in 64-bit words, masked after each product.)"""
    # The entropy: each integer as its little-endian 32-bit words, at least one (0 is [0]).
    entropy = np.zeros(_ENTROPY_WORDS, np.uint64)
    size = 0
    for value in (seed, digest):
        entropy[size] = value & _MASK32
        size += 1
        value >>= _SHIFT32
        if value > _ZERO:
            entropy[size] = value
            size += 1
    # mix_entropy: hash each word into the pool (zeros past the entropy), then mix every
    # pool word into every other.
    pool = np.empty(_POOL, np.uint64)
    hash_const = _INIT_A
    for i in range(_POOL):
        value = (entropy[i] ^ hash_const) & _MASK32
        hash_const = (hash_const * _MULT_A) & _MASK32
        value = (value * hash_const) & _MASK32
        pool[i] = value ^ (value >> _SHIFT16)
    for source in range(_POOL):
        for target in range(_POOL):
            if source != target:
                value = (pool[source] ^ hash_const) & _MASK32
                hash_const = (hash_const * _MULT_A) & _MASK32
                value = (value * hash_const) & _MASK32
                value ^= value >> _SHIFT16
                mixed = (_MIX_MULT_L * pool[target] - _MIX_MULT_R * value) & _MASK32
                pool[target] = mixed ^ (mixed >> _SHIFT16)
    # generate_state: 32-bit words cycling over the pool, paired little-endian into uint64s.
    words = np.zeros(_STATE_WORDS, np.uint64)
    hash_const = _INIT_B
    for i in range(2 * _STATE_WORDS):
        value = (pool[i % _POOL] ^ hash_const) & _MASK32
        hash_const = (hash_const * _MULT_B) & _MASK32
        value = (value * hash_const) & _MASK32
        value ^= value >> _SHIFT16
        words[i // 2] |= value << (_SHIFT32 * _U(i % 2))
    return words


# PCG64's 128-bit multiplier (PCG_DEFAULT_MULTIPLIER_128), high and low words, and
# numpy's double from 64 random bits: the top 53 over 2^53.
_MULT_HIGH, _MULT_LOW = _U(0x2360ED051FC65DA4), _U(0x4385DF649FCCF645)
_DOUBLE_SHIFT, _DOUBLE_SCALE = _U(11), 1.0 / 9007199254740992.0


@njit("UniTuple(uint64, 2)(uint64, uint64, uint64, uint64)", cache=True)
def _step(high: int, low: int, inc_high: int, inc_low: int) -> tuple[int, int]:
    """PCG64's state step ``state * multiplier + inc`` modulo 2^128, on (high, low) words."""
    # low * _MULT_LOW's high word, from 32-bit halves (no 128-bit integers here)
    a_high, a_low = low >> _SHIFT32, low & _MASK32
    b_high, b_low = _MULT_LOW >> _SHIFT32, _MULT_LOW & _MASK32
    cross = a_high * b_low + ((a_low * b_low) >> _SHIFT32)
    carry = (cross & _MASK32) + a_low * b_high
    product_high = a_high * b_high + (cross >> _SHIFT32) + (carry >> _SHIFT32)
    new_low = low * _MULT_LOW
    new_high = product_high + high * _MULT_LOW + low * _MULT_HIGH
    result_low = new_low + inc_low
    return new_high + inc_high + (_U(1) if result_low < new_low else _ZERO), result_low


@njit("float64(uint64, uint64)", cache=True)
def first_uniform(seed: int, digest: int) -> float:
    """The first ``random()`` of :func:`seeded_generator` ``(seed, digest)``, without building
    it: PCG64 seeded with :func:`pcg64_seed_words` (state 0, increment ``2 inc + 1``, a step,
    the seed state added, a step), one more step, its XSL-RR output, the top 53 bits."""
    words = pcg64_seed_words(seed, digest)
    inc_high = (words[2] << _U(1)) | (words[3] >> _U(63))
    inc_low = (words[3] << _U(1)) | _U(1)
    high, low = _step(_ZERO, _ZERO, inc_high, inc_low)
    low += words[1]
    high += words[0] + (_U(1) if low < words[1] else _ZERO)
    high, low = _step(high, low, inc_high, inc_low)
    high, low = _step(high, low, inc_high, inc_low)
    rotation = high >> _U(58)
    mixed = high ^ low
    output = (mixed >> rotation) | (mixed << ((_U(64) - rotation) & _U(63)))
    return float(output >> _DOUBLE_SHIFT) * _DOUBLE_SCALE


class _SeedWords(ISeedSequence):
    """A seed sequence that hands PCG64 the words :func:`pcg64_seed_words` computed."""

    def __init__(self, words: np.ndarray) -> None:
        self._words = words

    def generate_state(self, n_words: int, dtype: type = np.uint32) -> np.ndarray:
        if n_words != _STATE_WORDS or np.dtype(dtype) != np.uint64:  # PCG64 asks for these only
            raise ValueError(f"expected a request for 4 uint64 words, got {n_words} {dtype}")
        return self._words


def seeded_generator(seed: int, digest: int) -> np.random.Generator:
    """``np.random.default_rng([seed, digest])`` (``seed``, ``digest`` in [0, 2^64))."""
    return np.random.Generator(np.random.PCG64(_SeedWords(pcg64_seed_words(seed, digest))))

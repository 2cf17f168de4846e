"""The ``conformal`` family: online prediction sets under semi-bandit feedback."""

from learners.base import Learner
from learners.conformal.sps import SPS

ALGORITHMS: dict[str, type[Learner]] = {"sps": SPS}

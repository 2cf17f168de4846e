"""The ``conformal`` family: online prediction sets under semi-bandit feedback."""

from banditflow.learners.base import Learner
from banditflow.learners.conformal.aci import ACI
from banditflow.learners.conformal.dlr import DLR
from banditflow.learners.conformal.etc import ETC, ConETC
from banditflow.learners.conformal.greedy import Greedy
from banditflow.learners.conformal.sps import SPS

ALGORITHMS: dict[str, type[Learner]] = {
    "sps": SPS,
    "greedy": Greedy,
    "aci": ACI,
    "dlr": DLR,
    "etc": ETC,
    "con_etc": ConETC,
}

"""The ``conformal`` family: online prediction sets under semi-bandit feedback."""

from learners.base import Learner
from learners.conformal.aci import ACI
from learners.conformal.dlr import DLR
from learners.conformal.etc import ETC, ConETC
from learners.conformal.greedy import Greedy
from learners.conformal.sps import SPS

ALGORITHMS: dict[str, type[Learner]] = {
    "sps": SPS,
    "greedy": Greedy,
    "aci": ACI,
    "dlr": DLR,
    "etc": ETC,
    "con_etc": ConETC,
}

"""Off-policy evaluation (``banditflow ope``): what would a target policy have earned on logged
traffic? :class:`banditflow.processors.estimators.Sums` (IPS, SNIPS, DR with 95 % intervals,
effective sample size: the estimators live OPE shares),
:mod:`banditflow.offline.ope.reward_model` (DR's cross-fitted ridge reward model),
:mod:`banditflow.offline.ope.policies` (the target policies a SPEC names) and
:mod:`banditflow.offline.ope.evaluation` (the rounds an archive or an imported log holds,
scored).
"""

"""Off-policy evaluation (``banditflow ope``): what would a target policy have earned on
logged traffic? :class:`processors.ope.Sums` (IPS, SNIPS, DR with 95 % intervals, effective
sample size: the estimators live OPE shares), :mod:`offline.ope.reward_model` (DR's
cross-fitted ridge reward model), :mod:`offline.ope.policies` (the target policies a SPEC
names) and :mod:`offline.ope.evaluation` (the rounds an archive or an imported log holds,
scored).
"""

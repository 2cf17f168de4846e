"""Off-policy evaluation (``banditflow ope``): what would a target policy have earned on
logged traffic? :mod:`offline.ope.estimators` (IPS, SNIPS, DR with 95 % intervals, effective
sample size), :mod:`offline.ope.reward_model` (DR's cross-fitted ridge reward model),
:mod:`offline.ope.policies` (the target policies a SPEC names) and
:mod:`offline.ope.evaluation` (the rounds an archive or an imported log holds, scored).
"""

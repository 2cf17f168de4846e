"""Pure online-learning algorithms: no Kafka, no Faust, no I/O.

Every learner implements :class:`banditflow.learners.base.Learner`;
:func:`banditflow.learners.registry.make_learner`
builds one from a family and algorithm name.
"""

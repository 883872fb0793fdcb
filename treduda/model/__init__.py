"""The cost model, a stage of its own: GPU descriptions (:mod:`.gpus`), a program's counts
(:mod:`.counts`), the analytic estimator and its bound (:mod:`.model`), what every strategy's
model answers (:mod:`.interface`), and the counts as formulas (:mod:`.formulas`). Strategies
may import it to supply a model of their own (``strategies/tensorcore_model.py``)."""

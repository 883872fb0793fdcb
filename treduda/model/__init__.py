"""The cost model: GPU descriptions, a program's counts, the estimator and its bound."""

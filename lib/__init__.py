"""The book's library: components (`book`, `fp`, `training`, `census`, `stats`, `monitor`; `kernels/` beside it),
one folder per study above them (`studies/`), and the claims table on top (`claims`).

Nothing in `lib/` knows about Jupyter: chapters import it, tests exercise it, and the GPU runs it as plain Python.
"""

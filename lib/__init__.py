"""Analysis helpers, references, training harness and experiments for the book.

Nothing in `lib/` knows about Jupyter: chapters import it, tests exercise it, and the GPU runs it as plain Python.
"""

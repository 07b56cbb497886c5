"""The experiment registry (`registry.toml`) and its command line, ``python -m lib.experiments`` (`lib.book.cli`).

The experiments themselves live in their studies (`lib/studies/<study>/<experiment>.py`) and in `benchmarks/`; the
runner that resolves an entry, runs it and saves its result with provenance is `lib.book.runner`.
"""

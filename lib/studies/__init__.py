"""The studies: one folder per question the book asks, each holding its experiments, its reading and its figures.

A study folder `lib/studies/<name>/` holds

* its experiment modules, named as in the registry (`lib/experiments/registry.toml`, key `base`), each with
  `run(scale, cfg)` (`lib.book.runner`);
* its reading: the numbers, tables and verdicts its chapter glues (`reading.py`, with `numbers(...) -> dict` where
  the chapter reads one; helper modules beside it);
* its figures (`figures.py`), in the book's one style (`lib.book.plotting`).

A study imports the components only — `lib.book`, `lib.fp`, `kernels`, `lib.training`, `lib.stats` — never another
study (`tests/test_layers.py`); the claims table (`lib.claims`) sits on top and reads the studies. Chapter → study:
1 `rounding`, 2 `kernel`, 3 `golden`, 4–5 `delta`, 5 `dose`, 6 `explosion`, 7 `fix`.
"""

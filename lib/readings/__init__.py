"""Readings of results: runs judged at a common horizon (`horizon`), the precision dial and β sweep read across
their results (`dial_reading`, `beta_reading`), the claims table (`claims`), and the live checks of chapters 2 and
7 (`attention_checks`, `fix_checks`). Uses the layers below (`book`, `fp`, `kernels`, `training`), never
`lib.experiments` or `lib.figures`."""

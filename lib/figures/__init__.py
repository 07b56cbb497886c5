"""Figures of committed results (`explosion_plots`) and of the causal chain (`chain`), in the book's one style
(`lib.book.plotting`). Uses `lib.readings` and the layers below it."""

"""Book plumbing, the bottom layer: environment set-up (`setup`), named scales (`scale`), results with provenance
(`results`), the one figure style (`plotting`) and the headless-browser check of the built HTML (`htmlcheck`).
Imports nothing else from `lib`."""

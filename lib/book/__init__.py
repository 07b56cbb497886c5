"""Book plumbing, the bottom layer: environment set-up (`setup`), named scales (`scale`), results with provenance
(`results`, `provenance`, `rekey`), the experiment registry and its result groups (`registry`), the experiment
runner and its command line (`runner`, `cli`), the one figure style (`plotting`) and the headless-browser check of
the built HTML (`htmlcheck`). Imports nothing else from `lib`."""

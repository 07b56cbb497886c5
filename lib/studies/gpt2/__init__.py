"""GPT-2 124M as the paper trained it: arms from one initialisation and batch order, one process per arm and GPU
(`arms`), the GPU campaign that runs them (`campaign`), and their reading (`reading`, `figures`)."""

"""Chapters 4–5: the δ channel measured in training — captured steps replayed exactly: ΔO along sign(V), Δδ's sign,
the rank-1 terms of the dW_Q error and their push on ‖W_Q‖₂; planted layers with known answers."""

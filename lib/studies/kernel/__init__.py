"""Chapter 2: the flash-attention kernel — its rounding points, correctness against FP64, the authors' placement
established on the GPU, the rounding helper verified exhaustively, speed."""

"""fa2-tuner: find the fastest FlashAttention-2 forward config for a GPU."""

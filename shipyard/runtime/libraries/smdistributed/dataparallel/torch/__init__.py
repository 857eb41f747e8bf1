"""SMDDP for PyTorch: `torch_smddp` (the backend), `distributed` and `parallel` (the API before 1.4)."""

"""Framework interfaces: ``interfaces.torch_interface`` (needs PyTorch)."""

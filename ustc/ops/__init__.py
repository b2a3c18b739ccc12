"""Operations on tensors: generated kernels (einsum, @jit, operators, matmul)."""

"""Perturbation kernels: the noise definition, its pure-torch reference, and (on GPU) Triton."""

"""Kernels users call as functions, written in tmalang: `tmalang.gemm` (gemm.py)."""

"""Kernel tests run the Triton kernels on CPU tensors through the Triton interpreter.

Triton reads TRITON_INTERPRET once, when it is first imported, so it is set here at import
time, before any test module (or the kernels) can import triton.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

"""The executor that runs the real model: one forward pass a step, then sampling.

- model_runner.py (ModelRunner): inputs, KV caches, the step; compiled_step.py (inductor
  graphs, the CPU default) and graphed_decode.py (CUDA graphs) for decode steps;
- sampler.py, logprobs.py; lora.py (adapters applied in the forward pass);
- openmp_pool.py: the loading thread's OpenMP pool given back.
"""

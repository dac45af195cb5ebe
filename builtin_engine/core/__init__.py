"""The engine's scheduling core, free of torch models and HTTP.

- config.py (EngineConfig), device_defaults.py, sampling_params.py, request.py;
- block_pool.py, kv_cache_manager.py: the paged KV cache's blocks and prefix hashes;
- scheduler.py, prefill_pacer.py, ngram_proposer.py: what each step computes;
- executor.py: the contract with what computes tokens (runner/model_runner.py, simulator.py);
- llm_engine.py (the step loop), engine.py (AsyncEngine: the loop on its own thread),
  metrics.py (vLLM metric names).
"""

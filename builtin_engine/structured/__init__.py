"""Structured output and tool calls for the builtin engine, on xgrammar.

- grammar.py: the request's `response_format` / `tools` -> one compiled grammar (cached per
  tokenizer), bad schemas refused with a 400.
- matcher_pool.py: each constrained request's matcher; the bitmask of its next token is filled
  on a small thread pool while the model runs the next forward pass.
- tool_calls.py: the documented tool-call text format, tools rendered into the prompt, and the
  parser from generated text to OpenAI `tool_calls` (whole message and streaming deltas).

xgrammar was chosen over llguidance and outlines-core by measured mask time on the SmolLM2
vocabulary (49,152 tokens): see the README's structured output section.
"""

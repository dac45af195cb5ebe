"""The networks: llama.py (decoder), bert.py (encoder), quantization.py (int8 linears)."""

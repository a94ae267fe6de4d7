"""Reference data for tests/train/test_llama_reference.cpp (the Llama family): Hugging Face's Qwen2ForCausalLM in float64,
written from its definition (no transformers): Llama's block (make_llama_reference.py's independent
implementation) with biases on the q, k and v projections, RoPE at rope_theta, RMSNorm at rms_norm_eps,
a tied or untied head. Two tiny random models: untied with GQA 4/2 (rope_theta 1e6, as Qwen2's), tied
with one key/value head. Each directory holds config.json (HF, model_type qwen2), model.safetensors (the
parameters, float32, HF names) and reference.safetensors (loss, gradients, the weights after one AdamW
step and after two clipped ones), as make_llama_reference.py describes.

Run with Debian's PyTorch: /usr/bin/python3 scripts/reference/make_qwen2_reference.py
"""
import os

from make_llama_reference import make

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "qwen2_ref")

base = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu", "hidden_size": 32,
        "intermediate_size": 56, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 61,
        "max_position_embeddings": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "use_sliding_window": False}
make("untied_gqa", dict(base, num_key_value_heads=2, head_dim=8, tie_word_embeddings=False), 4, OUT, qkv_bias=True)
make("tied_mqa", dict(base, num_key_value_heads=1, head_dim=8, tie_word_embeddings=True, rms_norm_eps=1e-5), 5, OUT,
     qkv_bias=True)

"""Loads an `fp8train export --names hf` folder with Hugging Face transformers and compares its
logits with fp8train's (`export --dump-logits`) on the same tokens (tests/cli/test_export.sh).

usage: hf_logits_check.py HF_FOLDER LOGITS.safetensors EXPECTED_ARCHITECTURE
Exits 1 when the largest difference exceeds 1e-4 of the largest logit (FP32 both sides; the two
differ only in the order of FP32 sums inside the kernels, a few 1e-7 relative).
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def main():
    folder, logits_path, architecture = sys.argv[1:4]
    ref = load_file(logits_path)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.eval()
    got_arch = type(model).__name__
    if got_arch != architecture:
        sys.exit(f"FAIL: {folder} loaded as {got_arch}, expected {architecture}")
    with torch.no_grad():
        logits = model(ref["tokens"]).logits
    expected = ref["logits"]
    if logits.shape != expected.shape:
        sys.exit(f"FAIL: logits shape {tuple(logits.shape)}, fp8train {tuple(expected.shape)}")
    rel = ((logits - expected).abs().max() / expected.abs().max()).item()
    print(f"{architecture}: max |hf - fp8train| / max |fp8train| = {rel:.3g}")
    if not rel <= 1e-4:
        sys.exit(f"FAIL: {architecture} logits differ by {rel:.3g} relative (limit 1e-4)")


if __name__ == "__main__":
    main()

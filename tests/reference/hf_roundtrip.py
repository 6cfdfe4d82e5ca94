"""Reference test: a pretrain_gpt checkpoint exported with convert_gpt loads in
Hugging Face transformers' GPT2LMHeadModel (CPU) and gives the same logits
within 1e-6; importing the export back gives them again. The same for a model
trained with exact GELU (--no-bias-gelu-fusion), exported as "gelu".
  hf_roundtrip.py SOURCE_DIR BIN_DIR WORK_DIR      (exit 77: transformers missing)"""
import os
import subprocess
import sys

from reference_env import fresh_dir, missing

try:
    import torch
    from transformers import GPT2LMHeadModel
except ImportError as e:  # pragma: no cover
    missing(e, "torch or transformers")

src, bins, work = sys.argv[1:4]
data = os.path.join(src, "tests", "data", "megatron")
fresh_dir(work)
run = lambda *a: subprocess.run(list(a), check=True, cwd=work, stderr=subprocess.DEVNULL)
for name, extra in (("ckpt", []), ("erf", ["--no-bias-gelu-fusion"])):
    run(os.path.join(bins, "pretrain_gpt"), "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
        "--micro-batch-size", "2", "--global-batch-size", "2", "--seq-length", "32", "--max-position-embeddings", "48",
        "--train-iters", "5", "--lr", "0.001", "--data-path", os.path.join(data, "meg-gpt2-openwebtext_text_document"),
        "--vocab-file", os.path.join(data, "gpt2-tiny-vocab.json"), "--split", "949,50,1", "--log-interval", "5",
        "--eval-interval", "100", "--eval-iters", "1", "--save", name, "--data-cache-path", "cache", *extra)
    tokens = [464, 1748, 286, 1234, 13, 383, 2066, 4999, 7, 11]
    tok = " ".join(map(str, tokens))
    vocab = [os.path.join(data, "gpt2-tiny-vocab.json"), os.path.join(data, "gpt2-tiny-merges.txt")]
    hf = "hf_" + name
    run(os.path.join(bins, "convert_gpt"), "--load", name, "--export-hf", hf, "--vocab-file", vocab[0], "--merge-file", vocab[1],
        "--dump-logits", "ours.txt", "--tokens", tok, "-q")
    ours = torch.tensor([[float(x) for x in line.split()] for line in open(os.path.join(work, "ours.txt"))])
    model = GPT2LMHeadModel.from_pretrained(os.path.join(work, hf)).eval()
    assert model.config.activation_function == ("gelu" if extra else "gelu_new"), model.config.activation_function
    with torch.no_grad():
        theirs = model(torch.tensor([tokens])).logits[0]
    vocab_size = theirs.shape[-1]
    diff = (ours[:, :vocab_size] - theirs).abs().max().item()
    print(f"{name}: max |logit difference| ours vs transformers ({model.config.activation_function}): {diff:.2e}")
    assert diff < 1e-6, diff  # the README's claim
    if extra:  # the other GELU would be told apart: its logits are farther than the tolerance
        other = GPT2LMHeadModel.from_pretrained(os.path.join(work, hf), activation_function="gelu_new").eval()
        with torch.no_grad():
            gap = (other(torch.tensor([tokens])).logits[0] - theirs).abs().max().item()
        print(f"{name}: the tanh GELU's logits are {gap:.2e} away")
        assert gap > 2e-6, gap
    run(os.path.join(bins, "convert_gpt"), "--import-hf", hf, "--dump-logits", "back.txt", "--tokens", tok, "-q")
    back = torch.tensor([[float(x) for x in line.split()] for line in open(os.path.join(work, "back.txt"))])
    diff2 = (back[:, :vocab_size] - theirs).abs().max().item()
    print(f"{name}: max |logit difference| imported vs transformers: {diff2:.2e}")
    assert diff2 < 1e-6, diff2
print("ok")

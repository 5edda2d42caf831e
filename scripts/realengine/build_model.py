"""Builds the tiny model the realengine tier serves (run by the realengine venv's python):
a random LlamaForCausalLM saved with safetensors, and a byte-level BPE tokenizer trained on a few files of
Python's own standard library. No hub access: everything is made here. `python build_model.py OUT_DIR`"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def tokenizer(out: Path) -> PreTrainedTokenizerFast:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [str(stdlib / name) for name in ("json/encoder.py", "textwrap.py", "string.py", "glob.py")]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer(out)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=2048,
        tie_word_embeddings=False, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id, torch_dtype="float32",
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / "k25-recipe.json").write_text(json.dumps({"vocab": len(tok), "layers": 2, "hidden": 128}))
    print(f"tiny model in {out}")


if __name__ == "__main__":
    main()

"""The embedded tokenizer: byte-level BPE with no merges (token id = UTF-8 byte value) and a ChatML template.

A real LLM's tokenizer has ~150k tokens learned from a large corpus; minirl's tiny model needs a
tokenizer that is built offline in milliseconds, deterministic, and still loads through
`transformers.AutoTokenizer` like any hub checkpoint. The trick: take exactly the pipeline that
transformers' `Qwen2Tokenizer` rebuilds at load time (NFC normalizer, Qwen2's split regex, byte-level
pre-tokenizer, byte-level decoder) and give it a vocabulary of the 256 byte symbols and no merges.
Every text then tokenizes to its UTF-8 bytes, so

- token id == byte value: `"7"` is 55, a space is 32, a newline is 10 (easy to read in a trace);
- any string encodes (no unknown tokens), and decode(encode(text)) == NFC(text);
- the ids are identical before and after `save_pretrained` + `AutoTokenizer.from_pretrained`
  (transformers 5 builds `Qwen2Tokenizer` for `model_type: qwen2` from vocab + merges and ignores the
  saved pre-tokenizer; because ours *is* Qwen2's pre-tokenizer, nothing changes on reload).

Three special tokens follow the bytes: `<|endoftext|>` = 256 (padding), `<|im_start|>` = 257,
`<|im_end|>` = 258 (end of a turn: the EOS the rollout stops on). The chat template is plain ChatML.

verl has no tokenizer of its own: it loads the model's with `hf_tokenizer`
(`verl/utils/tokenizer/tokenizer.py:152`), which sets a missing pad token to EOS via
`set_pad_token_id` (`verl/utils/tokenizer/tokenizer.py:137`). minirl's `load_tokenizer` does the same.
"""

from __future__ import annotations

import json
import os

__all__ = [
    "CHATML_TEMPLATE",
    "IM_END",
    "IM_START",
    "PAD_TOKEN",
    "QWEN2_SPLIT_REGEX",
    "SPECIAL_TOKENS",
    "build_tokenizer",
    "bytes_to_unicode",
    "save_tokenizer",
]

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)  # ids 256, 257, 258

# Qwen2's pre-tokenizer split (the same pattern transformers' Qwen2Tokenizer uses): contractions,
# letter runs, single digits, punctuation runs, newlines, whitespace.
QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)

# ChatML, as Qwen2 uses it, without a default system prompt (the tiny model's prompts stay short):
#   <|im_start|>user\nWhat is 12+34?<|im_end|>\n<|im_start|>assistant\n
CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """The byte-level alphabet: each of the 256 byte values gets one printable character.

    Printable Latin-1 bytes map to themselves; the others (control bytes, space, ...) are shifted
    to code points 256 and up, so a space is shown as `Ġ` and a newline as `Ċ` in the vocabulary.
    This is GPT-2's mapping, which `tokenizers.pre_tokenizers.ByteLevel` applies.
    """
    printable = set(range(ord("!"), ord("~") + 1))
    printable |= set(range(ord("\u00a1"), ord("\u00ac") + 1))
    printable |= set(range(ord("\u00ae"), ord("\u00ff") + 1))
    mapping, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            mapping[byte] = chr(byte)
        else:
            mapping[byte] = chr(256 + shifted)
            shifted += 1
    return mapping


def _backend_tokenizer():
    """The `tokenizers.Tokenizer`: Qwen2's pipeline over a 256-byte vocabulary, no merges."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import BPE

    vocab = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    tok = Tokenizer(BPE(vocab=vocab, merges=[], unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok


def build_tokenizer(model_max_length: int = 2048):
    """Build the embedded tokenizer in memory as a transformers fast tokenizer (no download).

    Returns a `PreTrainedTokenizerFast` with EOS `<|im_end|>`, pad `<|endoftext|>`, left padding
    (prompts are left-padded so every response starts at the same column) and the ChatML template.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=_backend_tokenizer(),
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        padding_side="left",
        chat_template=CHATML_TEMPLATE,
        model_max_length=model_max_length,
    )


def save_tokenizer(tokenizer, out_dir: str) -> None:
    """Save the tokenizer and name `Qwen2Tokenizer` as its class, so `AutoTokenizer` picks the
    model family's own class (transformers 4.x: `Qwen2TokenizerFast` over `tokenizer.json`)."""
    tokenizer.save_pretrained(out_dir)
    config_path = os.path.join(out_dir, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        tok_config = json.load(f)
    tok_config["tokenizer_class"] = "Qwen2Tokenizer"
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(tok_config, f, indent=2, sort_keys=True)

"""Byte-level tokenizer: token id = byte value (0..255) plus three specials.

The tokenizer is a ``tokenizers`` BPE model with the 256 GPT-2 byte-to-unicode symbols as its
vocabulary and no merges, so every byte is its own token and any byte string round-trips.
It is saved with :meth:`PreTrainedTokenizerFast.save_pretrained`, so
``AutoTokenizer.from_pretrained(folder)`` loads it offline.

Special tokens: ``<pad>`` = 256, ``<bos>`` = 257, ``<eos>`` = 258. Text that literally contains
one of those strings is encoded as the special token (the usual Hugging Face behaviour); the
bytes of the corpus and of the synthetic tasks never contain ``<`` followed by those names.
"""

from __future__ import annotations

PAD_ID, BOS_ID, EOS_ID = 256, 257, 258
SPECIALS = {"<pad>": PAD_ID, "<bos>": BOS_ID, "<eos>": EOS_ID}
#: number of real tokens (bytes + specials)
NUM_TOKENS = 259
#: embedding rows in the models (NUM_TOKENS rounded up to a multiple of 8)
MODEL_VOCAB_SIZE = 264


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode character map (256 entries)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_byte_tokenizer():
    """A ``PreTrainedTokenizerFast`` whose ids are byte values, with pad/bos/eos specials.

    ``encode`` does not add bos/eos by itself (add_special_tokens has nothing to add); callers
    prepend :data:`BOS_ID` where they want it.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(name, special=True) for name in SPECIALS])  # ids 256, 257, 258 in order
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        clean_up_tokenization_spaces=False, model_max_length=1 << 20,
    )
    for name, idx in SPECIALS.items():
        got = fast.convert_tokens_to_ids(name)
        if got != idx:
            raise RuntimeError(f"byte tokenizer: special {name} got id {got}, expected {idx}")
    return fast


def encode_bytes(data: bytes) -> list[int]:
    """Token ids of a byte string without the tokenizer (id = byte value)."""
    return list(data)


def decode_ids(ids) -> bytes:
    """Bytes of a list of ids; special ids (>= 256) are dropped."""
    return bytes(int(i) for i in ids if 0 <= int(i) < 256)

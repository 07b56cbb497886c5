"""GPT-2's byte-pair encoding, built offline from the shipped vocabulary files.

`data/gpt2-bpe/encoder.json` (token string → id) and `vocab.bpe` (the merge list) are OpenAI's GPT-2 files
(MIT licence, `data/gpt2-bpe/LICENSE`). tiktoken's own `get_encoding("gpt2")` would download them at run time,
which no machine here can do, so `gpt2_encoding()` builds the same `tiktoken.Encoding` from the local copies:

- mergeable ranks: every encoder.json id keyed by the *bytes* of its token. encoder.json spells bytes with GPT-2's
  byte-to-unicode table (`bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the other 68 bytes are
  shifted to U+0100…U+0143 so that no token contains whitespace or control characters); that table is inverted here.
- split pattern: GPT-2's (`PAT_STR`, tiktoken's possessive-quantifier spelling of it).
- one special token, `<|endoftext|>` = `EOT` = 50256, the document separator.

tiktoken's BPE merges the pair of lowest rank first, so the ranks must follow the order of `vocab.bpe`; the files'
sha256 are checked (`ENCODER_JSON_SHA256`, `VOCAB_BPE_SHA256`: the hashes tiktoken checks for its `gpt2` encoding)
and the ranks are checked against the merge list before the encoding is built.

The model's embedding is `PADDED_VOCAB` = 50304 rows (50257 rounded up to a multiple of 64 for the matmuls, as in
nanoGPT); ids ≥ `VOCAB_SIZE` never occur in data.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import tiktoken

ROOT = Path(__file__).resolve().parents[2]
BPE_DIR = ROOT / "data" / "gpt2-bpe"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"

ENDOFTEXT = "<|endoftext|>"
EOT = 50256                 # id of <|endoftext|>, the last id of the vocabulary
VOCAB_SIZE = 50257          # 50000 merges + 256 bytes + <|endoftext|>
PADDED_VOCAB = 50304        # VOCAB_SIZE rounded up to a multiple of 64 (embedding / logits width)

# GPT-2's split pattern, r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
# as tiktoken writes it (its `r50k_pat_str`): the possessive quantifiers and the `\s++$` branch only stop the regex
# engine from backtracking; the pre-tokens are the same (tests/test_bpe.py compares the two on varied text).
PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte → character table (256 entries): the printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ' map to
    themselves, the remaining 68 bytes (controls, space, DEL, NBSP, soft hyphen…) to chr(256), chr(257), … in byte
    order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, shifted = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def _read_checked(path: Path, sha256: str) -> bytes:
    raw = path.read_bytes()
    got = hashlib.sha256(raw).hexdigest()
    if got != sha256:
        raise ValueError(f"{path} has sha256 {got}, expected {sha256}: not GPT-2's file (re-check out data/gpt2-bpe)")
    return raw


def mergeable_ranks(bpe_dir: Path | str = BPE_DIR) -> dict[bytes, int]:
    """The 50256 mergeable tokens as {token bytes: id} from `bpe_dir/encoder.json`, after checking both files'
    sha256 and that the ids follow the merge order of `bpe_dir/vocab.bpe` (id 256 + i is merge i)."""
    bpe_dir = Path(bpe_dir)
    encoder = json.loads(_read_checked(bpe_dir / "encoder.json", ENCODER_JSON_SHA256))
    merges = _read_checked(bpe_dir / "vocab.bpe", VOCAB_BPE_SHA256).decode("utf-8").split("\n")[1:-1]  # skip #version
    byte_of = {c: b for b, c in bytes_to_unicode().items()}

    def to_bytes(token: str) -> bytes:
        return bytes(byte_of[c] for c in token)

    ranks = {to_bytes(tok): i for tok, i in encoder.items() if tok != ENDOFTEXT}
    if encoder.get(ENDOFTEXT) != EOT or len(ranks) != EOT or sorted(ranks.values()) != list(range(EOT)):
        raise ValueError(f"{bpe_dir / 'encoder.json'}: ids are not 0..{EOT - 1} plus {ENDOFTEXT} = {EOT}")
    for i, line in enumerate(merges):
        first, second = line.split()
        if ranks.get(to_bytes(first) + to_bytes(second)) != 256 + i:
            raise ValueError(f"merge {i} ({line!r}) of vocab.bpe does not have id {256 + i} in encoder.json")
    return ranks


@lru_cache(maxsize=1)
def gpt2_encoding() -> tiktoken.Encoding:
    """GPT-2's tokenizer as a `tiktoken.Encoding` named "gpt2" (n_vocab = 50257), built from `data/gpt2-bpe/`.

    Use `encode_ordinary` for corpus text (a literal "<|endoftext|>" in the text stays text) and append `EOT`
    yourself; `encode(text, allowed_special={ENDOFTEXT})` turns the literal into the special token."""
    return tiktoken.Encoding(name="gpt2", pat_str=PAT_STR, mergeable_ranks=mergeable_ranks(),
                             special_tokens={ENDOFTEXT: EOT}, explicit_n_vocab=VOCAB_SIZE)

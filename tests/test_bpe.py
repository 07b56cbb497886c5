"""GPT-2's BPE built from the shipped files (lib/training/bpe.py)."""
import shutil

import hypothesis.strategies as st
import pytest
import tiktoken
from hypothesis import given, settings

from lib.training import bpe

# GPT-2's split pattern as OpenAI's encoder.py writes it (bpe.PAT_STR is tiktoken's backtracking-free spelling).
GPT2_ORIGINAL_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

VARIED = [
    "", " ", "  ", "\n", "\n\n\n", " \t \n", "hello", "hello ", "hello  ", " hello  ", "hello world",
    "I'm sure they'll've done it; she'd said 'RE' and 'S'.",
    "请考试我的软件！12345", "naïve café, Straße, ﬁ ligature, e\u0301 combining", "😀 🐍🐍 👍🏽 family: 👨‍👩‍👧",
    "שלום עולם مرحبا", "\x00\x01\x7f control \u00a0 nbsp \u00ad soft hyphen",
    "def f(x: int) -> int:\n    \"\"\"Doc.\"\"\"\n    return x ** 2  # comment\n\n\nclass A(B):\n\tpass\r\n",
    "x = [0x1F, 1e-9, 3.14_15, 'tab\\t', b'\\xff']\n    \n", "trailing spaces   \n   \n",
    "0" * 37, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "=" * 80 + "\n",
]


@pytest.fixture(scope="module")
def enc():
    return bpe.gpt2_encoding()


@pytest.fixture(scope="module")
def original():
    """The same ranks under GPT-2's original pattern."""
    return tiktoken.Encoding(name="gpt2-original-pattern", pat_str=GPT2_ORIGINAL_PAT,
                             mergeable_ranks=bpe.mergeable_ranks(), special_tokens={bpe.ENDOFTEXT: bpe.EOT})


def test_known_encodings(enc):
    # from the task brief and from tiktoken's own tests of its "gpt2" encoding (tests/test_encoding.py,
    # test_simple and test_simple_repeated)
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.encode("hello world") == [31373, 995]
    assert enc.decode([31373, 995]) == "hello world"
    assert enc.encode("hello <|endoftext|>", allowed_special="all") == [31373, 220, 50256]
    zeros = {1: [15], 2: [405], 3: [830], 4: [2388], 5: [20483], 6: [10535], 7: [24598], 8: [8269],
             9: [10535, 830], 10: [8269, 405], 16: [25645], 17: [8269, 10535, 830]}
    for n, ids in zeros.items():
        assert enc.encode("0" * n) == ids, n


def test_byte_table_and_single_bytes(enc):
    """GPT-2's table spells space as 'Ġ' and newline as 'Ċ'; '!' is the first printable byte, so id 0, and a lone
    space or newline is one token (220, 198)."""
    table = bpe.bytes_to_unicode()
    assert len(table) == 256 and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"
    assert enc.encode("!") == [0] and enc.encode(" ") == [220] and enc.encode("\n") == [198]
    assert enc.encode("Hello, world!") == [15496, 11, 995, 0]


def test_ranks_match_tiktokens_own_loader(monkeypatch):
    """tiktoken's `data_gym_to_mergeable_bpe_ranks` (what `get_encoding("gpt2")` uses after downloading the same two
    files) builds the same ranks from the local copies; caching off so nothing is written."""
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    theirs = data_gym_to_mergeable_bpe_ranks(str(bpe.BPE_DIR / "vocab.bpe"), str(bpe.BPE_DIR / "encoder.json"),
                                             vocab_bpe_hash=bpe.VOCAB_BPE_SHA256,
                                             encoder_json_hash=bpe.ENCODER_JSON_SHA256)
    assert bpe.mergeable_ranks() == theirs


def test_constants_and_readme(enc):
    assert enc.n_vocab == bpe.VOCAB_SIZE == bpe.EOT + 1 and enc.eot_token == bpe.EOT
    assert bpe.PADDED_VOCAB % 64 == 0 and 0 <= bpe.PADDED_VOCAB - bpe.VOCAB_SIZE < 64
    readme = (bpe.BPE_DIR / "README.md").read_text()
    assert bpe.ENCODER_JSON_SHA256 in readme and bpe.VOCAB_BPE_SHA256 in readme
    assert "MIT License" in (bpe.BPE_DIR / "LICENSE").read_text()


def test_pattern_is_tiktokens_and_gpt2s(enc, original):
    """PAT_STR is what the installed tiktoken uses for gpt2, and pre-tokenises like GPT-2's original pattern."""
    from tiktoken_ext import openai_public
    if hasattr(openai_public, "r50k_pat_str"):
        assert bpe.PAT_STR == openai_public.r50k_pat_str
    for text in VARIED:
        assert enc.encode_ordinary(text) == original.encode_ordinary(text), repr(text)


# whitespace, contractions and digits (where the two patterns could part) mixed with any characters
SNIPPETS = st.sampled_from([" ", "  ", "\n", "\t", "\r\n", "'s", "'ll", "'re", "'d", "x", "Zé", "1", "42", "#", "(",
                            "_"])


@settings(max_examples=300, deadline=None)
@given(st.lists(SNIPPETS | st.text(max_size=3), max_size=20).map("".join))
def test_round_trip_and_pattern_on_generated_text(enc, original, text):
    ids = enc.encode_ordinary(text)
    assert enc.decode(ids) == text
    assert all(0 <= i < bpe.EOT for i in ids)
    assert ids == original.encode_ordinary(text)


def test_round_trip_varied(enc):
    for text in VARIED:
        ids = enc.encode(text)
        assert enc.decode(ids) == text and enc.decode_bytes(ids) == text.encode("utf-8"), repr(text)
    # every token is its own encoding (tiktoken's single-token round trip), over the whole vocabulary
    for i in range(bpe.VOCAB_SIZE):
        assert enc.encode_single_token(enc.decode_single_token_bytes(i)) == i


def test_endoftext_handling(enc):
    text = "a<|endoftext|>b"
    with pytest.raises(ValueError):
        enc.encode(text)                       # tiktoken refuses special text unless told what to do with it
    special = enc.encode(text, allowed_special={bpe.ENDOFTEXT})
    literal = enc.encode_ordinary(text)
    assert special.count(bpe.EOT) == 1 and bpe.EOT not in literal
    assert enc.decode(special) == enc.decode(literal) == text
    assert enc.decode([bpe.EOT]) == bpe.ENDOFTEXT


def _copy(tmp_path):
    d = tmp_path / "bpe"
    shutil.copytree(bpe.BPE_DIR, d)
    return d


@pytest.mark.parametrize("name", ["encoder.json", "vocab.bpe"])
def test_corrupted_file_is_refused(tmp_path, name):
    d = _copy(tmp_path)
    raw = bytearray((d / name).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (d / name).write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="sha256"):
        bpe.mergeable_ranks(d)


def test_merge_order_is_checked(tmp_path, monkeypatch):
    """A vocab.bpe with two merges swapped (and its hash accepted) is refused: tiktoken's ranks must follow it."""
    import hashlib
    d = _copy(tmp_path)
    lines = (d / "vocab.bpe").read_text(encoding="utf-8").split("\n")
    lines[1], lines[2] = lines[2], lines[1]
    raw = "\n".join(lines).encode("utf-8")
    (d / "vocab.bpe").write_bytes(raw)
    monkeypatch.setattr(bpe, "VOCAB_BPE_SHA256", hashlib.sha256(raw).hexdigest())
    with pytest.raises(ValueError, match="merge 0"):
        bpe.mergeable_ranks(d)

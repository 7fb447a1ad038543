#!/usr/bin/env python3
# Rerun: python3 tools/make_normalizer_fixtures.py   (needs the HF `tokenizers` package)
"""Tokenizers with normalizers, and HF `tokenizers`' ids for a Unicode-heavy corpus; checked by
tests/io/test_tokenizer_normalizers.cpp.

Writes, under tests/fixtures/tokenizer/:

  qwen2_nfc/tokenizer.json   a small byte-level BPE trained here with Qwen2's exact normalizer (NFC), pre-tokenizer
                             (Split with Qwen2's regex, Isolated, then ByteLevel without regex or prefix space),
                             post-processor (ByteLevel) and decoder (ByteLevel); Qwen2's special tokens, and one
                             normalized added token ("café", composed) that NFC lets the decomposed spelling match
  qwen2_nfkc/tokenizer.json  the same model under NFKC, with a normalized added token written in fullwidth forms
                             ("<ｔｏｏｌ>", which NFKC makes "<tool>")
  llama2/tokenizer.json      a SentencePiece-style BPE as HF converts Llama-2 / Mistral / TinyLlama: byte_fallback with
                             <0x00>..<0xFF> in the vocabulary, unk_token <unk> with fuse_unk, normalizer
                             Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer, decoder
                             Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)], BOS by a template
  metaspace/tokenizer.json   the same model as newer conversions write it: no normalizer, Metaspace pre-tokenizer
                             (prepend_scheme first, split false) and Metaspace decoder
  normalizers.json           for every tokenizer and every text of CORPUS: HF's ids (with and without special
                             tokens) and decode; and HF's NFC / NFD / NFKC / NFKD of every text

HF's normalizers use older Unicode tables than utf8proc's (tokenizers' unicode-normalization-alignments
crate knows Unicode 9.0): the corpus keeps to characters both agree on (docs/prepare-data.md).
Deterministic: the BPE trainer is.
"""

import json
import os

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests/fixtures/tokenizer")

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it? We'll see.",
    "Café crème, naïve façade, résumé, Ångström, Zürich, São Paulo, Dvořák, Łódź, Việt Nam, Ελληνικά.",
    "中文的句子。通义千问是阿里云的大语言模型。日本語の文章です。한국어 문장입니다。",
    "Emoji: 😀 😃 🚀 👩‍💻 👍🏽 🇨🇳 — “quotes” and ‘single’.",
    "Fullwidth: ＡＢＣ ａｂｃ １２３ ！？ and halfwidth ｶﾀｶﾅ, ligatures ﬁ ﬂ, superscripts x² and ½.",
    "Digits 2024, 3.14159, 1,000,000 and 0x1F.\n\tdef f(x):\n\t\treturn x * 2  # comment\n\n\nend",
] * 3

# The test corpus (not the training text). Decomposed and composed spellings (NFC matters),
# fullwidth and compatibility forms (NFKC matters), Hangul jamo, Unicode 15 characters (Kawi,
# CJK Extension H, a new emoji), emoji ZWJ sequences and skin tones, digits, whitespace runs, and
# special tokens written as text.
CORPUS = [
    "Hello world",
    "Cafe\u0301 cre\u0300me, nai\u0308ve fac\u0327ade vs Café crème, naïve façade",
    "A\u030a ngstro\u0308m, \u212b (angstrom sign), \u2126 (ohm sign), e\u0323\u0302 and e\u0302\u0323",
    "Hangul: \u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af vs 각 한글",
    "Vie\u0323\u0302t Nam, Vi\u1ec7t Nam, q\u0307\u0323 and a\u0301\u0301",
    "Fullwidth: ＡＢＣ ａｂｃ １２３ ！？ ＜ｔｏｏｌ＞ and halfwidth ｶﾀｶﾅ ﾊﾞ",
    "Ligatures ﬁ ﬂ ﬀ, superscripts x² y³, fractions ½ ¾, roman Ⅻ, circled ①②, ㎏ ㍻ and ™",
    "中文的句子。通义千问。日本語の文章です。한국어 문장입니다",
    "Emoji 😀🚀 👩‍💻 👨‍👩‍👧‍👦 👍🏽👍🏿 🏳️‍🌈 🇨🇳 1️⃣",
    "Unicode 15: \U0001fae8 shaking, Kawi \U00011f04\U00011f05\U00011f12 \U00011f50\U00011f51, CJK Ext H "
    "\U00031350\U00031351, Nag Mundari \U0001e4d0\U0001e4d1",
    "Digits 1234567890 and 3.14 and 1,000,000 and 2024年 and ٣٤٥",
    "spaces   between    words\u00a0\u00a0no-break\u3000ideographic     and trailing   ",
    "tabs\tand\nnewlines\r\nand\n\n\nblank lines\n",
    "<|im_start|>user\nCafe\u0301?<|im_end|>\n<|endoftext|>",
    "café and cafe\u0301 and <tool> and <ｔｏｏｌ> as added tokens",
    "<s> Hello</s><unk> and <0x41> written as text",
    " leading space",
    "",
]


def train_byte_level(normalizer):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=520, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    return tok


def train_sentencepiece_style():
    """Llama-2's tokenizer.json layout: <unk> <s> </s>, then the 256 byte tokens, then the BPE pieces."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Training splits at the spaces (as SentencePiece does); the converted tokenizer has no pre-tokenizer.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never", split=True)
    trainer = trainers.BpeTrainer(vocab_size=420, min_frequency=2, show_progress=False, limit_alphabet=90,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(TRAIN, trainer)
    j = json.loads(tok.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in trained:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    j["model"]["vocab"] = vocab
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    j["pre_tokenizer"] = None
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    llama2 = Tokenizer.from_str(json.dumps(j))
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    j["decoder"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False}
    metaspace = Tokenizer.from_str(json.dumps(j))
    return llama2, metaspace


def save(tok, name):
    path = os.path.join(FIX, name, "tokenizer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(json.loads(tok.to_str()), f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(path)
    assert size < 40_000, f"{path} is {size} bytes"
    print(f"wrote {path}: {size} bytes, vocab {tok.get_vocab_size()}")


def main():
    import tokenizers
    nfc = train_byte_level(normalizers.NFC())
    nfc.add_tokens([AddedToken("café", normalized=True)])
    nfkc = train_byte_level(normalizers.NFKC())
    nfkc.add_tokens([AddedToken("<ｔｏｏｌ>", normalized=True)])
    llama2, metaspace = train_sentencepiece_style()
    toks = {"qwen2_nfc": nfc, "qwen2_nfkc": nfkc, "llama2": llama2, "metaspace": metaspace}
    for name, tok in toks.items():
        save(tok, name)
    cases = []
    for name, tok in toks.items():
        for t in CORPUS:
            plain = tok.encode(t, add_special_tokens=False).ids
            cases.append({"tokenizer": name, "text": t, "ids": tok.encode(t).ids, "ids_plain": plain,
                          "decoded": tok.decode(plain, skip_special_tokens=False)})
    forms = {"NFC": normalizers.NFC(), "NFD": normalizers.NFD(), "NFKC": normalizers.NFKC(), "NFKD": normalizers.NFKD()}
    normalized = [{"text": t, **{k: n.normalize_str(t) for k, n in forms.items()}} for t in CORPUS]
    path = os.path.join(FIX, "normalizers.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "cases": cases, "normalized": normalized}, f,
                  ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()

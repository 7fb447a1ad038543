#!/usr/bin/env python3
# Rerun: python3 tools/make_tokenizer_fixtures.py            (needs the HF `tokenizers` and `sentencepiece` packages)
"""Reference data for seqpar's tokenizer (src/io/tokenizer*.cpp, checked by tests/io/test_tokenizer.cpp).

Writes:

  tests/fixtures/tokenizer/llama3/tokenizer.json
                                 a small byte-level BPE trained here with HF `tokenizers` on the corpus
                                 below: Split(Llama-3 regex, isolated) + ByteLevel(use_regex=false),
                                 ignore_merges, BOS by a TemplateProcessing post-processor, special tokens
                                 and a few added tokens with lstrip / rstrip / single_word
  tests/fixtures/tokenizer/llama3/tokenizer_config.json
                                 bos/eos tokens and the Llama-3 (Meta-Llama-3-8B-Instruct) chat template
  tests/fixtures/tokenizer/gpt2/tokenizer.json
                                 GPT-2 style: ByteLevel(use_regex=true) pre-tokenizer, no post-processor
  tests/fixtures/tokenizer/gpt2_prefix/tokenizer.json
                                 the GPT-2 style model with ByteLevel(add_prefix_space=true)
  tests/fixtures/tokenizer/sentencepiece/tokenizer.model
                                 a SentencePiece BPE model with byte fallback (Llama-2 style), trained with the
                                 `sentencepiece` package on the same corpus
  tests/fixtures/tokenizer/expected.json
                                 HF's (and sentencepiece's) ids for a test corpus (not the training text) and for random strings
                                 drawn over the character classes the regexes care about, with and
                                 without special tokens, and the Llama-3 chat template rendered by Jinja
  tests/fixtures/tokenizer/pretokens.json
                                 HF's pre-tokenizer pieces (Split isolated) for the GPT-2, Llama-3 and
                                 Qwen2 patterns on the same kind of random strings

Deterministic: the random strings come from random.Random(seed); the BPE trainer is deterministic.
"""

import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"

LLAMA3_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")


# ---- corpora ----------------------------------------------------------------------------------

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. It's a sentence that uses every letter; we've seen it "
    "in typing lessons, and they'll keep using it. I'm sure you'd agree it's not the most exciting prose.",
    "Sequence parallelism splits one long sequence over many GPUs. Each rank holds a shard of the tokens, "
    "and attention exchanges keys and values with the other ranks through all-to-all or a ring.",
    "In 1969, 600 million people watched the landing; the mission cost about $25.4 billion (roughly "
    "$150 billion today). Apollo 11 launched on July 16 at 13:32 UTC and returned on July 24.",
    "Les élèves étudient à l'école. Ça a été un été très chaud à Montréal, où il fait déjà 35°C. "
    "Der Bär läuft über die Straße; Größe und Maß. El niño comió piña y jalapeños en España.",
    "日本語のテキストも少し入れます。東京は日本の首都です。中文也有一点：我们今天学习自然语言处理。"
    "한국어 문장도 있습니다. Русский текст: привет, как дела? Ελληνικά: καλημέρα κόσμε.",
    "Emoji time 😀😃😄 🎉🚀 ❤️ 👍🏽 and flags 🇫🇷🇯🇵; also symbols like ©, ®, ™, €, £, ¥, and ±∞≠≤≥.",
    "def train(model, data, steps=1000):\n    for step in range(steps):\n        loss = model(data[step])\n"
    "        loss.backward()\n        if step % 100 == 0:\n            print(f\"step {step}: {loss:.4f}\")\n"
    "    return model\n",
    "int main(int argc, char** argv) {\n  std::vector<int> xs = {1, 2, 3};\n  for (auto& x : xs) x *= 2;\n"
    "  return xs.size() > 2 ? 0 : 1;\n}\n",
    "Numbers: 0 1 12 123 1234 12345 123456 3.14159 2.71828 -42 +7 1e-9 0x1F 0b1010 1,000,000 99.9%",
    "Whitespace   runs\t\ttabs\n\n\nnewlines \r\n windows lines  \n  trailing spaces   \n\tindent",
    "Contractions: don't, won't, can't, shouldn't, I'd, we'll, they're, you've, she's, DON'T, WE'LL, IT'S.",
    "Email me at someone@example.com or visit https://example.org/path?query=1&x=y#frag for details.",
    "JSON: {\"name\": \"seqpar\", \"version\": [0, 1, 0], \"ok\": true, \"ratio\": 0.25, \"tags\": [\"a\", \"b\"]}",
    "Markdown # Title\n\n- item one\n- item two\n\n**bold** and _italic_ and `code` and > quotes.\n",
]

TEST_TEXT = [
    "Hello world! This is a test of the tokenizer, written after training: it must not be memorised.",
    "  Leading spaces, trailing spaces.   ",
    "Tabs\tand\u00a0no-break spaces\u3000and ideographic spaces; line\r\nends\rand\n\n\nblank lines\n",
    "She's sure they'll win; WE'RE NOT. It'S odd. y'all ' s 's ''s",
    "Prices: $1,234.56, €99, ¥1000000, 3.5e10, 2024-06-01, 10:45:30, 1234567890123",
    "Café crème, naïve façade, résumé, Ångström, Øresund, Dvořák, Łódź, İstanbul, ǅemal.",
    "Combining: e\u0301 a\u0308 n\u0303 and decomposed Hangul \u1100\u1161\u11a8.",
    "中文分词测试：机器学习很有趣。日本語：ひらがなとカタカナ。한국어: 안녕하세요!",
    "Emoji: 🧪🧬 👩‍💻 🏳️‍🌈 ✨ 1️⃣ 🇩🇪 and text after.",
    "for i in range(10):\n\tif i % 2 == 0:\n\t\tprint(i, end=', ')\n",
    "x = [a**2 for a in xs if a >= 0] # comment\n    return {'k': v}",
    "Arabic-Indic digits ٠١٢٣٤٥٦٧٨٩ and superscripts ²³ and fractions ½ ¾ and roman Ⅻ.",
    "Specials inline: <|begin_of_text|>start<|end_of_text|> and <|eot_id|><|start_header_id|>user<|end_header_id|>",
    "Added tokens: <tool> x <tool>y z<tool> and [SEP] here[SEP]there and <rs>   then <ls>.",
    "A very long word: supercalifragilisticexpialidocious and aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.",
    "",
    " ",
    "\n",
    "     \n     ",
    "'",
    "a\u0000b\u0001c\u007fd\u0085e\u200bf\u2028g\u001ch",
]

# Characters the random strings draw from, by the regex classes they exercise.
POOLS = [
    " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2003", "\u0085", "\u000b", "\u001c",
    "'", "'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'D", "'\u017f", "'x",
    "a", "b", "z", "Q", "é", "ß", "ǅ", "ſ", "ω", "Ж", "א", "ب", "中", "ひ", "カ", "한", "\u0301", "\u0308",
    "0", "1", "7", "9", "٣", "²", "½", "Ⅻ", "𝟙",
    ".", ",", "!", "?", "-", "_", "(", ")", "{", "}", "#", "$", "%", "€", "©", "→", "\u200b", "\u200d",
    "😀", "👍🏽", "🇫🇷", "\u0000", "\u007f",
]


def random_strings(seed, count, max_parts):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(1, max_parts)
        out.append("".join(rng.choice(POOLS) for _ in range(n)))
    return out


# ---- tokenizers -------------------------------------------------------------------------------

def train_llama3_style():
    from tokenizers import Tokenizer, Regex, AddedToken, models, pre_tokenizers, decoders, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=1100, min_frequency=1, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAIN_TEXT * 3, trainer=trainer)
    tok.add_tokens([AddedToken("<tool>", single_word=True, normalized=False),
                    AddedToken("[SEP]", normalized=False),
                    AddedToken("<rs>", rstrip=True, normalized=False),
                    AddedToken("<ls>", lstrip=True, normalized=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def train_gpt2_style():
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TRAIN_TEXT * 3, trainer=trainer)
    return tok


def save_compact(tok, path):
    """tokenizer.json with one line per vocab entry / merge, to keep the diff readable."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = json.loads(tok.to_str())
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    size = os.path.getsize(path)
    assert size < 200_000, f"{path} is {size} bytes"
    print(f"wrote {path}: {size} bytes, vocab {tok.get_vocab_size()}")


def main():
    argparse.ArgumentParser(description=__doc__).parse_args()
    import tokenizers
    from tokenizers import Regex, pre_tokenizers
    fixdir = os.path.join(ROOT, "tests/fixtures/tokenizer")

    llama = train_llama3_style()
    gpt2 = train_gpt2_style()
    save_compact(llama, os.path.join(fixdir, "llama3/tokenizer.json"))
    save_compact(gpt2, os.path.join(fixdir, "gpt2/tokenizer.json"))
    # The same model with ByteLevel(add_prefix_space=true), which HF applies to every text segment.
    from tokenizers import Tokenizer
    j = json.loads(gpt2.to_str())
    j["pre_tokenizer"]["add_prefix_space"] = True
    gpt2_prefix = Tokenizer.from_str(json.dumps(j))
    save_compact(gpt2_prefix, os.path.join(fixdir, "gpt2_prefix/tokenizer.json"))
    with open(os.path.join(fixdir, "llama3/tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
                   "chat_template": LLAMA3_CHAT_TEMPLATE, "model_max_length": 131072}, f, indent=2)
        f.write("\n")

    texts = TEST_TEXT + random_strings(seed=1234, count=150, max_parts=12)
    cases = []
    for name, tok in (("llama3", llama), ("gpt2", gpt2), ("gpt2_prefix", gpt2_prefix)):
        for t in texts:
            with_special = tok.encode(t, add_special_tokens=True).ids
            plain = tok.encode(t, add_special_tokens=False).ids
            decoded = tok.decode(plain, skip_special_tokens=False)
            cases.append({"tokenizer": name, "text": t, "ids": with_special, "ids_plain": plain,
                          "decoded": decoded})

    # The chat template as transformers would render it (Jinja), then HF's ids of the rendered text.
    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(LLAMA3_CHAT_TEMPLATE)
    chats = [
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  What is 2+2?\n"},
         {"role": "assistant", "content": "4. It's simple.\n\n"}],
        [{"role": "user", "content": "Traduis: bonjour"}, {"role": "assistant", "content": "hello"},
         {"role": "user", "content": "et merci?"}, {"role": "assistant", "content": " thanks 🙏"}],
    ]
    chat_cases = []
    for msgs in chats:
        rendered = template.render(messages=msgs, bos_token="<|begin_of_text|>", add_generation_prompt=False)
        chat_cases.append({"messages": msgs, "rendered": rendered,
                           "ids": llama.encode(rendered, add_special_tokens=False).ids})

    # SentencePiece (Llama-2 style: BPE with byte fallback); HF's Llama tokenizer adds BOS.
    try:
        import io
        import sentencepiece as spm
    except ImportError:
        sys.exit("pip install sentencepiece (to write the SentencePiece fixture)")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TRAIN_TEXT * 3), model_writer=model, model_type="bpe",
                                   vocab_size=600, byte_fallback=True, character_coverage=1.0, num_threads=1,
                                   split_digits=True, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, minloglevel=2)
    os.makedirs(os.path.join(fixdir, "sentencepiece"), exist_ok=True)
    with open(os.path.join(fixdir, "sentencepiece/tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    for t in texts:
        plain = sp.encode(t)
        cases.append({"tokenizer": "sentencepiece", "text": t, "ids": [sp.bos_id()] + plain, "ids_plain": plain,
                      "decoded": sp.decode(plain)})

    with open(os.path.join(fixdir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "sentencepiece_version": spm.__version__,
                   "cases": cases, "chats": chat_cases}, f,
                  ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")

    pieces = []
    rand = random_strings(seed=99, count=300, max_parts=16)
    for name, pattern in (("llama3", LLAMA3_PATTERN), ("qwen2", QWEN2_PATTERN), ("gpt2", GPT2_PATTERN)):
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
        for t in rand + TEST_TEXT:
            pieces.append({"pattern": name, "text": t, "pieces": [p for p, _ in split.pre_tokenize_str(t)]})
    with open(os.path.join(fixdir, "pretokens.json"), "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "cases": pieces}, f, ensure_ascii=False,
                  indent=None, separators=(",", ":"))
        f.write("\n")
    for fn in ("expected.json", "pretokens.json"):
        print(f"wrote {fn}: {os.path.getsize(os.path.join(fixdir, fn))} bytes")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
# Rerun: python3 tools/make_chat_template_fixtures.py   (needs transformers >= 4.45, jinja2 >= 3.1.6, tokenizers)
"""Reference data for seqpar's Jinja chat templates (src/data/jinja*.cpp, src/data/chat_template.cpp), checked by
tests/data/test_jinja.cpp and tests/data/test_prepare_data_jinja.cpp (chats.json: the real templates
through prepare-data). Everything expected here comes from transformers:
the templates run in transformers' own jinja2 environment (utils/chat_template_utils.py), conversations through
PreTrainedTokenizerFast.apply_chat_template.

Reads tests/fixtures/chat_template/templates/*.jinja (real chat templates; README.md there says where each one
comes from). Writes into tests/fixtures/chat_template/:

  tokenizer.json         a small byte-level BPE (Llama-3 split + ByteLevel) trained here, with the special tokens of
                         every template below as added tokens, so ids and masks can be compared
  tokenizer_config.json  Llama-3.1-8B-Instruct's special tokens and chat_template (the template prepare-data finds
                         next to tokenizer.json)
  language.json          small templates, one language feature each, with their variables and what transformers'
                         environment renders (or that it raises), and the byte spans of {% generation %} blocks
  chats.json             for every template: its special tokens, and per conversation the rendered text, the ids of
                         apply_chat_template(tokenize=True), the assistant mask where the template has generation
                         blocks, the exception where the template raises, and the text the loss mask must cover
                         (each assistant turn's content and end token, from the model's documented turn format)

strftime_now() is pinned to NOW below (transformers calls datetime.now(); the fixture replaces that global of the
compiled template), as seqpar's --chat-template-now pins it.
"""

import datetime
import json
import os
import re

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "chat_template")
NOW = datetime.datetime(2025, 1, 15, 10, 30, 0)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
           "<|eom_id|>", "<|python_tag|>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<bos>", "<eos>", "<pad>",
           "<start_of_turn>", "<end_of_turn>", "<s>", "</s>", "<unk>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]",
           "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]

TRAIN = [
    "The quick brown fox jumps over the lazy dog. It's a dog's life, isn't it? We'll see.",
    "You are a helpful assistant. What is sequence parallelism? It splits a long sequence over GPUs.",
    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n",
    "user assistant system model Hello! How can I help you today? Paris is the capital of France.",
    "中文的句子。日本語の文章です。Emoji: 😀 🚀 — “quotes” and café naïve.",
    "    indented code:\n\tdef f(x):\n\t\treturn x * 2  # comment\n\n\nend",
] * 3

# Each template: the file, the special tokens transformers passes (special_tokens_map of the model's tokenizer),
# and the text each assistant turn must train: the content as the template writes it, and the turn's end token.
TEMPLATES = {
    "llama-3.1-8b-instruct": {
        "tokens": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
        "turn": lambda c: c.strip() + "<|eot_id|>",
    },
    "qwen2.5-instruct": {
        "tokens": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        "turn": lambda c: c + "<|im_end|>",
    },
    "gemma-2-it": {
        "tokens": {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
        "turn": lambda c: c.strip() + "<end_of_turn>",
    },
    "mistral-7b-instruct-v0.3": {
        "tokens": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
        "turn": lambda c: c + "</s>",
    },
    "mistral-nemo-instruct-2407": {
        "tokens": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
        "turn": lambda c: c + "</s>",
    },
    # generation blocks: the mask is what the blocks render (here the header too)
    "smollm3-3b": {
        "tokens": {"eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
        "turn": lambda c: "<|im_start|>assistant\n" + c.lstrip("\n") + "<|im_end|>\n",
    },
}

CONVERSATIONS = {
    "one_turn": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "2+2 = 4."}],
    "system_multi_turn": [
        {"role": "system", "content": "You answer in one word."},
        {"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "And of Japan?"}, {"role": "assistant", "content": "Tokyo"}],
    "multi_turn_user_last": [
        {"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help you today?"},
        {"role": "user", "content": "Tell me a joke."}, {"role": "assistant", "content": "Why did the GPU cross the road?"},
        {"role": "user", "content": "Why?"}],
    "unicode": [
        {"role": "user", "content": "日本の首都は？ 🗼 café naïve — “quotes”"},
        {"role": "assistant", "content": "東京です。😀 Ünïcödé ✓"}],
    "whitespace_at_ends": [
        {"role": "user", "content": "  spaces around  \n"},
        {"role": "assistant", "content": "\n\t kept or trimmed \t\n"},
        {"role": "user", "content": "\nagain\n"}, {"role": "assistant", "content": " x "}],
    "template_syntax_in_content": [
        {"role": "user", "content": "Print {{ messages }} and {% if %} and {# no #}"},
        {"role": "assistant", "content": "{{ bos_token }} is literal text {%- raw %}"}],
    "system_first_turn": [
        {"role": "system", "content": "  Be brief.  "}, {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi."}],
}

# Small templates, one feature each: (name, template, variables).
LANGUAGE = [
    ("text", "Hello world", {}),
    ("trailing_newline_dropped", "a\n", {}),
    ("two_trailing_newlines", "a\n\n", {}),
    ("crlf", "a\r\nb\rc\n", {}),
    ("print", "{{ x }}|{{ y }}|{{ z }}|{{ w }}|{{ undefined_name }}|", {"x": 1, "y": "s", "z": None, "w": True}),
    ("floats", "{{ 1.5 }} {{ 1/2 }} {{ 10/2 }} {{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 2.0 ** 0.5 }} {{ 1e16 }} "
               "{{ 123456789.123 }} {{ -0.0 }} {{ 3.0 * 2 }}", {}),
    ("integers", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 1_000 }} {{ 0x1F }} {{ 7 - 10 }}",
     {}),
    ("containers", "{{ [1, 'a', none, true, 1.5, {'k': \"v'\"}] }} {{ (1,) }} {{ (1, 2) }} {{ {} }} {{ [] }}", {}),
    ("repr_quotes", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'tab\\tnl\\n', 'é'] }}", {}),
    ("string_escapes", "{{ 'a\\nb' }}|{{ \"t\\tq\\\"\" }}|{{ '\\u00e9\\x41' }}|{{ 'back\\\\slash' }}|{{ 'x\\qy' }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ undefined_name ~ [1] }}|{{ 'a' + 'b' }}|{{ [1] + [2] }}|{{ 'ab' * 3 }}", {}),
    ("logic", "{{ 1 and 'x' }}|{{ 0 or 'y' }}|{{ none or [] }}|{{ not 0 }}|{{ 'a' if true }}|{{ 'a' if false }}|"
              "{{ 'a' if false else 'b' }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 2 == 2.0 }}|{{ true == 1 }}|{{ 'a' != 'b' }}",
     {}),
    ("membership", "{{ 'b' in 'abc' }}|{{ 2 in [1, 2] }}|{{ 'k' in d }}|{{ 'z' not in d }}|{{ 'x' in undefined_name }}",
     {"d": {"k": 1}}),
    ("attribute_and_item", "{{ m.role }}|{{ m['content'] }}|{{ m.missing }}|{{ m.missing is defined }}|{{ l[-1] }}|"
                           "{{ l[5] }}|{{ l.0 }}|{{ m.items()|list }}|{{ d.items is callable }}|{{ d['keys'] is defined }}|{{ d.x }}",
     {"m": {"role": "user", "content": "hi"}, "l": [1, 2, 3], "d": {"items": 5, "x": 1}}),
    ("slices", "{{ l[1:] }}|{{ l[:-1] }}|{{ l[::-1] }}|{{ l[::2] }}|{{ s[::-1] }}|{{ s[1:3] }}|{{ l[-2:] }}|"
               "{{ l[5:] }}|{{ l[3:1:-1] }}", {"l": [1, 2, 3, 4], "s": "héllo"}),
    ("whitespace_control", "a  {{- ' b ' -}}  c\n  {%- if true %}  d  {% endif -%}\n  e {#- c -#} f", {}),
    ("trim_and_lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\nz\n  {# comment #}\nw\n{% if true +%}\nq"
                               "\n   {%+ if true %}r{% endif %}{% endif %}", {}),
    ("lstrip_not_for_print", "a\n    {{ 'b' }}\n    {%- if true %}c{% endif %}", {}),
    ("for_loop_vars", "{% for x in l %}[{{ loop.index }},{{ loop.index0 }},{{ loop.revindex }},{{ loop.revindex0 }},"
                      "{{ loop.first }},{{ loop.last }},{{ loop.length }},{{ loop.previtem }},{{ loop.nextitem }},"
                      "{{ loop.cycle('o', 'e') }}]{% endfor %}", {"l": ["a", "b", "c"]}),
    ("for_else_filter_unpack", "{% for x in [] %}no{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ x }}"
                               "{{ loop.index }}{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|"
                               "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'hé' %}<{{ c }}>{% endfor %}",
     {"l": [1, 2, 3], "d": {"b": 1, "a": 2}}),
    ("loop_controls", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}"
                      "{% endif %}{{ x }}{% endfor %}", {}),
    ("nested_loops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}"
                     "{{ loop.index }};{% endfor %}", {}),
    ("set_scoping", "{% set y = 0 %}{% for a in [1, 2, 3] %}{% set y = y + a %}{{ y }}{% endfor %}|{{ y }}|"
                    "{% if true %}{% set z = 5 %}{% endif %}{{ z }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}", {}),
    ("namespace", "{% set ns = namespace(total=0, found=false) %}{% for x in [1, 2, 3] %}{% set ns.total = ns.total + x %}"
                  "{% if x == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.found }} "
                  "{{ ns.missing is defined }}", {}),
    ("set_block", "{% set x %}  inner {{ 1 + 1 }}  {% endset %}[{{ x }}]{% set y | trim | upper %} t {% endset %}[{{ y }}]",
     {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{{ suffix }}{% endmacro %}{% set suffix = '.' %}"
              "{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct=';', name='c') }} {{ greet() }}", {}),
    ("tests", "{{ x is defined }} {{ y is undefined }} {{ none is none }} {{ 's' is string }} {{ {} is mapping }} "
              "{{ 's' is iterable }} {{ [1] is sequence }} {{ 1 is number }} {{ true is number }} {{ true is integer }} "
              "{{ 1.0 is float }} {{ true is boolean }} {{ 3 is divisibleby 3 }} {{ 3 is odd }} {{ 4 is even }} "
              "{{ 'a' is equalto 'a' }} {{ 1 is sameas 1 }} {{ none is sameas none }} {{ 'abc' is lower }} "
              "{{ 2 is in [1, 2] }} {{ x is not none }} {{ range is callable }} {{ 3 is gt 2 }} {{ 'x'.strip is callable }}",
     {"x": 1}),
    ("filters_text", "{{ '  a b  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'abc'|length }}|{{ 'héllo'|length }}|"
                     "{{ 'Abc'|upper }}|{{ 'Abc'|lower }}|{{ 'hello world'|capitalize }}|{{ 'hello wORLD-x(y'|title }}|"
                     "{{ 3|string }}|{{ none|string }}|{{ 'a.b.c'|replace('.', '-') }}|{{ 'aaa'|replace('a', 'b', 2) }}|"
                     "{{ 'abc'|reverse }}|{{ 'one two  three'|wordcount }}", {}),
    ("filters_seq", "{{ l|first }}|{{ l|last }}|{{ l|join(', ') }}|{{ l|join }}|{{ l|length }}|{{ l|list }}|"
                    "{{ l|reverse|list }}|{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ [3, 1, 2, 1]|unique|list }}|"
                    "{{ [1, 2, 3]|sum }}|{{ [1.5, 2]|sum }}|{{ [3, 1, 2]|min }}|{{ [3, 1, 2]|max }}|{{ ['B', 'a', 'C']|sort }}|"
                    "{{ 'cba'|list }}|{{ [] |first is defined }}",
     {"l": ["b", "c", "a"]}),
    ("filters_dicts", "{{ d|items|list }}|{{ d|length }}|{{ undefined_name|items|list }}|{{ d|list }}|"
                      "{{ ms|map(attribute='role')|list }}|{{ ms|map(attribute='x', default='-')|list }}|"
                      "{{ ms|selectattr('role', 'equalto', 'user')|list|length }}|"
                      "{{ ms|rejectattr('role', 'equalto', 'user')|map(attribute='content')|join('+') }}|"
                      "{{ ms|selectattr('tool_calls', 'defined')|list|length }}|"
                      "{{ ms|selectattr('tool_calls', 'undefined')|list|length }}|{{ ms|selectattr('content')|list|length }}|"
                      "{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, 2, 3, 4]|reject('gt', 2)|list }}|"
                      "{{ ['a', 'b']|map('upper')|list }}|{{ ms|join(',', attribute='role') }}|{{ ms|sort(attribute='content')|map(attribute='content')|list }}",
     {"d": {"b": 1, "a": [2]}, "ms": [{"role": "user", "content": "z"}, {"role": "assistant", "content": "",
                                                                          "tool_calls": []},
                                      {"role": "user", "content": "y"}]}),
    ("filters_numbers", "{{ -3|abs }}|{{ '42'|int }}|{{ 'x'|int }}|{{ 'x'|int(7) }}|{{ 3.7|int }}|{{ '1.5'|float }}|"
                        "{{ 2.5|round }}|{{ 3.5|round }}|{{ 2.4|round(method='ceil') }}|{{ 1|float }}", {}),
    ("filters_default", "{{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d') }}|{{ ''|default('d', true) }}|"
                        "{{ x|d('e') }}|{{ 0|default('z', boolean=true) }}", {}),
    ("tojson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(indent=4, sort_keys=true) }}|"
               "{{ d|tojson(separators=(',', ':')) }}|{{ 'é\"\\n\\t\\u0001'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|"
               "{{ 1.0|tojson }}|{{ none|tojson }}|{{ [true, false]|tojson }}|{{ (1, 2)|tojson }}|{{ {}|tojson(indent=2) }}|"
               "{{ []|tojson(indent=2) }}|{{ '😀'|tojson(ensure_ascii=true) }}",
     {"d": {"b": [1, 2.5, {"c": None}], "a": "ü", "n": {}}}),
    ("string_methods", "{{ '  a  '.strip() }}|{{ 'xyax'.strip('xy') }}|{{ '  a  '.lstrip() }}|{{ '  a  '.rstrip() }}|"
                       "{{ 'a,b,,c'.split(',') }}|{{ ' a  b c '.split() }}|{{ 'a b c'.split(' ', 1) }}|"
                       "{{ 'a b c'.rsplit(' ', 1) }}|{{ ' a b  '.split(none, 1) }}|{{ 'abc'.startswith('ab') }}|"
                       "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aaa'.replace('a', 'b') }}|{{ 'héllo'.find('l') }}|"
                       "{{ 'abcabc'.count('bc') }}|{{ '-'.join(['a', 'b']) }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|"
                       "{{ 'ab cd'.title() }}|{{ 'aB'.upper() }}|{{ 'aB'.lower() }}|{{ 'aB'.capitalize() }}|"
                       "{{ '</think>x'.split('</think>')[-1].lstrip('\\n') }}|{{ ' '.isspace() }}|{{ 'ab'.isalpha() }}|"
                       "{{ '12'.isdigit() }}", {}),
    ("dict_methods", "{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 0) }}|{{ d.keys()|list }}|{{ d.values()|list }}|"
                     "{{ dict(x=1, y=2) }}|{{ dict(d) }}|{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}",
     {"d": {"a": 1, "b": 2}}),
    ("range_and_len", "{{ range(3)|list }}|{{ range(1, 7, 2)|list }}|{{ range(3, 0, -1)|list }}|{{ [1, 2]|length }}|"
                      "{{ messages|length }}", {"messages": [{"role": "user"}]}),
    ("strftime", "{{ strftime_now('%d %B %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}|{{ strftime_now('%a %b %j') }}",
     {}),
    ("generation", "A{% generation %}B{{ x }}C{% endgeneration %}D{% for m in [1, 2] %}{% generation %}<{{ m }}>"
                   "{% endgeneration %}{% endfor %}é{% generation %}{% endgeneration %}", {"x": "é"}),
    ("messages_like", "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content | trim "
                      "+ '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                      "{%- endif %}",
     {"messages": [{"role": "user", "content": " hi "}], "add_generation_prompt": True}),
    ("raise_exception", "{{ raise_exception('Conversation roles must alternate') }}", {}),
    ("error_undefined_attribute", "{{ x.y.z }}", {"x": {}}),
    ("error_add_types", "{{ 'a' + 1 }}", {}),
    ("error_undefined_call", "{{ nope() }}", {}),
    ("error_not_iterable", "{% for x in 3 %}{% endfor %}", {}),
]


def compiled(template):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    t = _compile_jinja_template(template)
    t.environment.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return t


def byte_spans(text, spans):
    return [[len(text[:b].encode()), len(text[:e].encode())] for b, e in spans]


def make_language():
    from transformers.utils.chat_template_utils import _render_with_assistant_indices
    cases = []
    for name, template, variables in LANGUAGE:
        case = {"name": name, "template": template, "variables": variables}
        try:
            t = compiled(template)
            if "{% generation" in template:
                text, spans = _render_with_assistant_indices(t, messages=[], tools=None, documents=None,
                                                             add_generation_prompt=False, **variables)
                case["generation"] = byte_spans(text, spans)
            else:
                text = t.render(**variables)
            case["text"] = text
        except Exception as e:  # noqa: BLE001 - the fixture records that jinja2 raises
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)
    return cases


def make_tokenizer():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    path = os.path.join(OUT, "tokenizer.json")
    tok.save(path)
    return path


def make_chats(tokenizer_path):
    from transformers import PreTrainedTokenizerFast
    out = {}
    for name, spec in TEMPLATES.items():
        with open(os.path.join(OUT, "templates", name + ".jinja"), encoding="utf-8", newline="") as f:
            template = f.read()
        hf = PreTrainedTokenizerFast(tokenizer_file=tokenizer_path, **spec["tokens"])
        hf.chat_template = template
        compiled(template)  # pins strftime_now in the cached compiled template
        has_generation = "{% generation %}" in template
        entry = {"tokens": spec["tokens"], "generation": has_generation, "chats": {}}
        for conv_name, conv in CONVERSATIONS.items():
            c = {"messages": conv}
            try:
                text = hf.apply_chat_template(conv, tokenize=False)
            except Exception as e:  # noqa: BLE001
                c["error"] = f"{type(e).__name__}: {e}"
                entry["chats"][conv_name] = c
                continue
            c["text"] = text
            c["text_with_generation_prompt"] = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=True)
            enc = hf.apply_chat_template(conv, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=has_generation)
            c["ids"] = list(enc["input_ids"])
            assert c["ids"] == hf.encode(text, add_special_tokens=False)
            if has_generation:
                c["assistant_mask"] = list(enc["assistant_masks"])
            c["trained"] = [spec["turn"](m["content"]) for m in conv if m["role"] == "assistant"]
            entry["chats"][conv_name] = c
        out[name] = entry
    return out


def write_json(name, data):
    # Lists of numbers (ids, masks, spans) on one line each: the file stays small and reviewable.
    compact = []

    def mark(x):
        if isinstance(x, list) and x and all(isinstance(e, (int, list)) and not isinstance(e, bool) for e in x) \
                and all(isinstance(e, int) or (isinstance(e, list) and all(isinstance(f, int) for f in e)) for e in x):
            compact.append(json.dumps(x, separators=(",", ":")))
            return f"@@{len(compact) - 1}@@"
        if isinstance(x, list):
            return [mark(e) for e in x]
        if isinstance(x, dict):
            return {k: mark(v) for k, v in x.items()}
        return x

    text = json.dumps(mark(data), ensure_ascii=False, indent=1)
    text = re.sub(r'"@@(\d+)@@"', lambda m: compact[int(m.group(1))], text)
    with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
        f.write(text + "\n")


def main():
    os.makedirs(OUT, exist_ok=True)
    path = make_tokenizer()
    with open(os.path.join(OUT, "templates", "llama-3.1-8b-instruct.jinja"), encoding="utf-8", newline="") as f:
        llama = f.read()
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": llama,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    write_json("language.json", {"now": NOW.isoformat(), "cases": make_language()})
    write_json("chats.json", make_chats(path))


if __name__ == "__main__":
    main()

"""Every codec's streaming parser, on what models write (outputs written from each format's
documentation: long values with newlines and `<`, several calls, a call after reasoning, text
before a call, cut-off calls) and on what its own grammar lets a model write. Fed in random
chunk sizes: the result must not depend on the chunking."""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest

from gbnf_sample import Grammar
from localchat.families import FAMILIES
from localchat.families.codecs.base import GrammarOptions, ToolSet
from localchat.grammars import validate
from localchat.neutral import Delta, PastCall, Piece, ReasoningDelta, ToolCallArguments, ToolCallStart, ToolSpec
from localchat.devtools.tool_schemas import ADD, WEATHER

WRITE = {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"},
                                          "mode": {"type": "integer"}, "tags": {"type": "array"}},
         "required": ["path", "content"]}
TOOLS = [ToolSpec("write_file", "Write a file", WRITE), ToolSpec("get_weather", "Weather in a city", WEATHER), ToolSpec("add", parameters=ADD)]
SCHEMAS = {t.name: t.parameters for t in TOOLS}
CODE = 'def f(x):\n    if x < 3 and x > -1:\n        return "<b>" + str(x)  # </b> <tool_call>\n\n    return None\n'
JCODE = json.dumps(CODE)
WRITE_ARGS = {"path": "src/a.py", "content": CODE}
PARIS = {"city": "Paris", "days": 2}


def split(family: str, text: str, *, strict: bool = True, thinking: bool = False, chunks: int | None = None,
          tools: list[ToolSpec] = TOOLS) -> tuple[str, str, list[tuple[str, dict]]]:
    """(content, reasoning, [(name, arguments)]) for `text`, fed whole or in random chunks."""
    splitter = FAMILIES[family].splitter(tools, thinking, strict)
    pieces: list[Piece] = []
    if chunks is None:
        pieces += splitter.push(text)
    else:
        rng, i = random.Random(chunks), 0
        while i < len(text):
            n = rng.choice((1, 1, 2, 3, 5, 8, 13))
            pieces += splitter.push(text[i:i + n])
            i += n
    pieces += splitter.finish()
    return merge(pieces)


def merge(pieces: list[Piece]) -> tuple[str, str, list[tuple[str, dict]]]:
    content, reasoning, calls = "", "", {}
    for p in pieces:
        if isinstance(p, Delta):
            content += p.content
        elif isinstance(p, ReasoningDelta):
            reasoning += p.text
        elif isinstance(p, ToolCallStart):
            assert p.index not in calls and p.id
            calls[p.index] = [p.name, ""]
        elif isinstance(p, ToolCallArguments):
            calls[p.index][1] += p.fragment
    assert list(calls) == list(range(len(calls))), "calls are numbered in order"
    return content, reasoning, [(name, json.loads(args)) for name, args in calls.values()]


def check(family: str, text: str, expected: tuple, *, strict: bool = True, thinking: bool = False) -> None:
    whole = split(family, text, strict=strict, thinking=thinking)
    assert whole == expected
    for seed in range(12):
        assert split(family, text, strict=strict, thinking=thinking, chunks=seed) == whole, f"chunking {seed}"


# -- what models write ----------------------------------------------------------------------------

OUTPUTS = [
    # (family, output, thinking, expected (content, reasoning, calls)); each checked strict and lenient
    ("chatml", f'I will write it.\n<tool_call>\n{{"name": "write_file", "arguments": {{"path": "src/a.py", '
               f'"content": {JCODE}}}}}\n</tool_call>\n<tool_call>\n{{"name": "get_weather", "arguments": '
               f'{{"city": "Paris", "days": 2}}}}\n</tool_call>', False,
     ("I will write it.", "", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("chatml", 'The user asks for the weather.\nI should call get_weather.\n</think>\n\n<tool_call>\n'
               '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>', True,
     ("", "The user asks for the weather.\nI should call get_weather.\n", [("get_weather", PARIS)])),
    ("chatml", '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', False,  # SmolLM3: no newlines
     ("", "", [("add", {"a": 1, "b": 2})])),
    ("qwen3-coder", f"Writing the file now.\n\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/a.py\n"
                    f"</parameter>\n<parameter=content>\n{CODE}\n</parameter>\n<parameter=mode>\n420\n</parameter>\n"
                    "<parameter=tags>\n[\"x\", \"<y>\"]\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
                    "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
                    "</function>\n</tool_call>", False,
     ("Writing the file now.", "", [("write_file", {**WRITE_ARGS, "mode": 420, "tags": ["x", "<y>"]}),
                                    ("get_weather", PARIS)])),
    ("qwen3-coder", "Let me look.\n</think>\n\n<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n"
                    "<parameter=b>\n2.5\n</parameter>\n</function>\n</tool_call>", True,  # Qwen 3.5 thinks first
     ("", "Let me look.\n", [("add", {"a": 1, "b": 2.5})])),
    ("gpt-oss", "<|channel|>analysis<|message|>Need the weather; call get_weather.<|end|><|start|>assistant"
                "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
                '{"city":"Paris","days":2}', False,
     ("", "Need the weather; call get_weather.", [("get_weather", PARIS)])),
    ("gpt-oss", "<|channel|>analysis<|message|>Easy: 2 < 3.<|end|><|start|>assistant<|channel|>final<|message|>"
                "Yes, <b>2 < 3</b>.\nDone.", False, ("Yes, <b>2 < 3</b>.\nDone.", "Easy: 2 < 3.", [])),
    ("gpt-oss", '<|start|>assistant to=functions.add<|channel|>commentary json<|message|>{"a": 1, "b": 2}', False,
     ("", "", [("add", {"a": 1, "b": 2})])),  # the recipient before the channel, as gpt-oss's template writes it
    ("mistral3", f'[TOOL_CALLS]write_file[ARGS]{{"path": "src/a.py", "content": {JCODE}}}'
                 '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}', False,
     ("", "", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("mistral3", '[THINK]Weather, so get_weather.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]'
                 '{"city": "Paris", "days": 2}', False,  # Magistral reasons first
     ("Checking.", "Weather, so get_weather.", [("get_weather", PARIS)])),
    ("mistral-small-3.2", '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Paris", "days": 2}'
                          '[TOOL_CALLS]add[CALL_ID]zzzzzzzz9[ARGS]{"a": 1, "b": 2}', False,
     ("", "", [("get_weather", PARIS), ("add", {"a": 1, "b": 2})])),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
                '{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "abcdefghi"}]', False,
     ("", "", [("get_weather", PARIS), ("add", {"a": 1, "b": 2})])),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}', False,
     ("", "", [("get_weather", PARIS)])),
    ("deepseek-r1", 'The weather tool fits.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function'
                    '<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris", "days": 2}\n```<｜tool▁call▁end｜>\n'
                    '<｜tool▁call▁begin｜>function<｜tool▁sep｜>add\n```json\n{"a": 1, "b": 2}\n```'
                    '<｜tool▁call▁end｜><｜tool▁calls▁end｜>', True,
     ("", "The weather tool fits.\n", [("get_weather", PARIS), ("add", {"a": 1, "b": 2})])),
    ("deepseek-v3.1", 'Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>'
                      '{"city": "Paris", "days": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>', False,
     ("Sure.", "", [("get_weather", PARIS)])),
    ("glm", f"\n<think>Write it.</think>\n<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>src/a.py"
            f"</arg_value>\n<arg_key>content</arg_key>\n<arg_value>{CODE}</arg_value>\n</tool_call>", False,
     ("", "Write it.", [("write_file", WRITE_ARGS)])),
    ("glm-4.7", "<tool_call>add<arg_key>a</arg_key><arg_value>1</arg_value><arg_key>b</arg_key><arg_value>2"
                "</arg_value></tool_call><tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
                "<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>", False,
     ("", "", [("add", {"a": 1, "b": 2}), ("get_weather", PARIS)])),
    ("kimi-k2", "I'll check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
                '<|tool_call_argument_begin|>{"city": "Paris", "days": 2}<|tool_call_end|><|tool_call_begin|>'
                'functions.add:1<|tool_call_argument_begin|>{"a": 1, "b": 2}<|tool_call_end|>'
                "<|tool_calls_section_end|>", False,
     ("I'll check.", "", [("get_weather", PARIS), ("add", {"a": 1, "b": 2})])),
    ("granite", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', False,
     ("", "", [("get_weather", PARIS)])),
    ("granite4", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', False,
     ("", "", [("add", {"a": 1, "b": 2})])),
    ("phi4-mini", 'functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]', False,
     ("", "", [("get_weather", PARIS)])),
    ("command-r7b", '<|START_THINKING|>I will look up the weather.<|END_THINKING|><|START_ACTION|>[\n'
                    '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", "days": 2}}\n'
                    ']<|END_ACTION|>', False,
     ("", "I will look up the weather.", [("get_weather", PARIS)])),
    ("gemma", '```tool_call\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n```', False,
     ("", "", [("get_weather", PARIS)])),
    # famB
    ("deepseek-v3.2", f'I will write it.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name="write_file">\n'
                      f'<｜DSML｜parameter name="path" string="true">src/a.py</｜DSML｜parameter>\n'
                      f'<｜DSML｜parameter name="content" string="true">{CODE}</｜DSML｜parameter>\n'
                      '<｜DSML｜parameter name="mode" string="false">420</｜DSML｜parameter>\n'
                      '<｜DSML｜parameter name="tags" string="false">["x", "<y>"]</｜DSML｜parameter>\n'
                      '</｜DSML｜invoke>\n<｜DSML｜invoke name="get_weather">\n'
                      '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
                      '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n'
                      '</｜DSML｜invoke>\n</｜DSML｜function_calls>', False,
     ("I will write it.", "", [("write_file", {**WRITE_ARGS, "mode": 420, "tags": ["x", "<y>"]}),
                               ("get_weather", PARIS)])),
    ("deepseek-v4", 'The weather tool fits; 2 < 3 days.</think>\n\n<｜DSML｜tool_calls>\n'
                    '<｜DSML｜invoke name="add">\n<｜DSML｜parameter name="a" string="false">1</｜DSML｜parameter>\n'
                    '<｜DSML｜parameter name="b" string="false">2.5</｜DSML｜parameter>\n</｜DSML｜invoke>\n'
                    '</｜DSML｜tool_calls>', True,
     ("", "The weather tool fits; 2 < 3 days.", [("add", {"a": 1, "b": 2.5})])),
    ("gemma4", f'Writing it.<|tool_call>call:write_file{{content:<|"|>{CODE}<|"|>,mode:420,path:<|"|>src/a.py<|"|>,'
               'tags:[<|"|>x<|"|>,<|"|><y><|"|>]}<tool_call|><|tool_call>call:get_weather{city:<|"|>Paris<|"|>,'
               'days:2}<tool_call|>', False,
     ("Writing it.", "", [("write_file", {**WRITE_ARGS, "mode": 420, "tags": ["x", "<y>"]}), ("get_weather", PARIS)])),
    ("gemma4", '<|channel>thought\nThe user wants {weather}: 2 < 3.<channel|><|tool_call>call:add{a:1,b:2.5}'
               '<tool_call|>', False,  # reasoning the model opened itself
     ("", "The user wants {weather}: 2 < 3.", [("add", {"a": 1, "b": 2.5})])),
    ("hy3", f"Weather: 2 < 3.</think:opensource>Writing it.<tool_calls:opensource>\n<tool_call:opensource>write_file"
            f"<tool_sep:opensource>\n<arg_key:opensource>path</arg_key:opensource>\n<arg_value:opensource>src/a.py"
            f"</arg_value:opensource>\n<arg_key:opensource>content</arg_key:opensource>\n<arg_value:opensource>{CODE}"
            "</arg_value:opensource>\n</tool_call:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n"
            "<arg_key:opensource>city</arg_key:opensource>\n<arg_value:opensource>Paris</arg_value:opensource>\n"
            "<arg_key:opensource>days</arg_key:opensource>\n<arg_value:opensource>2</arg_value:opensource>\n"
            "</tool_call:opensource>\n</tool_calls:opensource>", True,
     ("Writing it.", "Weather: 2 < 3.", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("minicpm5", f'Writing it.\n<function name="write_file"><param name="path">src/a.py</param>'
                 f'<param name="content"><![CDATA[{CODE}]]></param><param name="mode">420</param>'
                 '<param name="tags">["x", "<y>"]</param></function>\n<function name="get_weather">'
                 '<param name="city">Paris</param><param name="days">2</param></function>', False,
     ("Writing it.", "", [("write_file", {**WRITE_ARGS, "mode": 420, "tags": ["x", "<y>"]}), ("get_weather", PARIS)])),
    ("minicpm5", '<think>\nWeather: 2 < 3.\n</think>\n\n<function name="add"><param name="a">1</param>'
                 '<param name="b">2.5</param></function>', False,
     ("", "\nWeather: 2 < 3.\n", [("add", {"a": 1, "b": 2.5})])),
    ("lfm2", f"I will write it.<|tool_call_start|>[write_file(path='src/a.py', content={JCODE}, mode=420, "
             "tags=['x', '<y>']), get_weather(city=\"Paris\", days=2)]<|tool_call_end|>", False,
     ("I will write it.", "", [("write_file", {**WRITE_ARGS, "mode": 420, "tags": ["x", "<y>"]}),
                               ("get_weather", PARIS)])),
    ("lfm2", "The user wants (weather) for 2 < 3 days.</think>\n<|tool_call_start|>[add(a=1, b=2.5)]"
             "<|tool_call_end|>", True, ("", "The user wants (weather) for 2 < 3 days.", [("add", {"a": 1, "b": 2.5})])),
    # famA
    ("seed-oss", f"<seed:think>A file, then the weather.</seed:think>\n<seed:tool_call>\n<function=write_file>\n"
                 f"<parameter=path>src/a.py</parameter>\n<parameter=content>{CODE}</parameter>\n</function>\n"
                 "</seed:tool_call>\n<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n"
                 "<parameter=days>2</parameter>\n</function>\n</seed:tool_call>", False,
     ("", "A file, then the weather.", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("minimax-m2", f'Let me check.\n</think>\n\n<minimax:tool_call>\n<invoke name="write_file">\n'
                   f'<parameter name="path">src/a.py</parameter>\n<parameter name="content">{CODE}</parameter>\n'
                   '</invoke>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                   '<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>', True,
     ("", "Let me check.\n", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("apriel-1.6", f'The user wants a file and the weather.\n[BEGIN FINAL RESPONSE]\n<tool_calls>[{{"name": '
                   f'"write_file", "arguments": {{"path": "src/a.py", "content": {JCODE}}}}}, {{"name": "get_weather", '
                   '"arguments": {"city": "Paris", "days": 2}}]</tool_calls>', True,
     ("", "The user wants a file and the weather.\n", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("apriel-1.5", 'Here are my reasoning steps:\nThe weather tool.\n[BEGIN FINAL RESPONSE]\nChecking.\n<tool_calls>['
                   '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]</tool_calls>', False,
     ("Checking.", "\nThe weather tool.\n", [("get_weather", PARIS)])),
    ("nemotron-nano-2", f'Two calls.\n</think>\n\n<TOOLCALL>[{{"name": "get_weather", "arguments": {{"city": "Paris", '
                        f'"days": 2}}}}, {{"name": "write_file", "arguments": {{"path": "src/a.py", "content": {JCODE}}}}}]'
                        '</TOOLCALL>', True,
     ("", "Two calls.\n", [("get_weather", PARIS), ("write_file", WRITE_ARGS)])),
    ("minimax-m1", f'<think>\nA file, then the weather.\n</think>\n\n<tool_calls>\n{{"name": "write_file", "arguments": '
                   f'{{"path": "src/a.py", "content": {JCODE}}}}}\n{{"name": "get_weather", "arguments": {{"city": '
                   '"Paris", "days": 2}}\n</tool_calls>', False,
     ("", "\nA file, then the weather.\n", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("apertus", f'<|inner_prefix|>Write it, then look.<|inner_suffix|>Sure.<|tools_prefix|>[{{"write_file": '
                f'{{"path": "src/a.py", "content": {JCODE}}}}}, {{"get_weather": {{"city": "Paris", "days": 2}}}}]'
                '<|tools_suffix|>', False,
     ("Sure.", "Write it, then look.", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    # (Solar Open: <|calls|> ends the turn, a stop token the text never shows; <|content|> shows as nothing)
    ("solar-open", f'<|think|>A file, then the weather.<|end|><|begin|>assistant<|tool_calls|><|tool_call:begin|>'
                   f'a1b2c3d4e5<|tool_call:name|>write_file<|tool_call:args|>{{"path": "src/a.py", "content": {JCODE}}}'
                   '<|tool_call:end|><|tool_call:begin|>f6g7h8i9j0<|tool_call:name|>get_weather<|tool_call:args|>'
                   '{"city": "Paris", "days": 2}<|tool_call:end|>', False,
     ("", "A file, then the weather.", [("write_file", WRITE_ARGS), ("get_weather", PARIS)])),
    ("solar-open", "<|think|>Easy: 2 < 3.<|end|><|begin|>assistantYes, <b>2 < 3</b>.\nDone.", False,
     ("Yes, <b>2 < 3</b>.\nDone.", "Easy: 2 < 3.", [])),
    # famC
    # (GigaChat: one call a turn; 3 writes it as a `function call` turn, 3.1 after <|function_call|>)
    ("gigachat3", f'function call<|role_sep|>\n{{"name": "write_file", "arguments": {{"path": "src/a.py", "content": '
                  f'{JCODE}, "mode": 420}}}}', False, ("", "", [("write_file", {**WRITE_ARGS, "mode": 420})])),
    ("gigachat3", '<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": "Paris", '
                  '"days": 2}}', False, ("<|message_sep|>", "", [("get_weather", PARIS)])),  # after an empty turn
    ("gigachat3.1", f'I will write it: <b>2 < 3</b>.\n<|function_call|>{{"name": "write_file", "arguments": '
                    f'{{"path": "src/a.py", "content": {JCODE}}}}}', False,
     ("I will write it: <b>2 < 3</b>.", "", [("write_file", WRITE_ARGS)])),
    ("minimax-m3", f'<mm:think>A file, then the weather: 2 < 3.</mm:think>]<]minimax[>[<tool_call>\n'
                   f']<]minimax[>[<invoke name="write_file">]<]minimax[>[<path>src/a.py]<]minimax[>[</path>'
                   f']<]minimax[>[<content>{CODE}]<]minimax[>[</content>]<]minimax[>[<mode>420]<]minimax[>[</mode>'
                   ']<]minimax[>[</invoke>\n]<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris'
                   ']<]minimax[>[</city>]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[</invoke>\n'
                   ']<]minimax[>[</tool_call>', False,
     ("", "A file, then the weather: 2 < 3.", [("write_file", {**WRITE_ARGS, "mode": 420}), ("get_weather", PARIS)])),
    ("minimax-m3", 'Easy: 2 < 3.</mm:think>Checking.]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="add">'
                   ']<]minimax[>[<a>1]<]minimax[>[</a>]<]minimax[>[<b>2.5]<]minimax[>[</b>]<]minimax[>[</invoke>\n'
                   ']<]minimax[>[</tool_call>', True,
     ("Checking.", "Easy: 2 < 3.", [("add", {"a": 1, "b": 2.5})])),
    ("minimax-m3", "</mm:think>Yes, <b>2 < 3</b>.\nDone.", False, ("Yes, <b>2 < 3</b>.\nDone.", "", [])),  # no reasoning
    # (Muse Glimmer: each message's header names its recipient; the prompt ends with `<|start|>assistant`)
    ("muse-glimmer", f' to=self<|message|>A file, then the weather: 2 < 3.<|eom|><|start|>assistant to=write_file'
                     f'<|message|><atem:function_calls>\n<atem:invoke name="write_file">\n<atem:parameter name="path">'
                     f'src/a.py</atem:parameter>\n<atem:parameter name="content">{CODE}</atem:parameter>\n'
                     '<atem:parameter name="mode">420</atem:parameter>\n<atem:parameter name="tags">["x", "<y>"]'
                     '</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|><|start|>assistant to=get_weather'
                     '<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">'
                     'Paris</atem:parameter>\n<atem:parameter name="days">2</atem:parameter>\n</atem:invoke>\n'
                     '</atem:function_calls>', False,
     ("", "A file, then the weather: 2 < 3.", [("write_file", {**WRITE_ARGS, "mode": 420, "tags": ["x", "<y>"]}),
                                             ("get_weather", PARIS)])),
    ("muse-glimmer", ' to=self<|message|>Easy: 2 < 3.<|eom|><|start|>assistant to=user<|message|>Yes, <b>2 < 3</b>.\n'
                     'Done.', False, ("Yes, <b>2 < 3</b>.\nDone.", "Easy: 2 < 3.", [])),
    ("muse-glimmer", "Plain text, <b>2 < 3</b>.", False, ("Plain text, <b>2 < 3</b>.", "", [])),  # no header
    # (Kimi K3: the prompt opens <|open|>think<|sep|>; the answer in response, the calls in tools)
    ("kimi-k3", f'A file, then the weather: 2 < 3.<|close|>think<|sep|><|open|>response<|sep|>Writing it.'
                f'<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="write_file" index="1"<|sep|>'
                f'<|open|>argument key="path" type="string"<|sep|>src/a.py<|close|>argument<|sep|>'
                f'<|open|>argument key="content" type="string"<|sep|>{CODE}<|close|>argument<|sep|>'
                '<|open|>argument key="mode" type="number"<|sep|>420<|close|>argument<|sep|>'
                '<|open|>argument key="tags" type="array"<|sep|>["x","<y>"]<|close|>argument<|sep|><|close|>call<|sep|>'
                '<|open|>call tool="get_weather" index="2"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris'
                '<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>2<|close|>argument<|sep|>'
                '<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>', True,
     ("Writing it.", "A file, then the weather: 2 < 3.", [("write_file", {**WRITE_ARGS, "mode": 420, "tags": ["x", "<y>"]}),
                                                          ("get_weather", PARIS)])),
    ("kimi-k3", "Easy: 2 < 3.<|close|>think<|sep|><|open|>response<|sep|>Yes, <b>2 < 3</b>.\nDone.<|close|>response"
                "<|sep|><|close|>message<|sep|>", True, ("Yes, <b>2 < 3</b>.\nDone.", "Easy: 2 < 3.", [])),
]


@pytest.mark.fast
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
@pytest.mark.parametrize("family, text, thinking, expected", OUTPUTS, ids=[f"{o[0]}-{i}" for i, o in enumerate(OUTPUTS)])
def test_what_models_write_parses_whatever_the_chunking(family: str, text: str, thinking: bool, expected: tuple,
                                                         strict: bool):
    check(family, text, expected, strict=strict, thinking=thinking)


LENIENT = [
    # (family, what an unconstrained model wrote, expected)
    ("chatml", '<tool_call>\n{"arguments": {"a": 1, "b": 2}, "name": "add"}\n</tool_call>',  # keys in any order
     ("", "", [("add", {"a": 1, "b": 2})])),
    ("chatml", '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}\n</tool_call>',  # as a string
     ("", "", [("add", {"a": 1, "b": 2})])),
    ("chatml", 'See <tool_call> in the docs, and {"name": "x"}.',  # a marker in prose: text
     ('See <tool_call> in the docs, and {"name": "x"}.', "", [])),
    ("chatml", 'Calling:\n<tool_call>\n{"name": "no_such_tool", "arguments": {}}\n</tool_call>',  # unknown tool: text
     ('Calling:\n<tool_call>\n{"name": "no_such_tool", "arguments": {}}\n</tool_call>', "", [])),
    ("chatml", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}',  # no closing tag: repaired
     ("", "", [("add", {"a": 1, "b": 2})])),
    ("chatml", '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": [2',  # cut off: closed
     ("", "", [("add", {"a": 1, "b": [2]})])),
    ("chatml", '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n<tool_call>\n{"name": "add", "argu',
     ("<tool_call>\n{\"name\": \"add\", \"argu", "", [("add", {"a": 1})])),  # a second call that cannot be read
    ("qwen3-coder", "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n<parameter=content>\n"
                    "line 1\nline <2>", ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),
    ("qwen3-coder", "<tool_call>\n<function=add>\n<parameter=a>\n1\n</parameter>\n</function>",  # no </tool_call>
     ("", "", [("add", {"a": 1})])),
    ("qwen3-coder", "<tool_call>\n<function=add>\n<parameter=a>\nTrue\n</parameter>\n</function>\n</tool_call>",
     ("", "", [("add", {"a": True})])),  # a template's Python literal
    ("llama3", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
     ("", "", [("get_weather", PARIS)])),
    ("gemma", 'Here:\n```json\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n```',
     ("Here:", "", [("add", {"a": 1, "b": 2})])),
    ("gemma", '```json\n{"not": "a call"}\n```', ('```json\n{"not": "a call"}\n```', "", [])),
    ("gpt-oss", '<|channel|>commentary to=functions.add <|constrain|>json<|message|>{"a": 1, "b"',  # cut off
     ('{"a": 1, "b"', "", [])),
    # famB
    ("deepseek-v4", '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="write_file">\n<｜DSML｜parameter name="path" '
                    'string="true">a.py</｜DSML｜parameter>\n<｜DSML｜parameter name="content" string="true">'
                    'line 1\nline <2>', ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),
    ("deepseek-v4", '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" '
                    'string="false">"Paris"</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="true">2'
                    '</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>',  # the attribute mistaken
     ("", "", [("get_weather", PARIS)])),
    ("gemma4", '<|tool_call>call:write_file{path:<|"|>a.py<|"|>,content:<|"|>line 1\nline <2>',  # cut off
     ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),
    ("gemma4", '<|tool_call>call:get_weather{"city": "Paris", "days": 2}<tool_call|>',  # JSON inside: read too
     ("", "", [("get_weather", PARIS)])),
    ("lfm2", "<|tool_call_start|>[write_file(path='a.py', content='line 1\nline <2> (it\\'s)')]<|tool_call_end|>",
     ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2> (it's)"})])),  # the template's raw text
    ("lfm2", "<|tool_call_start|>[write_file(path='a.py', content='line 1\nline <2>",  # cut off
     ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),
    ("minicpm5", '<function name="write_file"><param name="path">a.py</param><param name="content"><![CDATA[line 1\n'
                 'line <2>', ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),  # cut off
    ("gemma4", 'Use <|tool_call>call:nope{a:1}<tool_call|> like this.',  # an unknown tool: text
     ('Use <|tool_call>call:nope{a:1}<tool_call|> like this.', "", [])),
    # famA: cut off inside a call (no closing): repaired
    ("minimax-m1", '<tool_calls>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n{"name": "write_file", '
                   '"arguments": {"path": "a.py", "content": "x < y\\n', ("", "", [("add", {"a": 1, "b": 2}), (
                       "write_file", {"path": "a.py", "content": "x < y\n"})])),
    ("apertus", '<|tools_prefix|>[{"write_file": {"path": "a.py", "content": "<b>\\nline 2', (
        "", "", [("write_file", {"path": "a.py", "content": "<b>\nline 2"})])),
    ("solar-open", '<|tool_calls|><|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>write_file<|tool_call:args|>'
                   '{"path": "a.py", "content": "x < y', ("", "", [("write_file", {"path": "a.py", "content": "x < y"})])),
    # famC
    ("gigachat3", 'function call<|role_sep|>\n{"name": "write_file", "arguments": {"path": "a.py", "content": "x < y\\n',
     ("", "", [("write_file", {"path": "a.py", "content": "x < y\n"})])),
    ("gigachat3.1", '<|function_call|>{"name": "write_file", "arguments": {"path": "a.py", "content": "x < y\\n',
     ("", "", [("write_file", {"path": "a.py", "content": "x < y\n"})])),
    ("minimax-m3", ']<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="write_file">]<]minimax[>[<path>a.py'
                   ']<]minimax[>[</path>]<]minimax[>[<content>line 1\nline <2>',
     ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),
    ("muse-glimmer", ' to=write_file<|message|><atem:function_calls>\n<atem:invoke name="write_file">\n'
                     '<atem:parameter name="path">a.py</atem:parameter>\n<atem:parameter name="content">line 1\nline <2>',
     ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),
    ("kimi-k3", '<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="write_file" index="1"<|sep|>'
                '<|open|>argument key="path" type="string"<|sep|>a.py<|close|>argument<|sep|><|open|>argument '
                'key="content" type="string"<|sep|>line 1\nline <2>',
     ("", "", [("write_file", {"path": "a.py", "content": "line 1\nline <2>"})])),
]


@pytest.mark.fast
@pytest.mark.parametrize("family, text, expected", LENIENT, ids=[f"{o[0]}-{i}" for i, o in enumerate(LENIENT)])
def test_lenient_parsing_repairs_or_keeps_the_text(family: str, text: str, expected: tuple):
    check(family, text, expected, strict=False)


@pytest.mark.fast
@pytest.mark.parametrize("family", ["chatml", "qwen3-coder", "mistral3", "kimi-k2", "deepseek-v3.1", "gpt-oss",
                                    "deepseek-v3.2", "gemma4", "lfm2", "minicpm5", "hy3",
                                    "seed-oss", "minimax-m2", "nemotron-nano-2", "apriel-1.6", "minimax-m1",
                                    "apertus", "solar-open", "gigachat3", "gigachat3.1", "minimax-m3",
                                    "muse-glimmer", "kimi-k3"])
def test_a_cut_off_constrained_call_keeps_what_was_written(family: str):
    """Strict: max_tokens inside a call: the call is announced, its arguments are what came."""
    text = "".join(t for t, _ in FAMILIES[family].codec.format_calls([PastCall("write_file", WRITE_ARGS)]))
    cut = text[:text.index("return") + 6]
    content, _, calls = split(family, cut + "\n", strict=True) if False else (None, None, None)
    splitter = FAMILIES[family].splitter(TOOLS, False, True)
    pieces = splitter.push(cut) + splitter.finish()
    starts = [p for p in pieces if isinstance(p, ToolCallStart)]
    assert [s.name for s in starts] == ["write_file"] and splitter.calls == 1
    assert "if x < 3" in "".join(p.fragment for p in pieces if isinstance(p, ToolCallArguments))
    assert not any(isinstance(p, Delta) and p.content.strip() for p in pieces)


@pytest.mark.fast
@pytest.mark.parametrize("family", FAMILIES)
def test_output_cut_off_after_a_call_shows_no_markup(family: str):
    """Strict: max_tokens anywhere after the first call: the rest, a cut-off call, is not text
    (and reading ends: a harmony header cut off once looped forever)."""
    codec = FAMILIES[family].codec
    one = "".join(t for t, _ in codec.format_calls([PastCall("add", {"a": 1, "b": 2})]))
    two = "".join(t for t, _ in codec.format_calls([PastCall("add", {"a": 1, "b": 2}), PastCall("get_weather", PARIS)]))
    common = next((i for i, (a, b) in enumerate(zip(one, two)) if a != b), min(len(one), len(two)))
    for cut in range(common, len(two)):
        splitter = FAMILIES[family].splitter(TOOLS, False, True)
        pieces = splitter.push(two[:cut]) + splitter.finish()
        assert [p.name for p in pieces if isinstance(p, ToolCallStart)][:1] == ["add"], two[:cut]
        assert not "".join(p.content for p in pieces if isinstance(p, Delta)).strip(), two[:cut]


# -- writing and reading back ---------------------------------------------------------------------

CALLS = [PastCall("write_file", WRITE_ARGS, "call_1"), PastCall("get_weather", PARIS, "call_2")]


@pytest.mark.fast
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_calls_written_by_the_codec_read_back(family: str, strict: bool):
    codec = FAMILIES[family].codec
    calls = CALLS[:1] if family == "gpt-oss" else CALLS  # (harmony: one call a turn)
    text = "".join(t for t, _ in codec.format_calls(calls))
    assert split(family, text, strict=strict) == ("", "", [(c.name, c.arguments) for c in calls])


@pytest.mark.fast
@pytest.mark.parametrize("family", FAMILIES)
def test_a_tool_named_in_another_case_is_the_declared_tool(family: str):
    """Lenient reading (no grammar wrote the name): `Write-File` and `WRITEFILE` are `write_file`."""
    codec = FAMILIES[family].codec
    for spelled in ("Write-File", "WRITEFILE", "write_File"):
        text = "".join(t for t, _ in codec.format_calls([PastCall(spelled, WRITE_ARGS, "call_1")]))
        assert split(family, text, strict=False) == ("", "", [("write_file", WRITE_ARGS)]), spelled


@pytest.mark.fast
def test_a_name_is_read_back_only_to_one_declared_tool():
    tools = ToolSet([ToolSpec("Bash"), ToolSpec("read_file"), ToolSpec("ReadFile"), ToolSpec("web-fetch")])
    assert tools.resolve("Bash") == "Bash" and tools.resolve("bash") == "Bash" and tools.resolve("BASH") == "Bash"
    assert tools.resolve("web_fetch") == "web-fetch" and tools.resolve("WebFetch") == "web-fetch"
    # two declared tools spelled alike: each only by its own name
    assert tools.resolve("read_file") == "read_file" and tools.resolve("ReadFile") == "ReadFile"
    assert tools.resolve("readfile") is None and tools.resolve("Read-File") is None
    assert tools.resolve("bash2") is None and tools.resolve("ba sh") is None and tools.resolve("") is None
    for name, yes, no in [("Bash", ["bash", "BASH", "b_a-sh"], ["bash2", "bsh"]),
                          ("web-fetch", ["web_fetch", "WebFetch", "webfetch"], ["web fetch", "web.fetch"]),
                          ("read_file", ["read_file"], ["readfile", "Read_File"])]:
        pattern = tools.spellings(name)
        assert all(re.fullmatch(pattern, y) and tools.resolve(y) == name for y in yes), name
        assert not any(re.fullmatch(pattern, n) for n in no), name


# -- what the grammar lets a model write ----------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("lazy", [False, True], ids=["required", "auto"])
def test_every_sentence_of_the_grammar_parses_into_valid_calls(family: str, lazy: bool):
    codec = FAMILIES[family].codec
    tools = [ToolSpec("get_weather", parameters=WEATHER), ToolSpec("add", parameters=ADD)]
    grammar = codec.grammar(tools, GrammarOptions(parallel=family != "gpt-oss", lazy=lazy))
    validate(grammar)
    sentences, rng = Grammar(grammar), random.Random(7)
    before = "<|channel|>analysis<|message|>Call it.<|end|><|start|>assistant<|channel|>commentary " \
        if family == "gpt-oss" else "Let me call it. "
    prefix = before + codec.trigger if lazy else ""
    for i in range(25):
        text = prefix + sentences.sample(rng, budget=120)
        content, _, calls = split(family, text, strict=True, tools=tools, chunks=i)
        assert calls, text
        assert content.strip() in ("", "Let me call it."), (content, text)  # (gpt-oss: "Call it." is reasoning)
        for name, arguments in calls:
            jsonschema.validate(arguments, {"add": ADD, "get_weather": WEATHER}[name])
        assert split(family, text, strict=True, tools=tools) == (content, "", calls) or family == "gpt-oss"


# -- what real models write instead of their syntax -----------------------------------------------
# Recorded from the shipped Qwen2.5-Coder 0.5B / 1.5B (chat template: <tool_call> tags), asked to use a tool:
# through the chat route, Codex and Claude Code they wrote the call fenced, bare or in other tags.
SHELL = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
EXEC = {"type": "object", "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}}, "required": ["cmd"]}
REAL_TOOLS = [ToolSpec("shell", parameters=SHELL), ToolSpec("exec_command", parameters=EXEC), ToolSpec("Agent", parameters={"type": "object"})]
ECHO = {"command": "echo localchat-acceptance-42"}
WRITTEN = [
    ('```json\n{"name": "shell", "arguments": {"command": "echo localchat-acceptance-42"}}\n```',
     ("", "", [("shell", ECHO)])),
    ('Sure!\n```json\n{\n  "name": "shell",\n  "arguments": {\n    "command": "echo localchat-acceptance-42"\n  }\n}\n'
     '```\nThis prints the text.', ("Sure!This prints the text.", "", [("shell", ECHO)])),
    ('<tools>\n{"name": "exec_command", "arguments": {"cmd": "echo localchat-acceptance-42", "workdir": "/tmp/w"}}\n'
     '</tools>', ("", "", [("exec_command", {"cmd": "echo localchat-acceptance-42", "workdir": "/tmp/w"})])),
    ('<tools>\n{"name": "exec_command", "arguments": {"cmd": "ls"}}', ("", "", [("exec_command", {"cmd": "ls"})])),
    ('{"name": "shell", "parameters": {"command": "ls -la"}}', ("", "", [("shell", {"command": "ls -la"})])),
    ('```\n{"name": "shell", "arguments": {"command": "ls"}}\n{"name": "shell", "arguments": {"command": "pwd"}}\n```',
     ("", "", [("shell", {"command": "ls"}), ("shell", {"command": "pwd"})])),
    ('```json\n{"name": "shell", "arguments": {"command": "ls"}}\n```\n```json\n{"name": "shell", "arguments": '
     '{"command": "pwd"}}\n```', ("", "", [("shell", {"command": "ls"}), ("shell", {"command": "pwd"})])),
    ('<function_call>{"name": "Agent", "arguments": {"prompt": "look"}}</function_call>',
     ("", "", [("Agent", {"prompt": "look"})])),
    ('<tool>{"name": "shell", "arguments": {"command": "ls"}}</tool>', ("", "", [("shell", {"command": "ls"})])),
    ('<json>\n{"name": "shell", "arguments": {"command": "ls"}}\n</json>', ("", "", [("shell", {"command": "ls"})])),
    ('<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}', ("", "", [("shell", {"command": "ls"})])),
    ('I will run it.\n{\n  "name": "shell",\n  "arguments": {\n    "command": "ls"\n  }\n}',
     ("I will run it.", "", [("shell", {"command": "ls"})])),
    # pi's `bash` call as the 1.5B wrote it: OpenAI's own call item in <tools>, cut where the grammar that a
    # `{"name": "TOOL"` inside it triggered ended the output (recorded: scripts/acceptance, pi, tool)
    ('<tools>\n  {"type": "function", "function": {"name": "shell", "arguments": {"command": "echo localchat-acceptance-42"}}',
     ("", "", [("shell", ECHO)])),
    ('<tools>\n{"type": "function", "function": {"name": "shell", "arguments": {"command": "ls"}}}\n</tools>',
     ("", "", [("shell", {"command": "ls"})])),
    ('```json\n{"type": "function", "function": {"name": "shell", "arguments": "{\\"command\\": \\"ls\\"}"}}\n```',
     ("", "", [("shell", {"command": "ls"})])),
    # Cline's `ask_question` as the 1.5B wrote it: the call item bare, after text of its own (the text and the
    # call as recorded through scripts/acceptance; the arguments here are shortened)
    ('<user_input mode="act">\nI will say "hi" to the user.\n</user_input>\n{\n  "function": {"name": "Agent", '
     '"arguments": {"prompt": "hi"}}}', ('<user_input mode="act">\nI will say "hi" to the user.\n</user_input>', "",
                                         [("Agent", {"prompt": "hi"})])),
    ('{"type": "function", "function": {"name": "shell", "arguments": {"command": "ls"}}}',
     ("", "", [("shell", {"command": "ls"})])),
    # pi's `bash` call as the 1.5B wrote it: an XML element whose `arguments` attribute is the JSON object, in
    # single quotes that the command's own quotes break (recorded: scripts/acceptance, pi, plain)
    ('<tools>\n  <function name="shell" arguments=\'{"command": "echo \'Hello, world!\'"}\'/>\n</tools>',
     ("", "", [("shell", {"command": "echo 'Hello, world!'"})])),
    ('<function name="shell" arguments=\'{"command": "ls"}\'/>', ("", "", [("shell", {"command": "ls"})])),
    ('<function name="nope" arguments=\'{"command": "ls"}\'/>',
     ('<function name="nope" arguments=\'{"command": "ls"}\'/>', "", [])),
    # Qwen Code's `run_shell_command` as the 1.5B wrote it: Qwen3-Coder's syntax without <tool_call> (recorded:
    # scripts/acceptance, qwen, tool)
    ('<function=shell>\n<parameter=command>\necho localchat-acceptance-42\n</parameter>\n</function>',
     ("", "", [("shell", ECHO)])),
    ('Running it.\n<function=exec_command>\n<parameter=cmd>\nls\n</parameter>\n<parameter=workdir>\n/tmp/w\n'
     '</parameter>\n</function>\nDone.', ("Running it.Done.", "", [("exec_command", {"cmd": "ls", "workdir": "/tmp/w"})])),
    ('<function=nope>\n<parameter=a>\n1\n</parameter>\n</function>',
     ('<function=nope>\n<parameter=a>\n1\n</parameter>\n</function>', "", [])),
    ('Code: function f() { return {a: 1}; }', ('Code: function f() { return {a: 1}; }', "", [])),
    ('A schema: {"type": "object"} and {"function": "f"}', ('A schema: {"type": "object"} and {"function": "f"}', "", [])),

    # not calls: JSON naming no declared tool, or with no object of arguments, stays text
    ('```json\n{"name": "Bob", "age": 3}\n```', ('```json\n{"name": "Bob", "age": 3}\n```', "", [])),
    ('{"name": "shell"}', ('{"name": "shell"}', "", [])),
    ('{"name": "shell", "arguments": "ls"}', ('{"name": "shell", "arguments": "ls"}', "", [])),
    ('```python\nprint({"name": 1})\n```', ('```python\nprint({"name": 1})\n```', "", [])),
]


# Recorded verbatim: the raw output (no grammar) of the shipped models for one `shell` tool and "Use your shell
# tool to run this command: echo localchat-acceptance-42", seeds 1-6, the models' sampling (temperature 0.7).
RECORDED = {
    "qwen2.5-coder-0.5b": [
        '{\n"name": "shell",\n"arguments": {\n"command": "echo localchat-acceptance-42"\n}\n}',
        '```json\n{\n  "name": "shell",\n  "arguments": {\n    "command": "echo localchat-acceptance-42"\n  }\n}\n```',
        '{"name": "shell", "arguments": {"command": "echo localchat-acceptance-42"}',  # (its last brace missing)
        '```json\n{"name": "shell", "arguments": {"command": "echo localchat-acceptance-42"}}\n```',
        '{\n  "name": "shell",\n  "arguments": {\n    "command": "echo localchat-acceptance-42"\n  }\n}'],
    "qwen2.5-coder-1.5b": [  # (the same for all six seeds)
        '```json\n{\n  "name": "shell",\n  "arguments": {\n    "command": "echo localchat-acceptance-42"\n  }\n}\n```'],
}
WRITTEN += [(text, ("", "", [("shell", ECHO)])) for texts in RECORDED.values() for text in texts]


@pytest.mark.fast
@pytest.mark.parametrize("text, expected", WRITTEN, ids=[str(i) for i in range(len(WRITTEN))])
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_calls_as_qwen_models_write_them(text: str, expected: tuple, strict: bool):
    whole = split("chatml", text, strict=strict, tools=REAL_TOOLS)
    assert whole == expected
    for seed in range(12):
        assert split("chatml", text, strict=strict, tools=REAL_TOOLS, chunks=seed) == whole, f"chunking {seed}"


@pytest.mark.fast
@pytest.mark.parametrize("opening", ["```json\n", "<tools>\n", "", "Run it:\n```\n"])
@pytest.mark.parametrize("spacing", ['{{"name": "{}"', '{{\n  "name":"{}"'], ids=["inline", "pretty"])
def test_a_call_begun_in_another_form_is_forced_valid(opening: str, spacing: str):
    """The lazy grammar's other triggers (`{"name": "TOOL"`, any spacing): every sentence their
    grammar allows, after whatever opened it, parses into one call whose arguments validate."""
    tools = [ToolSpec("get_weather", parameters=WEATHER), ToolSpec("add", parameters=ADD)]
    loose = [t for t in FAMILIES["chatml"].codec.loose_triggers(tools, GrammarOptions(lazy=True)) if t[0].startswith("\\{")]
    assert len(loose) == 2
    rng = random.Random(3)
    for tool, (pattern, grammar) in zip(tools, loose):
        begun = spacing.format(tool.name)
        assert re.fullmatch(pattern, begun) and not re.search(pattern, begun.replace(tool.name, tool.name + "x"))
        validate(grammar)
        sentences = Grammar(grammar)
        for i in range(10):
            text = opening + begun + sentences.sample(rng, budget=120)
            content, _, calls = split("chatml", text, strict=True, tools=tools, chunks=i)
            assert len(calls) == 1 and calls[0][0] == tool.name, text
            jsonschema.validate(calls[0][1], {"add": ADD, "get_weather": WEATHER}[calls[0][0]])
            assert content.strip() in ("", "Run it:"), (content, text)


# Cline's tools as it declares them (shortened), and the 1.5B's answer to "Say hi." through Cline (recorded:
# scripts/acceptance, cline, plain): its call written as an XML element named after the tool, its arguments as
# attributes; the answer went on in the same way until the length limit, cut here after the first block.
CLINE_TOOLS = [ToolSpec("run_commands", parameters={"type": "object", "properties": {"commands": {
                   "type": "array", "items": {"type": "string"}}}, "required": ["commands"]}),
               ToolSpec("editor", parameters={"type": "object", "properties": {"path": {"type": "string"},
                        "new_text": {"type": "string"}, "insert_line": {"type": "integer"}}, "required": ["path"]})]
CLINE_WROTE = ('<user_input mode="plan">\n  <p>Asking the user for a simple greeting.</p>\n</user_input>\n\n<tools>\n'
               '  <run_commands commands=\'["echo \\"Hi!\\""]\'/>\n</tools>\n\n')
ELEMENTS = [
    (CLINE_WROTE, ('<user_input mode="plan">\n  <p>Asking the user for a simple greeting.</p>\n</user_input>', "",
                   [("run_commands", {"commands": ['echo "Hi!"']})])),
    # either quote; a JSON value read to its end (its strings may hold the quote); a text value to the quote
    # before a space, `/` or `>`; two calls; a space before `/>`
    ("<tools>\n<editor path=\"/a b.txt\" new_text='It's fine' insert_line='3'/>\n"
     "<run_commands commands='[\"echo 'x'\"]' />\n</tools>",
     ("", "", [("editor", {"path": "/a b.txt", "new_text": "It's fine", "insert_line": 3}),
               ("run_commands", {"commands": ["echo 'x'"]})])),
    ("<tools><run_commands commands='[\"ls\"]'/>", ("", "", [("run_commands", {"commands": ["ls"]})])),
    ("<tools>\n  <run_commands commands='[\"ls\"]'", ("", "", [("run_commands", {"commands": ["ls"]})])),  # (cut off)
    ("<tools>\n  <Run_Commands\n    commands='[]'\n  />\n</tools>", ("", "", [("run_commands", {"commands": []})])),
    # not calls: an element that names no declared tool, or is not written as attributes, stays text
    ("<tools>\n  <nope a='1'/>\n</tools>", ("<tools>\n  <nope a='1'/>\n</tools>", "", [])),
    ("<tools>\n  <editor>a.py</editor>\n</tools>", ("<tools>\n  <editor>a.py</editor>\n</tools>", "", [])),
    ("<tools>\n  <editor path=a.py/>\n</tools>", ("<tools>\n  <editor path=a.py/>\n</tools>", "", [])),
]


@pytest.mark.fast
@pytest.mark.parametrize("text, expected", ELEMENTS, ids=[str(i) for i in range(len(ELEMENTS))])
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_a_call_written_as_an_element_named_after_the_tool_is_read(text: str, expected: tuple, strict: bool):
    assert split("chatml", text, strict=strict, tools=CLINE_TOOLS) == expected
    for seed in range(12):
        assert split("chatml", text, strict=strict, tools=CLINE_TOOLS, chunks=seed) == expected, f"chunking {seed}"


@pytest.mark.fast
def test_a_long_json_attribute_is_scanned_once_as_it_streams(monkeypatch: pytest.MonkeyPatch):
    """An attribute's JSON value arriving a character at a time is scanned once, not again on each
    piece (27k characters took 20 s that way)."""
    from localchat.families.codecs import jsonscan
    seen, char = [0], jsonscan.JsonScanner._char
    monkeypatch.setattr(jsonscan.JsonScanner, "_char", lambda self, c, at: (seen.__setitem__(0, seen[0] + 1), char(self, c, at)))
    commands = [f"echo line {i}" for i in range(300)]
    text = f"<tools>\n  <run_commands commands='{json.dumps(commands)}'/>\n</tools>"
    assert split("chatml", text, tools=CLINE_TOOLS, chunks=1) == ("", "", [("run_commands", {"commands": commands})])
    assert seen[0] <= 2 * len(text), seen[0]


@pytest.mark.fast
@pytest.mark.parametrize("opening, after", [("<tools>\n  <{}", " "), ("<function={}", ">")], ids=["element", "qwen3"])
def test_a_call_begun_as_an_element_named_after_the_tool_is_forced_valid(opening: str, after: str):
    """`<tools>` then `<TOOL` (any spacing, the name in any case), or Qwen3-Coder's `<function=TOOL>`,
    starts a grammar that forces the rest of that call (attributes, `/>` and at most `</tools>`; its
    parameter elements and `</function>`): every sentence it allows parses into one call whose
    arguments validate, after the text before it."""
    tools = [*CLINE_TOOLS, ToolSpec("get_weather", parameters=WEATHER), ToolSpec("Agent", parameters={"type": "object"})]
    loose = [t for t in FAMILIES["chatml"].codec.loose_triggers(tools, GrammarOptions(lazy=True))
             if t[0].startswith(re.escape(opening[:6]))]
    assert len(loose) == len(tools)
    rng = random.Random(5)
    for tool, (pattern, grammar) in zip(tools, loose):
        begun = opening.format(tool.name.upper()) + after.strip()
        assert re.match(pattern, begun + " ") and not re.match(pattern, opening.format(tool.name + "x") + after)
        validate(grammar)
        sentences = Grammar(grammar)
        for i in range(10):
            text = "Plan.\n" + begun + sentences.sample(rng, budget=200)
            content, _, calls = split("chatml", text, strict=True, tools=tools, chunks=i)
            assert len(calls) == 1 and calls[0][0] == tool.name, text
            jsonschema.validate(calls[0][1], tool.parameters)
            assert content == "Plan.", (content, text)


# The 1.5B through Claude Code (tool `Bash`; issue 32's acceptance run): the call fenced, the name in lower case.
CLAUDE_TOOLS = [ToolSpec("Bash", parameters=SHELL), ToolSpec("Read", parameters={"type": "object", "properties": {"file_path": {"type": "string"}}})]
BASH_FENCED = ('```json\n{\n  "name": "bash",\n  "arguments": {\n    "command": "echo localchat-acceptance-42"\n  }\n}'
               '\n```')


@pytest.mark.fast
@pytest.mark.parametrize("strict", [True, False], ids=["strict", "lenient"])
def test_a_fenced_call_in_lower_case_calls_the_declared_tool(strict: bool):
    assert split("chatml", BASH_FENCED, strict=strict, tools=CLAUDE_TOOLS) == ("", "", [("Bash", ECHO)])
    for seed in range(12):
        assert split("chatml", BASH_FENCED, strict=strict, tools=CLAUDE_TOOLS, chunks=seed) == ("", "", [("Bash", ECHO)])


@pytest.mark.fast
def test_the_lazy_grammar_starts_at_a_name_in_another_case():
    """`{"name": "bash"` starts the grammar that forces the rest of a `Bash` call; what it lets the
    model write reads back as a valid `Bash` call."""
    loose = FAMILIES["chatml"].codec.loose_triggers(CLAUDE_TOOLS, GrammarOptions(lazy=True))
    pattern, grammar = loose[0]
    assert re.search(pattern, '```json\n{"name": "bash"') and re.search(pattern, '{"name":"BASH"')
    assert not re.search(pattern, '{"name": "bashful"') and not re.search(pattern, '{"name": "Read"')
    validate(grammar)
    rng, sentences = random.Random(5), Grammar(grammar)
    for i in range(10):
        text = '```json\n{"name": "bash"' + sentences.sample(rng, budget=120)
        content, _, calls = split("chatml", text, strict=True, tools=CLAUDE_TOOLS, chunks=i)
        assert len(calls) == 1 and calls[0][0] == "Bash" and not content.strip(), text
        jsonschema.validate(calls[0][1], SHELL)

"""Syntaxes whose arguments are a JSON object."""

from __future__ import annotations

from .shape import Shape, ShapeCodec, XmlArgs
from .xmlargs import QWEN3_PARAMETERS

# A template with no tool syntax of its own: one JSON object listing the calls.
GENERIC = ShapeCodec(
    "generic-json", Shape(open='{"tool_calls": [', close="]}", separator=", ", name_key="name"),
    trigger='{"tool_calls":', result_open="Tool result: ")

# What Qwen 2.5 (Coder) and other Hermes-style models write instead of <tool_call> (recorded from the
# shipped Qwen2.5-Coder 0.5B / 1.5B): the call object in a json code fence, bare, or in other tags.
_HERMES_WRITTEN = (
    Shape(open="```json\n", close="\n```", separator="\n", name_key="name"),
    Shape(open="```\n", close="\n```", separator="\n", name_key="name"),
    Shape(name_key="name", separator="\n"),
    *(Shape(call_open=f"<{tag}>\n", call_close=f"\n</{tag}>", separator="\n", name_key="name")
      for tag in ("tools", "tool", "function_call", "json")),
    # OpenAI's own call item, bare (Cline's and pi's prompts through the 1.5B): {"function": {"name": …}}
    *(Shape(call_open=opening, call_close="}", separator="\n", name_key="name", marker=opening.rstrip())
      for opening in ('{ "type": "function", "function": ', '{ "function": ')),
    # the call as an XML element, its arguments a JSON attribute (pi's prompt through the 1.5B):
    # <tools>\n  <function name="bash" arguments='{"command": "echo 'hi'"}'/>\n</tools>
    *(Shape(open=open_, close=close, call_open='<function name="', name_end="\" arguments='", call_close="'/>",
            separator="\n", marker=marker) for open_, close, marker in (("<tools>\n", "\n</tools>", '<tools> <function'),
                                                                        ("", "", ""))),
    # the call as an XML element named after the tool, its arguments as attributes (Cline's prompt through the
    # 1.5B): <tools>\n  <run_commands commands='["echo hi"]'/>\n</tools>
    Shape(open="<tools>\n", close="\n</tools>", call_open="<", separator="\n", call_close="/>", marker="<tools> <",
          xml=XmlArgs(" ", "='", "'", "", quoted=True)),
    # Qwen3-Coder's call without its <tool_call> (Qwen Code's prompt through the 1.5B):
    # <function=run_shell_command>\n<parameter=command>\necho hi\n</parameter>\n</function>
    Shape(call_open="<function=", name_end=">\n", call_close="</function>", separator="\n", xml=QWEN3_PARAMETERS),
)

# Hermes 2 Pro / Qwen 2.5 / Qwen 3 / QwQ / SmolLM3 / Granite 4: JSON in <tool_call> tags.
HERMES = ShapeCodec(
    "hermes", Shape(call_open="<tool_call>\n", call_close="\n</tool_call>", separator="\n", name_key="name"),
    alternatives=_HERMES_WRITTEN, object_triggers=True,
    instructions=("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n"
                  "</tools>\n\nFor each function call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n{example}"),
    result_open="<tool_response>\n", result_close="\n</tool_response>")

# Llama 3.1 – 3.3: a bare JSON object; `<|python_tag|>` before it (or before a builtin call) too.
LLAMA3 = ShapeCodec(
    "llama3-json", Shape(name_key="name", args_key="parameters", separator="\n"),
    alternatives=(Shape(call_open="<|python_tag|>", name_key="name", args_key="parameters", separator=";"),),
    trigger='{"name":',
    instructions=("Given the following functions, please respond with a JSON for a function call with its proper "
                  "arguments that best answers the given prompt.\n\nRespond in the format {example}. "
                  "Do not use variables.\n\n{tools}"),
    visible_tokens=("<|python_tag|>",))

# Mistral 7B v0.3 / Mixtral / Nemo (tokenizer v3): one JSON list after [TOOL_CALLS].
MISTRAL = ShapeCodec(
    "mistral-list", Shape(open="[TOOL_CALLS][", close="]", separator=", ", name_key="name"),
    trigger="[TOOL_CALLS]", instructions="[AVAILABLE_TOOLS][{tools}][/AVAILABLE_TOOLS]",
    result_open="[TOOL_RESULTS]", result_close="[/TOOL_RESULTS]", visible_tokens=("[TOOL_CALLS]",),
    tools_separator=", ")

_MISTRAL3_TOKENS = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]")
# Mistral Small 3.1+, Devstral, Ministral 3, Magistral (tokenizer v11+): [TOOL_CALLS]NAME[ARGS]{…} per call.
MISTRAL3 = ShapeCodec(
    "mistral-args", Shape(call_open="[TOOL_CALLS]", name_end="[ARGS]", name_ends=("[CALL_ID]{id}[ARGS]",)),
    instructions="[AVAILABLE_TOOLS][{tools}][/AVAILABLE_TOOLS]", result_open="[TOOL_RESULTS]",
    result_close="[/TOOL_RESULTS]", visible_tokens=_MISTRAL3_TOKENS, tools_separator=", ")
# Mistral Small 3.2: a call id too: [TOOL_CALLS]NAME[CALL_ID]abcdefghi[ARGS]{…}
MISTRAL32 = ShapeCodec(
    "mistral-call-id", Shape(call_open="[TOOL_CALLS]", name_end="[CALL_ID]{id}[ARGS]", name_ends=("[ARGS]",)),
    instructions=MISTRAL3.instructions, result_open="[TOOL_RESULTS]", result_close="[/TOOL_RESULTS]",
    visible_tokens=_MISTRAL3_TOKENS, tools_separator=", ")

# Granite 3.x: <|tool_call|> then a JSON list.
GRANITE3 = ShapeCodec(
    "granite-list", Shape(open="<|tool_call|>[", close="]", separator=", ", name_key="name"),
    trigger="<|tool_call|>", visible_tokens=("<|tool_call|>",),
    instructions=("You are a helpful assistant with access to the following tools. When a tool is required to "
                  "answer the user's query, respond only with <|tool_call|> followed by a JSON list of tools used:"
                  " {example}\n{tools}"))

# Command R7B: a JSON list of {"tool_call_id", "tool_name", "parameters"} in <|START_ACTION|>.
COMMAND_R = ShapeCodec(
    "command-r-action", Shape(open="<|START_ACTION|>[\n    ", close="\n]<|END_ACTION|>", separator=",\n    ",
                              name_key="tool_name", args_key="parameters", id_key="tool_call_id"),
    trigger="<|START_ACTION|>", visible_tokens=("<|START_ACTION|>", "<|END_ACTION|>"),
    instructions=("## Available Tools\nWrite <|START_ACTION|> followed by a list of JSON-formatted tool calls, "
                  "then <|END_ACTION|>: {example}\n{tools}"),
    result_open="<|START_TOOL_RESULT|>", result_close="<|END_TOOL_RESULT|>")

_DS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
       "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
       "<｜tool▁output▁end｜>")
# DeepSeek R1 (and distills): the arguments in a json code fence.
DEEPSEEK_R1 = ShapeCodec(
    "deepseek-r1", Shape(open=_DS[0], close=_DS[1], call_open=_DS[2] + "function" + _DS[4], name_end="\n```json\n",
                         args_close="\n```", call_close=_DS[3], separator="\n"),
    visible_tokens=_DS, result_open=_DS[7], result_close=_DS[8])
# DeepSeek V3.1: NAME<｜tool▁sep｜>{…}
DEEPSEEK_V31 = ShapeCodec(
    "deepseek-v3.1", Shape(open=_DS[0], close=_DS[1], call_open=_DS[2], name_end=_DS[4], call_close=_DS[3]),
    visible_tokens=_DS, result_open=_DS[7], result_close=_DS[8])

# Kimi K2: functions.NAME:IDX in a section of calls.
KIMI_K2 = ShapeCodec(
    "kimi-k2", Shape(open="<|tool_calls_section_begin|>", close="<|tool_calls_section_end|>",
                     call_open="<|tool_call_begin|>functions.", name_end=":{index}<|tool_call_argument_begin|>",
                     call_close="<|tool_call_end|>"),
    visible_tokens=("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                    "<|tool_call_argument_begin|>", "<|tool_call_end|>"),
    result_open="## Return of the call\n")

# Gemma 3 (no tool syntax of its own): JSON in a fence we ask for; models also write a json fence or bare JSON.
GEMMA3 = ShapeCodec(
    "gemma-json", Shape(open="```tool_call\n", close="\n```", separator="\n", name_key="name"),
    alternatives=(Shape(open="```json\n", close="\n```", separator="\n", name_key="name"),
                  Shape(name_key="name", separator="\n")),
    result_open="Tool result: ")

# Nemotron Nano 2: <TOOLCALL>[…]</TOOLCALL>; Apriel: <tool_calls>[…]</tool_calls>.
NEMOTRON = ShapeCodec("toolcall-list", Shape(open="<TOOLCALL>[", close="]</TOOLCALL>", separator=", ", name_key="name"),
                      trigger="<TOOLCALL>", visible_tokens=("<TOOLCALL>", "</TOOLCALL>"),
                      result_open="<TOOL_RESPONSE>[", result_close="]</TOOL_RESPONSE>")
APRIEL = ShapeCodec("tool-calls-list", Shape(open="<tool_calls>[", close="]</tool_calls>", separator=", ",
                                             name_key="name"), trigger="<tool_calls>")
# Firefunction v2: " functools[…]"; Functionary v3.1: <function=NAME>{…}</function>.
FIREFUNCTION = ShapeCodec(
    "functools", Shape(open="functools[", close="]", separator=", ", name_key="name"), trigger="functools",
    instructions=("In addition to plain text responses, you can choose to call one or more of the provided functions."
                  "\nIf you decide to call functions, prefix function calls with functools marker and generate all "
                  "of them in a single JSON list: {example}\n\n{tools}"))
FUNCTIONARY = ShapeCodec("functionary", Shape(call_open="<function=", name_end=">", call_close="</function>"),
                         trigger="<function=")

# famA
# MiniMax M1: <tool_calls> then one {"name": N, "arguments": A} a line.
MINIMAX_M1 = ShapeCodec(
    "minimax-m1-lines", Shape(open="<tool_calls>\n", close="</tool_calls>", call_close="\n", name_key="name"),
    result_open="tool result: ", result_close="\n\n")
# Apertus: a JSON list of {"NAME": {…}} between <|tools_prefix|> and <|tools_suffix|>; results a list after it.
APERTUS = ShapeCodec(
    "apertus-list", Shape(open="<|tools_prefix|>[", close="]<|tools_suffix|>", call_open='{"', name_end='": ',
                          call_close="}", separator=", "),
    trigger="<|tools_prefix|>", visible_tokens=("<|tools_prefix|>", "<|tools_suffix|>"), result_open="[",
    result_close="]")
# Solar Open: <|tool_calls|>, each <|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{…}<|tool_call:end|>,
# then <|calls|> (which ends the turn).
SOLAR_OPEN = ShapeCodec(
    "solar-open", Shape(open="<|tool_calls|>", close="<|calls|>", call_open="<|tool_call:begin|>{id}<|tool_call:name|>",
                        name_end="<|tool_call:args|>", call_close="<|tool_call:end|>"),
    visible_tokens=("<|tool_calls|>", "<|tool_call:begin|>", "<|tool_call:name|>", "<|tool_call:args|>",
                    "<|tool_call:end|>", "<|calls|>", "<|think|>", "<|end|>", "<|begin|>"),
    result_open="<|tool_response:result|>", result_close="<|tool_response:end|>")

# famC
# GigaChat 3: a call is a turn of its own, `function call<|role_sep|>\n{"name": N, "arguments": A}` (one a turn);
# results are `function result` turns.
GIGACHAT3 = ShapeCodec(
    "gigachat3", Shape(call_open="function call<|role_sep|>\n", name_key="name", separator="\n",
                       marker="function call<|role_sep|>"),
    visible_tokens=("<|role_sep|>",))
# GigaChat 3.1: the call follows the assistant's text in its turn, after <|function_call|> (one a turn).
GIGACHAT31 = ShapeCodec(
    "gigachat3.1", Shape(call_open="<|function_call|>", name_key="name", separator="\n"),
    visible_tokens=("<|function_call|>",))

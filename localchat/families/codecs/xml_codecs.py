"""Syntaxes whose arguments are XML-style elements, values typed by the schema."""

from __future__ import annotations

from .shape import Shape, ShapeCodec
from .xmlargs import QWEN3_PARAMETERS, XmlArgs

# Qwen3-Coder, Qwen 3.5, Nemotron 3 Nano, StepFun 3.5.
QWEN_XML = ShapeCodec(
    "qwen3-coder-xml",
    Shape(call_open="<tool_call>\n<function=", name_end=">\n", call_close="</function>\n</tool_call>", separator="\n",
          xml=QWEN3_PARAMETERS),
    trigger="<tool_call>",
    instructions=("# Tools\n\nYou have access to the following functions:\n\n<tools>\n{tools}\n</tools>\n\n"
                  "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
                  "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                  "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the "
                  "specified format\n- Required parameters MUST be specified\n</IMPORTANT>"),
    result_open="<tool_response>\n", result_close="\n</tool_response>", describe_as="function")

_GLM_INSTRUCTIONS = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                     "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n"
                     "</tools>\n\nFor each function call, output the function name and arguments within the following "
                     "XML format:\n{example}")
# GLM 4.5 / 4.6 (and Laguna, Spark): NAME then <arg_key>/<arg_value> pairs, one a line.
GLM = ShapeCodec(
    "glm-xml",
    Shape(call_open="<tool_call>", name_end="\n", call_close="</tool_call>", separator="\n",
          xml=XmlArgs("<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>", "\n")),
    instructions=_GLM_INSTRUCTIONS, result_open="<tool_response>\n", result_close="\n</tool_response>",
    describe_as="function")
# GLM 4.7: the same on one line.
GLM47 = ShapeCodec(
    "glm-4.7-xml",
    Shape(call_open="<tool_call>", call_close="</tool_call>",
          xml=XmlArgs("<arg_key>", "</arg_key><arg_value>", "</arg_value>", "")),
    instructions=_GLM_INSTRUCTIONS, result_open="<tool_response>\n", result_close="\n</tool_response>",
    describe_as="function")

# MiniMax M2: <invoke name="NAME"><parameter name="KEY">VALUE</parameter></invoke> in <minimax:tool_call>.
MINIMAX = ShapeCodec(
    "minimax-xml",
    Shape(open="<minimax:tool_call>\n", close="</minimax:tool_call>", call_open='<invoke name="', name_end='">\n',
          call_close="</invoke>\n", xml=XmlArgs('<parameter name="', '">', "</parameter>", "\n")),
    trigger="<minimax:tool_call>", result_open="<response>", result_close="</response>")

# ByteDance Seed-OSS: Qwen3-Coder's elements, values inline, in <seed:tool_call>.
SEED = ShapeCodec(
    "seed-xml",
    Shape(call_open="<seed:tool_call>\n<function=", name_end=">\n", call_close="</function>\n</seed:tool_call>",
          separator="\n", xml=XmlArgs("<parameter=", ">", "</parameter>", "\n")),
    trigger="<seed:tool_call>", visible_tokens=("<seed:tool_call>", "</seed:tool_call>", "<seed:think>",
                                                "</seed:think>"))

# famB
# MiniCPM 5: <function name="NAME"><param name="KEY">VALUE</param></function>, one a line; a value
# holding <, & or a newline in <![CDATA[…]]>.
MINICPM5 = ShapeCodec(
    "minicpm5-xml",
    Shape(call_open='<function name="', name_end='">', call_close="</function>", separator="\n",
          xml=XmlArgs('<param name="', '">', "</param>", "", cdata=True), marker='<function name="'),
    trigger='<function name="', result_open="<tool_response>\n", result_close="\n</tool_response>",
    instructions=("# Tools\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                  "{tools}\n</tools>\n\nTo call a function, write: {example}\nIf a value contains <, & or newline "
                  "characters, wrap it in a CDATA block: <![CDATA[...]]>"), describe_as="function")

_HY = ":opensource"
# Tencent Hy3: GLM's <arg_key>/<arg_value> lines, every tag suffixed `:opensource`, in a block.
HY3 = ShapeCodec(
    "hy3-xml",
    Shape(open=f"<tool_calls{_HY}>\n", close=f"</tool_calls{_HY}>", call_open=f"<tool_call{_HY}>",
          name_end=f"<tool_sep{_HY}>\n", call_close=f"</tool_call{_HY}>\n",
          xml=XmlArgs(f"<arg_key{_HY}>", f"</arg_key{_HY}>\n<arg_value{_HY}>", f"</arg_value{_HY}>", "\n")),
    trigger=f"<tool_calls{_HY}>", result_open=f"<tool_response{_HY}>", result_close=f"</tool_response{_HY}>",
    visible_tokens=tuple(f"<{t}{_HY}>" for t in ("tool_calls", "/tool_calls", "tool_call", "/tool_call", "tool_sep",
                                                 "arg_key", "/arg_key", "arg_value", "/arg_value")),
    describe_as="function")

# famC
_MM = "]<]minimax[>["
# MiniMax M3: every tag after the `]<]minimax[>[` token: NS<invoke name="NAME">, each argument NS<KEY>VALUE NS</KEY>,
# NS</invoke>, one a line, in NS<tool_call> … NS</tool_call>. (The template expands an object or a list
# value into nested elements; those are read as the text they are.)
MINIMAX_M3 = ShapeCodec(
    "minimax-m3-xml",
    Shape(open=f"{_MM}<tool_call>\n", close=f"{_MM}</tool_call>", call_open=f'{_MM}<invoke name="', name_end='">',
          call_close=f"{_MM}</invoke>\n", xml=XmlArgs(f"{_MM}<", ">", f"{_MM}</{{key}}>", "")),
    trigger=f"{_MM}<tool_call>", result_open="<response>", result_close="</response>", visible_tokens=(_MM,))

"""DeepSeek V3.2 and V4's DSML: XML-style calls whose tags carry `｜DSML｜`, each parameter saying
whether its value is raw text (`string="true"`) or JSON (`string="false"`):

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="NAME">
    <｜DSML｜parameter name="KEY" string="true">VALUE</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

V4 names the block `tool_calls` instead of `function_calls`."""

from __future__ import annotations

from .shape import Shape, ShapeCodec
from .xmlargs import XmlArgs

DSML = "｜DSML｜"
_ARGS = XmlArgs(f'<{DSML}parameter name="', '" string="true">', f"</{DSML}parameter>", "\n",
                typed_key_close='" string="false">')
_INSTRUCTIONS = ("## Tools\n\nYou have access to a set of tools you can use to answer the user's question.\n"
                 "You can invoke functions by writing a \"<{DSML}{block}>\" block like the following as part of "
                 "your reply to the user:\n{{example}}\n\nString parameters should be specified as is and set "
                 "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in "
                 "JSON format and set `string=\"false\"`.\n\nHere are the functions available in JSONSchema "
                 "format:\n<functions>\n{{tools}}\n</functions>")


def _codec(name: str, block: str, result: str) -> ShapeCodec:
    return ShapeCodec(
        name,
        Shape(open=f"<{DSML}{block}>\n", close=f"</{DSML}{block}>", call_open=f'<{DSML}invoke name="',
              name_end='">\n', call_close=f"</{DSML}invoke>\n", xml=_ARGS),
        trigger=f"<{DSML}{block}>", instructions=_INSTRUCTIONS.format(DSML=DSML, block=block),
        result_open=f"<{result}>", result_close=f"</{result}>", describe_as="function")


DEEPSEEK_V32 = _codec("deepseek-v3.2-dsml", "function_calls", "result")
DEEPSEEK_V4 = _codec("deepseek-v4-dsml", "tool_calls", "tool_result")

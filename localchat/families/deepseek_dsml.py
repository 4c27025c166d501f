"""DeepSeek V3.2 and V4 (V4-Flash): DeepSeek's `<｜User｜>` / `<｜Assistant｜>` turns, reasoning in
`<think>` when the template's `thinking` is on, tool calls in DSML (codecs/dsml.py): V3.2 in a
`<｜DSML｜function_calls>` block, V4 in `<｜DSML｜tool_calls>`."""

from dataclasses import replace

from .codecs.dsml import DEEPSEEK_V4, DEEPSEEK_V32
from .deepseek import FAMILY as R1
from .deepseek import TEMPLATE

V32 = replace(
    R1, name="deepseek-v3.2", codec=DEEPSEEK_V32, thinking_switch="thinking",
    template="{#- calls: <｜DSML｜function_calls> -#}" + TEMPLATE.replace("<think>{{ '\\n' }}", "<think></think>"),
    template_markers=(("｜DSML｜", "function_calls>"),),
    models="DeepSeek V3.2 / V3.2-Exp / V3.2-Speciale")

V4 = replace(
    V32, name="deepseek-v4", codec=DEEPSEEK_V4,
    template="{#- calls: <｜DSML｜tool_calls> -#}" + TEMPLATE.replace("<think>{{ '\\n' }}", "</think>"),
    template_markers=(("｜DSML｜", "tool_calls>"),),
    models="DeepSeek V4, V4-Flash")

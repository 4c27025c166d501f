"""ChatML: Qwen 2.5 / 3, Hermes, SmolLM and many fine-tunes. `<|im_start|>role` … `<|im_end|>`."""

from .base import Family, ToolSyntax

# Hermes / Qwen 2.5 wording and syntax.
TOOLS = ToolSyntax(
    call_open="<tool_call>\n", call_close="\n</tool_call>", separator="\n", trigger="<tool_call>",
    instructions=("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                  "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n"
                  "</tools>\n\nFor each function call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n{example}"),
    result_open="<tool_response>\n", result_close="\n</tool_response>",
)

TEMPLATE = (
    "{%- for m in messages -%}"
    "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}"
)

FAMILY = Family(
    name="chatml",
    template=TEMPLATE,
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    control_tokens=("<|endoftext|>", "<|im_start|>", "<|im_end|>"),
    template_markers=("<|im_start|>",),
    architectures=("qwen2", "qwen2moe", "qwen3", "qwen3moe"),
    eos_token="<|im_end|>",
    tools=TOOLS,
    reasoning=("<think>", "</think>"),  # Qwen 3, QwQ, DeepSeek-R1 distills on Qwen
)

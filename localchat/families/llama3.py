"""Llama 3 / 3.1 / 3.2 / 3.3: header tokens around each role, `<|eot_id|>` ends a turn."""

from .base import Family, ToolSyntax

# Llama 3.1's JSON-based tool calling.
TOOLS = ToolSyntax(
    args_key="parameters", separator="\n", trigger='{"name":',
    instructions=("Given the following functions, please respond with a JSON for a function call with its proper "
                  "arguments that best answers the given prompt.\n\nRespond in the format {example}. "
                  "Do not use variables.\n\n{tools}"),
)

TEMPLATE = (
    "{{ bos_token }}"
    "{%- for m in messages -%}"
    "<|start_header_id|>{{ 'ipython' if m.role == 'tool' else m.role }}<|end_header_id|>\n\n"
    "{{ m.content | trim }}<|eot_id|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif -%}"
)

FAMILY = Family(
    name="llama3",
    template=TEMPLATE,
    stop_tokens=("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"),
    control_tokens=(
        "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
    ),
    template_markers=("<|start_header_id|>",),
    bos_token="<|begin_of_text|>",
    eos_token="<|end_of_text|>",
    tools=TOOLS,
)

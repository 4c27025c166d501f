"""Solar Open (Upstage): `<|begin|>ROLE<|content|>` … `<|end|>` turns. The assistant answers
after `<|begin|>assistant`: its reasoning in `<|think|>` … `<|end|>`, then `<|begin|>assistant`
again and `<|content|>` (the answer, ended by `<|flush|>`) or its tool calls (ended by
`<|calls|>`); `reasoning_effort` "low" or "minimal" skips the reasoning. Tool calls:
`<|tool_calls|>`, each `<|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{…}
<|tool_call:end|>`. `<|content|>` is a control token the output text never shows."""

from .base import Family
from .codecs.json_codecs import SOLAR_OPEN

TEMPLATE = (
    "{#- calls: <|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{…}<|tool_call:end|>"
    "<|calls|> -#}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'tool' %}<|begin|>tool<|tool_response|>{{ m.content }}<|end|>"
    "{%- else %}<|begin|>{{ m.role }}<|content|>{{ m.content }}<|end|>{% endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{%- if reasoning_effort is defined and reasoning_effort in ['low', 'minimal'] %}<|begin|>assistant<|think|><|end|>"
    "{%- endif %}<|begin|>assistant{% endif -%}"
)

FAMILY = Family(
    name="solar-open",
    template=TEMPLATE,
    stop_tokens=("<|flush|>", "<|calls|>"),
    control_tokens=("<|begin|>", "<|end|>", "<|content|>", "<|think|>", "<|flush|>", "<|calls|>", "<|tool_calls|>",
                    "<|tool_call:begin|>", "<|tool_call:name|>", "<|tool_call:args|>", "<|tool_call:end|>",
                    "<|tool_response|>", "<|tool_response:begin|>", "<|tool_response:name|>",
                    "<|tool_response:result|>", "<|tool_response:end|>"),
    template_markers=("<|tool_call:begin|>", ("<|begin|>", "<|content|>", "<|calls|>")),
    eos_token="<|flush|>",
    codec=SOLAR_OPEN,
    reasoning=("<|think|>", "<|end|><|begin|>assistant"),
    effort_switch="reasoning_effort",
    models="Solar Open 100B",
)

"""The two tools the protocol tests declare, each in its protocol's shape: a weather lookup
(bounded string, enum, integer range) and an adder; both closed objects, as agents' tools are
(a random model under an open one writes other keys without end: JSON Schema allows them)."""

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city", "days"], "additionalProperties": False}
ADD = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number"}},
       "required": ["a", "b"], "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "add": ADD}

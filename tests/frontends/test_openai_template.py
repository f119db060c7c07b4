"""Chat templates (``frontends/openai/template.py``): the default, a Hugging Face style
template, the sandbox, and the errors a template can give."""

from __future__ import annotations

import pytest

from tritonlite.frontends.openai.errors import OpenAIError
from tritonlite.frontends.openai.template import DEFAULT_TEMPLATE, compile_template, render

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": "Bye"},
]

# shaped like the chat templates tokenizers ship: whitespace control, loop state, bos_token
CHATML = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% if loop.last and add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    "{% endfor %}"
)


def test_the_default_template() -> None:
    assert render(compile_template(""), MESSAGES) == (
        "system: Be brief.\nuser: Hi\nassistant: Hello\nuser: Bye\nassistant:"
    )
    assert compile_template("").render(messages=[], add_generation_prompt=False) == ""
    assert "add_generation_prompt" in DEFAULT_TEMPLATE


def test_a_chatml_template() -> None:
    out = render(compile_template(CHATML), MESSAGES[:2])
    assert out == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_trim_blocks_and_loop_controls() -> None:
    source = """{% for m in messages %}
{% if m['role'] == 'assistant' %}{% break %}{% endif %}
[{{ m['content'] }}]
{% endfor %}"""
    assert render(compile_template(source), MESSAGES) == "[Be brief.]\n[Hi]\n"


def test_a_template_that_does_not_compile() -> None:
    with pytest.raises(ValueError, match="line 1"):
        compile_template("{% for %}")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "{{ raise_exception('roles must alternate') }}",
            "refused the messages: roles must alternate",
        ),
        ("{{ messages.__class__.__mro__ }}", "failed on the messages"),  # the sandbox
        ("{{ messages[0]['content'].format(1) }}{{ 1 / 0 }}", "failed on the messages"),
        ("{% for m in messages %}{{ m.role | nosuchfilter }}{% endfor %}", "does not compile"),
    ],
)
def test_template_errors_are_400(source: str, message: str) -> None:
    try:
        template = compile_template(source)
    except ValueError as exc:
        assert "No filter named" in str(exc) and message == "does not compile"
        return
    with pytest.raises(OpenAIError) as info:
        render(template, MESSAGES)
    assert info.value.status == 400 and message in info.value.message
    assert info.value.param == "messages"

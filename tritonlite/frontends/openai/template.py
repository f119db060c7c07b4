"""Chat messages -> the model's ``text_input``, with a Jinja2 chat template.

A model's config may carry ``parameters { key: "chat_template" value { string_value: "..." } }``:
a template in the language Hugging Face tokenizers use, rendered as they render it (a sandboxed
environment, ``trim_blocks`` and ``lstrip_blocks``, loop controls) with ``messages`` (each
``{"role", "content"}``, content as text), ``add_generation_prompt`` (true), ``bos_token`` and
``eos_token`` (empty) and ``raise_exception(message)``, which answers 400 with that message.
Without one, ``DEFAULT_TEMPLATE``: one ``role: content`` line per message, then ``assistant:``.
"""

from __future__ import annotations

from typing import Any, NoReturn

import jinja2
import jinja2.ext
import jinja2.sandbox

from tritonlite.frontends.openai.errors import bad

DEFAULT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

_ENV = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
)


class _Refused(Exception):
    pass


def _raise_exception(message: str) -> NoReturn:
    raise _Refused(message)


Template = jinja2.Template


def compile_template(source: str) -> Template:
    """The compiled template (``DEFAULT_TEMPLATE`` for ""); ValueError when it does not compile."""
    try:
        return _ENV.from_string(source or DEFAULT_TEMPLATE)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"{exc.message} (line {exc.lineno})") from None


def render(template: Template, messages: list[dict[str, str]]) -> str:
    """The prompt for ``messages``; 400 when the template refuses them or fails on them."""
    context: dict[str, Any] = {
        "messages": messages,
        "add_generation_prompt": True,
        "bos_token": "",
        "eos_token": "",
        "raise_exception": _raise_exception,
    }
    try:
        return template.render(**context)
    except _Refused as exc:
        raise bad(f"the model's chat template refused the messages: {exc}", "messages") from None
    except Exception as exc:  # the template is the model's code: any failure is about its input
        raise bad(f"the model's chat template failed on the messages: {exc}", "messages") from None

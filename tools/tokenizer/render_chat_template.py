#!/usr/bin/env python3
"""Renders chat templates with Python's jinja2 in the environment transformers' apply_chat_template
builds (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception,
strftime_now and transformers' tojson). The oracle of the C++ chat-template interpreter.

Input (argv[1]): a JSON list of cases {template, bos_token, eos_token, messages, tools?,
add_generation_prompt}. Output (stdout): a JSON list of {"ok": text} or {"error": message}.
MLASERVE_CHAT_TEMPLATE_NOW (seconds since the epoch) fixes strftime_now, in UTC.
"""
import json
import os
import sys
from datetime import datetime, timezone

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    pass


class AssistantTracker(Extension):
    # transformers' {% generation %} block: renders its body unchanged.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    fixed = os.environ.get("MLASERVE_CHAT_TEMPLATE_NOW")
    if fixed is not None:
        return datetime.fromtimestamp(int(fixed), timezone.utc).strftime(format)
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    results = []
    for case in cases:
        try:
            template = env.from_string(case["template"])
            kwargs = dict(case.get("extra") or {})
            kwargs.update(messages=case["messages"], add_generation_prompt=case["add_generation_prompt"],
                          bos_token=case.get("bos_token", ""), eos_token=case.get("eos_token", ""))
            if case.get("tools") is not None:
                kwargs["tools"] = case["tools"]
            results.append({"ok": template.render(**kwargs)})
        except Exception as e:  # noqa: BLE001 - every failure is a result
            results.append({"error": str(e)})
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""test_openai_client.py: the official `openai` Python client (PyPI) against
a real `mzcache serve` (issue 20).

A real daemon (the `mzcache` binary from $MZ_BIN, default build/mzcache) on a
free loopback port with the real model (models/SmolLM2-135M-Instruct.Q4_1.gguf):

  - chat, and the same request streamed with stream_options include_usage:
    the same greedy text, a usage-only last chunk (choices []) whose counts
    match the non-streamed usage;
  - completions (text, finish_reason, usage);
  - logprobs: chat (logprobs + top_logprobs 5) and completions (logprobs 3):
    values <= 0, alternatives sorted, the greedy token is the most likely
    one, the token bytes put together give the answer;
  - stop strings (never in the answer, finish_reason "stop", streamed too);
  - seed: the same seed and parameters give the same sampled answer;
  - structured output: json_object and json_schema (nested objects, arrays,
    enums, integers, booleans, a nullable string) for greedy and sampled
    settings; every answer must json.loads and validate (with jsonschema,
    installed by scripts/install-deps.sh, and with a validator of our own),
    whether it ended by itself ("stop") or was closed in time to fit
    max_tokens ("length"; a budget of 10 tokens forces that);
  - refused fields: tools, n = 2, echo, an unsupported schema keyword, an
    image part: HTTP 400 naming the field (openai.BadRequestError).

Exit 0 pass, 1 fail, 77 skip (no `openai` or `jsonschema` package, no model or no binary).
No wall-clock assertion.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serveutil import MODEL, ROOT, Checks, stop_process, test_tmp  # noqa: E402

NAME = "test_openai_client"
T = Checks(NAME)
check = T.check


skip = T.skip


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def valid(v, s):
    """JSON Schema validation for the subset the server supports, written
    from the JSON Schema rules (independent of the server's grammar)."""
    if s is True or s == {}:
        return True
    t = s.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]

        def is_type(x, name):
            if name == "string":
                return isinstance(x, str)
            if name == "integer":
                return isinstance(x, int) and not isinstance(x, bool) or (isinstance(x, float) and x.is_integer())
            if name == "number":
                return isinstance(x, (int, float)) and not isinstance(x, bool)
            if name == "boolean":
                return isinstance(x, bool)
            if name == "null":
                return x is None
            if name == "object":
                return isinstance(x, dict)
            if name == "array":
                return isinstance(x, list)
            return False
        if not any(is_type(v, n) for n in types):
            return False
    if "enum" in s and v not in s["enum"]:
        return False
    if "const" in s and v != s["const"]:
        return False
    if "anyOf" in s and not any(valid(v, a) for a in s["anyOf"]):
        return False
    if isinstance(v, dict):
        props = s.get("properties", {})
        for k, x in v.items():
            if k in props:
                if not valid(x, props[k]):
                    return False
            elif s.get("additionalProperties") is False:
                return False
        if any(r not in v for r in s.get("required", [])):
            return False
    if isinstance(v, list):
        if "items" in s and not all(valid(x, s["items"]) for x in v):
            return False
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", 1 << 30):
            return False
    return True


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "role": {"enum": ["student", "teacher", "engineer", "artist"]},
        "active": {"type": "boolean"},
        "nickname": {"type": ["string", "null"]},
        "skills": {"type": "array", "items": {"enum": ["python", "c", "music", "math"]}, "maxItems": 3},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
            "required": ["city", "zip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "active", "nickname", "skills", "address"],
    "additionalProperties": False,
}


def main():
    # ctest's timeout sends SIGTERM: leave through the finally below, so the
    # server started here is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    # The server's parsing is fuzzed and unit-tested under the sanitizers; a
    # sanitized daemon answers this test's generations too slowly for CI.
    if os.environ.get("MZ_SANITIZED"):
        skip("sanitizer build: the client test runs against the release build only")
    try:
        import openai
    except ImportError as e:
        skip(f"the `openai` package is not installed ({e}); scripts/install-deps.sh installs it")
    try:
        import jsonschema
    except ImportError as e:
        skip(f"the `jsonschema` package is not installed ({e}); scripts/install-deps.sh installs it")
    binary = T.binary_and_model()

    tmp = test_tmp("mz_openai_")
    port = free_port()
    log_path = os.path.join(tmp, "serve.log")
    log = open(log_path, "w")
    proc = subprocess.Popen([binary, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", str(port),
                             "--swap-dir", tmp, "--no-pressure", "-t", "2", "-c", "4096", "--temp", "0"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        deadline = time.monotonic() + 180
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    ready = r.status == 200
            except OSError:
                pass
            if ready:
                break
            time.sleep(0.1)
        if not check(ready, "the server starts"):
            return
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
                               timeout=600)
        run_tests(openai, client, jsonschema)
    finally:
        stop_process(proc)
        log.close()
        if T.failures:
            with open(log_path, errors="replace") as f:
                print("---- serve log (tail) ----\n" + f.read()[-3000:])


def run_tests(openai, client, jsonschema):
    msgs = [{"role": "user", "content": "Name three colours."}]

    # ---- chat, then the same request streamed with usage ----
    r = client.chat.completions.create(model="default", messages=msgs, max_tokens=16, temperature=0)
    text = r.choices[0].message.content
    check(isinstance(text, str) and text != "", f"chat answers text: {text!r}")
    check(r.choices[0].finish_reason in ("stop", "length"), f"chat finish_reason {r.choices[0].finish_reason}")
    check(r.usage.completion_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
          f"chat usage {r.usage}")
    chunks = list(client.chat.completions.create(model="default", messages=msgs, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    check(streamed == text, f"streamed text equals the non-streamed one: {streamed!r} vs {text!r}")
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    check(len(finals) == 1 and finals[0].choices[0].finish_reason == r.choices[0].finish_reason,
          "one chunk carries the finish_reason")
    last = chunks[-1]
    check(last.choices == [] and last.usage is not None, "include_usage: a last chunk with no choices and the usage")
    if last.usage:
        check(last.usage.completion_tokens == r.usage.completion_tokens and
              last.usage.prompt_tokens == r.usage.prompt_tokens, f"streamed usage {last.usage} vs {r.usage}")

    # ---- completions ----
    c = client.completions.create(model="default", prompt="The capital of France is", max_tokens=8, temperature=0)
    check(isinstance(c.choices[0].text, str) and c.choices[0].text != "", f"completion text {c.choices[0].text!r}")
    check(c.usage.completion_tokens > 0, "completion usage")

    # ---- logprobs ----
    r = client.chat.completions.create(model="default", messages=msgs, max_tokens=12, temperature=0,
                                       logprobs=True, top_logprobs=5)
    lp = r.choices[0].logprobs
    if check(lp is not None and lp.content, "chat logprobs present"):
        joined = b"".join(bytes(t.bytes) for t in lp.content)
        check(joined.decode("utf-8", "replace") == r.choices[0].message.content,
              "the tokens' bytes make the answer")
        for t in lp.content:
            alts = t.top_logprobs
            check(t.logprob <= 0 and len(alts) == 5, f"logprob {t.logprob} <= 0 with 5 alternatives")
            check(all(alts[i].logprob >= alts[i + 1].logprob for i in range(4)), "alternatives sorted")
            check(sum(2.718281828459045 ** a.logprob for a in alts) <= 1.0001, "alternatives' probabilities sum <= 1")
            # greedy, no penalty: the chosen token is the model's most likely one
            check(abs(t.logprob - alts[0].logprob) < 1e-6 and t.bytes == alts[0].bytes,
                  f"greedy picks the most likely token ({t.token!r} vs {alts[0].token!r})")
    r2 = client.chat.completions.create(model="default", messages=msgs, max_tokens=12, temperature=0)
    check(r2.choices[0].logprobs is None, "no logprobs unless asked")
    c = client.completions.create(model="default", prompt="The capital of France is", max_tokens=6, temperature=0,
                                  logprobs=3)
    clp = c.choices[0].logprobs
    if check(clp is not None and clp.tokens, "completions logprobs present"):
        check(len(clp.tokens) == len(clp.token_logprobs) == len(clp.top_logprobs) == len(clp.text_offset),
              "completions logprobs lists line up")
        check("".join(clp.tokens) == c.choices[0].text, "completions tokens make the text")
        check(all(x <= 0 for x in clp.token_logprobs), "completions logprobs <= 0")
        check(all(1 <= len(d) <= 3 for d in clp.top_logprobs), "completions top_logprobs: up to 3 each")

    # ---- stop strings, seed ----
    count = [{"role": "user", "content": "Count from 1 to 10, one number per line."}]
    r = client.chat.completions.create(model="default", messages=count, max_tokens=60, temperature=0, stop=["4", "x"])
    t = r.choices[0].message.content
    check("4" not in t and r.choices[0].finish_reason == "stop", f"stop: {t!r} ({r.choices[0].finish_reason})")
    s = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model="default", messages=count, max_tokens=60, temperature=0, stop=["4", "x"], stream=True) if ch.choices)
    check(s == t, f"stop when streaming: {s!r} vs {t!r}")
    kw = dict(model="default", messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=24,
              temperature=1.2, top_p=1.0, seed=4242)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    check(a == b, f"same seed, same answer: {a!r} vs {b!r}")
    r = client.chat.completions.create(model="default", messages=msgs, max_tokens=8, frequency_penalty=1.5,
                                       presence_penalty=-0.5, logit_bias={"2": -100})
    check(r.choices[0].message.content is not None, "penalties and logit_bias accepted")

    # ---- structured output ----
    # Every answer is a complete document that validates against its schema
    # with jsonschema, an independent validator, as well as with the test's
    # own: one that ended by itself ("stop"), or one the grammar closed in
    # time to fit max_tokens ("length": the budget shaped it).
    def structured(fmt, schema, prompt, max_tokens=1500, **kw):
        r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": prompt}],
                                           response_format=fmt, max_tokens=max_tokens, **kw)
        txt = r.choices[0].message.content
        fin = r.choices[0].finish_reason
        check(fin in ("stop", "length"), f"finish_reason {fin} ({kw})")
        check(r.usage.completion_tokens <= max_tokens, f"{r.usage.completion_tokens} tokens of {max_tokens}")
        try:
            doc = json.loads(txt)
        except ValueError as e:
            check(False, f"json.loads of an answer ended by {fin} ({kw}, max_tokens {max_tokens}): {e}: {txt[:300]!r}")
            return None
        check(isinstance(doc, dict), f"a JSON object: {txt!r}")
        if schema is not None:
            check(valid(doc, schema), f"validates (own validator): {txt!r}")
            try:
                jsonschema.validate(doc, schema)
                check(True, "")
            except jsonschema.ValidationError as e:
                check(False, f"validates (jsonschema): {e.message}: {txt!r}")
        return fin

    settings = [dict(temperature=0), dict(temperature=0.9, seed=1), dict(temperature=0.7, top_p=0.9, seed=2),
                dict(temperature=1.0, seed=3, extra_body={"top_k": 5})]
    fins = [structured({"type": "json_object"}, None, "Describe a cat as a JSON object.", **kw) for kw in settings]
    check(None not in fins, f"json_object: every answer a valid document ({fins})")
    # A budget far below the answers the model writes: each is still a
    # document, closed within 10 tokens, and at least one says "length".
    fins = [structured({"type": "json_object"}, None, "Describe a cat as a JSON object.", max_tokens=10, **kw)
            for kw in settings]
    check(None not in fins and "length" in fins, f"json_object in 10 tokens: closed in time ({fins})")
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    fins = [structured(fmt, PERSON, "Invent a person. Answer in JSON.", **kw) for kw in settings]
    check(None not in fins, f"json_schema: every answer a valid document ({fins})")
    streamed = "".join(ch.choices[0].delta.content or "" for ch in client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Invent a person."}], response_format=fmt,
        max_tokens=1500, temperature=0, stream=True) if ch.choices)
    try:
        doc = json.loads(streamed)
        check(valid(doc, PERSON), f"streamed json_schema answer validates: {streamed!r}")
        jsonschema.validate(doc, PERSON)
    except (ValueError, jsonschema.ValidationError) as e:
        check(False, f"streamed json_schema answer: {e}: {streamed[:200]!r}")

    # ---- refused fields: 400 naming them ----
    def refused(field, call):
        try:
            call()
        except openai.BadRequestError as e:
            check(e.status_code == 400 and field in str(e), f"400 names {field}: {e}")
            return
        check(False, f"{field} should be refused with 400")

    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    refused("tools", lambda: client.chat.completions.create(model="default", messages=msgs, tools=tools))
    refused("n", lambda: client.chat.completions.create(model="default", messages=msgs, n=2))
    refused("echo", lambda: client.completions.create(model="default", prompt="x", echo=True))
    refused("pattern", lambda: client.chat.completions.create(
        model="default", messages=msgs, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "string", "pattern": "^a"}}}))
    refused("image_url", lambda: client.chat.completions.create(model="default", messages=[
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]))
    refused("top_logprobs", lambda: client.chat.completions.create(model="default", messages=msgs, logprobs=True,
                                                                   top_logprobs=21))
    refused("frequency_penalty", lambda: client.chat.completions.create(model="default", messages=msgs,
                                                                        frequency_penalty=2.5))


if __name__ == "__main__":
    main()
    print(f"{NAME}: {T.passes} passed, {T.failures} failed")
    sys.exit(1 if T.failures else 0)

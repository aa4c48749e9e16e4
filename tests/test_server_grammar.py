"""Constrained sampling in seqkv serve (issue 48): GBNF "grammar", "json_schema" and
"response_format" (json_object, json_schema) on /completion, /v1/completions and
/v1/chat/completions, on the model llama.cpp's server tests use (stories260K).

- output_matches_grammar: a GBNF grammar's output is a sentence of it (checked with Python's
  re against the same language), streamed or not, and the same seed gives the same text.
- schema_output_is_valid_json: json_schema and both response_format spellings give JSON
  that the schema accepts (python3-jsonschema when installed, else by hand).
- refusals_are_400s: a broken grammar, an unknown response_format type, an unsupported
  schema keyword, both grammar and json_schema, grammars past the bounds (nesting, size):
  400 naming the problem.
- costly_grammars_end_with_400: grammars too costly to follow (exponential at the start;
  stacks that multiply with each character) end the request with a 400 that says so, on
  /completion and the chat route, streamed (an error event after the tokens) or not; an
  everyday grammar on the same server still works after them.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import testenv  # noqa: E402
from clitest import Reporter, check  # noqa: E402
from harness import Server, sse  # noqa: E402

MODEL = testenv.shared_path("models", "stories260K", "stories260K.gguf")


def serve(tmp):
    return Server("-m", MODEL, "--seed", "42", "--temp", "0.8", "-np", "2", "-c", "1024",
                  log=os.path.join(tmp, "serve.log"))


def stream_text(s, path, body):
    """The text of a streamed /completion."""
    code, text = s.curl(path, dict(body, stream=True))
    out = []
    for d in sse(text):
        if d != "[DONE]":
            out.append(json.loads(d).get("content", ""))
    return "".join(out)


def output_matches_grammar(tmp):
    s = serve(tmp)
    try:
        grammar = 'root ::= "Once " word (" " word){2,5} "."\nword ::= [a-z]+'
        lang = re.compile(r"Once [a-z]+( [a-z]+){2,5}\.")
        body = {"prompt": "Tell me a story.", "n_predict": 48, "grammar": grammar, "seed": 7}
        code, a = s.json("/completion", body)
        check(code == 200, "grammar: %d %s" % (code, a))
        check(lang.fullmatch(a["content"]) is not None, "not a sentence of the grammar: %r" % a["content"])
        check(a["stop_type"] == "eos" or a.get("stopped_eos"), "ends where the grammar does: %s" % a)
        b = s.json("/completion", body)[1]
        check(a["content"] == b["content"], "same seed, same text: %r %r" % (a["content"], b["content"]))
        check(stream_text(s, "/completion", body) == a["content"], "streamed: the same text")
        c = s.json("/completion", dict(body, seed=8))[1]
        check(lang.fullmatch(c["content"]) is not None, "seed 8: %r" % c["content"])
        code, r = s.json("/v1/completions", {"prompt": "Hi", "max_tokens": 8, "grammar": 'root ::= "a"{5,5}'})
        check(code == 200 and r["choices"][0]["text"] == "aaaaa", "/v1/completions: %s" % r)
        code, r = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10,
                                                  "grammar": 'root ::= ("yes" | "no") "!"'})
        check(code == 200 and r["choices"][0]["message"]["content"] in ("yes!", "no!"), "chat: %s" % r)
    finally:
        s.stop()


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
          "required": ["name", "age"], "additionalProperties": False}


def valid(doc):
    try:
        import jsonschema
        jsonschema.validate(doc, SCHEMA)
        return True
    except ImportError:
        return (isinstance(doc, dict) and isinstance(doc.get("name"), str) and len(doc["name"]) <= 8 and
                isinstance(doc.get("age"), int) and 0 <= doc["age"] <= 120 and set(doc) <= {"name", "age", "tags"})
    except Exception:
        return False


def schema_output_is_valid_json(tmp):
    s = serve(tmp)
    try:
        msgs = [{"role": "user", "content": "Describe a person as JSON"}]
        forms = [{"json_schema": SCHEMA},
                 {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
                 {"response_format": {"type": "json_schema", "schema": SCHEMA}},
                 {"response_format": {"type": "json_object", "schema": SCHEMA}}]
        for form in forms:
            code, r = s.json("/v1/chat/completions", dict({"messages": msgs, "max_tokens": 200, "seed": 3}, **form))
            check(code == 200, "%s: %d %s" % (form, code, r))
            text = r["choices"][0]["message"]["content"]
            check(r["choices"][0]["finish_reason"] == "stop", "finished by the grammar: %s" % r)
            check(valid(json.loads(text)), "%s: %r is not valid" % (list(form), text))
        code, r = s.json("/completion", {"prompt": "{", "n_predict": 64, "response_format": {"type": "json_object"}})
        check(code == 200 and r["content"].startswith("{"), "json_object: %s" % r)
    finally:
        s.stop()


def refusals_are_400s(tmp):
    s = serve(tmp)
    try:
        bad = [({"grammar": "root ::= this is (not valid GBNF"}, "unclosed '('"),
               ({"grammar": "root ::= root \"a\""}, "left recursion"),
               ({"grammar": 'root ::= "a"', "json_schema": {"type": "string"}}, "both json_schema and grammar"),
               ({"response_format": {"type": "sound"}}, "response_format type"),
               ({"json_schema": {"type": "hiccup"}}, "unrecognized \"type\""),
               ({"json_schema": {"type": "array", "uniqueItems": True}}, "uniqueItems"),
               ({"json_schema": {"type": "string", "format": "email"}}, "format"),
               ({"response_format": {"type": "json_object", "schema": 123}}, "must be an object"),
               ({"grammar": 5}, "must be a string"),
               ({"grammar": "root ::= " + "(" * 300 + '"a"' + ")" * 300}, "nested deeper"),
               ({"grammar": "root ::=" + ' [a]{10000}' * 40}, "too large"),
               ({"json_schema": {"type": "string", "pattern": "^[z-a]$"}}, "upside down")]
        for extra, what in bad:
            code, r = s.json("/completion", dict({"prompt": "hi", "n_predict": 2}, **extra))
            msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
            check(code == 400 and what in msg, "%s: %d %s" % (extra, code, r))
        code, r = s.json("/completion", {"prompt": "hi", "n_predict": 2, "grammar": "",
                                         "response_format": {"type": "text"}})
        check(code == 200, "neutral values pass: %d %s" % (code, r))
    finally:
        s.stop()


COSTLY = ['root ::= (a | b | c)*\na ::= (. | . .)+ root?\nb ::= (. . | .)+ "x"?\nc ::= .* .\n',
          'root ::= ' + 'a ' * 24 + '"x"\na ::= "" | "" | b\nb ::= ""']


def costly_grammars_end_with_400(tmp):
    s = serve(tmp)
    try:
        for g in COSTLY:
            code, r = s.json("/completion", {"prompt": "Once upon", "n_predict": 40, "grammar": g})
            msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
            check(code == 400 and "too costly" in msg, "/completion: %d %s" % (code, r))
            code, r = s.json("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                      "max_tokens": 40, "grammar": g})
            msg = r.get("error", {}).get("message", "") if isinstance(r, dict) else ""
            check(code == 400 and "too costly" in msg, "chat: %d %s" % (code, r))
        code, text = s.curl("/completion", {"prompt": "Once upon", "n_predict": 40, "grammar": COSTLY[0],
                                            "stream": True})
        events = [json.loads(d) for d in sse(text) if d != "[DONE]"]
        got = "".join(e.get("content", "") for e in events)
        last = events[-1] if events else {}
        check(got and "too costly" in last.get("error", {}).get("message", ""),
              "streamed: tokens then an error event: %r" % events[-3:])
        code, r = s.json("/completion", {"prompt": "Once upon", "n_predict": 8, "grammar": 'root ::= [a-z ]+'})
        check(code == 200 and re.fullmatch(r"[a-z ]+", r.get("content", "")), "after them: %d %s" % (code, r))
    finally:
        s.stop()


def main():
    rep = Reporter("test_server_grammar")
    cases = [output_matches_grammar, schema_output_is_valid_json, refusals_are_400s, costly_grammars_end_with_400]
    if not os.path.isfile(MODEL):
        for c in cases:
            rep.report(c.__name__, testenv.missing("SKIP", "FAIL"), "stories260K not found (../shared)")
        return 1 if rep.failed else 0
    return testenv.run_cases(rep, cases, "skv-grammar-")


if __name__ == "__main__":
    sys.exit(main())

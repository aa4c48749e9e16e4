"""Not the openai package: it has no Debian package, and llama.cpp's server test modules
import it at the top, so without something of that name none of their other tests could
run. Constructing a client skips the test that wanted it (tests/test_llama_server_suite.py
puts this folder on PYTHONPATH only when the real package is absent)."""
import pytest


class OpenAI:
    def __init__(self, *args, **kwargs):
        pytest.skip("the openai Python client is not installed (no Debian package); "
                    "tests/server/openai_test.mjs covers that client's path")

# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/k25_api.py, as ansible-test units runs a collection's own unit tests: the shared argument
spec, and what the module sees of an answer cut off mid-body (the daemon killed)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
from ansible.module_utils.urls import url_argument_spec
from ansible_collections.k25.ctl.plugins.module_utils import k25_api


class _Module:
    """What K25Api reads of an AnsibleModule: its params (fetch_url reads them too)."""

    def __init__(self, url):
        self.params = {k: v.get("default") for k, v in k25_api.k25_argument_spec().items()}
        self.params["url"] = url
        self.tmpdir = None

    def fail_json(self, **kw):
        raise AssertionError(kw)


def test_the_spec_is_ansibles_url_spec_with_the_daemons_defaults():
    spec = k25_api.k25_argument_spec()
    assert set(url_argument_spec()) <= set(spec)
    assert spec["url"]["default"] == k25_api.DEFAULT_URL
    assert spec["token"]["no_log"] is True


def test_params_and_names_are_sent_as_the_api_reads_them():
    assert k25_api._param(True) == "true"
    assert k25_api.profile_path("a b/c") == "/profiles/a%20b%2Fc"
    assert k25_api._decode(b'{"detail": "x"}') == {"detail": "x"}
    assert k25_api._decode(b"<html>") == {"detail": "<html>"}


@pytest.fixture
def cut_off():
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b'{"outcome": "runn')
            self.close_connection = True

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answer_cut_off_mid_body_is_an_error_in_words(cut_off):
    api = k25_api.K25Api(_Module(cut_off))
    with pytest.raises(k25_api.K25Error) as found:
        api.get("/runs/1")
    assert found.value.status == 0
    assert found.value.closed is True
    assert "the connection closed before the answer was complete" in found.value.detail
    assert json.dumps(found.value.detail)  # words, not an exception object

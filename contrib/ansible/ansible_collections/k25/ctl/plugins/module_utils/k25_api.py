# Copyright: (c) 2026, k25-ctl developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The k25-ctl API as the modules call it, on the managed host itself: the daemon listens on loopback and
its write token is a file only root reads there (/etc/k25-ctl/token). One argument spec for every module,
one request function over Ansible's fetch_url, and one place where the API's errors become failures."""

from __future__ import annotations

import json
import time
from http.client import HTTPException
from urllib.parse import quote, urlencode

from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import fetch_url, url_argument_spec

DEFAULT_URL = "http://127.0.0.1:8025"
DEFAULT_TOKEN_FILE = "/etc/k25-ctl/token"


def k25_argument_spec():
    """The options every k25.ctl module takes (set them once with module_defaults: group/k25.ctl.k25):
    Ansible's own URL options (url_argument_spec: proxies, client certificates, validate_certs, ...) that
    fetch_url reads, with the daemon's URL as the default, and ours."""
    spec = url_argument_spec()
    spec.update(
        url=dict(type="str", default=DEFAULT_URL),
        token_file=dict(type="path", default=DEFAULT_TOKEN_FILE),
        token=dict(type="str", no_log=True),
        timeout=dict(type="int", default=30),
        ca_path=dict(type="path"),
        reconnect_timeout=dict(type="int", default=120),
    )
    return spec


class K25Error(Exception):
    """The API answered with an error (or not at all): `status` (0: no answer) and its `detail`."""

    def __init__(self, status, detail, closed=False):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.closed = closed  # the daemon went away mid-answer (not a timeout)


class K25Api:
    def __init__(self, module):
        self.module = module
        self.url = module.params["url"].rstrip("/")
        self._token = module.params.get("token")
        self.lost = False  # the daemon stopped answering during a wait (and came back)

    def token(self):
        """The write token: given, or read from token_file on the managed host."""
        if self._token:
            return self._token
        path = self.module.params["token_file"]
        try:
            with open(path) as f:
                self._token = f.read().strip()
        except OSError as e:
            self.module.fail_json(
                msg=f"cannot read the k25-ctl token from {path}: {to_native(e)} "
                "(run as root, or set token_file or token)"
            )
        return self._token

    def request(self, method, path, body=None, params=None, timeout=None, write=False):
        """(status, decoded JSON or None). Raises K25Error for 4xx/5xx and for no answer at all."""
        url = self.url + path
        if params:
            url += "?" + urlencode({k: _param(v) for k, v in params.items() if v is not None})
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        if write:
            headers["Authorization"] = "Bearer " + self.token()
        resp, info = fetch_url(
            self.module,
            url,
            data=data,
            headers=headers,
            method=method,
            timeout=timeout or self.module.params["timeout"],
            ca_path=self.module.params.get("ca_path"),
        )
        status = info.get("status", -1)
        # On an HTTP error fetch_url has read the answer already: its body is in info.
        try:
            raw = resp.read() if resp is not None and 200 <= status < 400 else info.get("body", b"")
        except TimeoutError:
            raise K25Error(0, "no complete answer in time") from None
        except (HTTPException, OSError) as e:  # the daemon went away mid-answer (IncompleteRead, reset)
            what = type(e).__name__
            raise K25Error(
                0, f"the connection closed before the answer was complete ({what})", True
            ) from None
        decoded = _decode(raw)
        if status < 200 or status >= 300:
            detail = decoded.get("detail") if isinstance(decoded, dict) else None
            raise K25Error(max(status, 0), to_native(detail or info.get("msg") or "no answer"))
        return status, decoded

    def get(self, path, params=None):
        return self.request("GET", path, params=params)[1]

    def post(self, path, body=None, params=None, timeout=None):
        return self.request("POST", path, body=body, params=params, timeout=timeout, write=True)

    def wait_run(self, run_id, timeout):
        """Until run `run_id` has ended: its event stream (SSE) is followed until it closes, which it does
        after the run's final event; a stream that breaks off or stays silent for 30 s is opened again (no
        sooner than a second after the last). A daemon that stops answering (killed, restarted by systemd)
        is asked again every second for up to `reconnect_timeout` seconds, and `lost` says it happened.
        The ended run, or K25Error after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        gone = None  # when the daemon stopped answering
        while True:
            opened = time.monotonic()
            try:
                run = self.get(f"/runs/{run_id}")
            except K25Error as e:
                if e.status != 0:
                    raise
                gone = gone or opened
                waited = time.monotonic() - gone
                if waited > self.module.params["reconnect_timeout"] or time.monotonic() > deadline:
                    raise K25Error(
                        0,
                        f"the daemon stopped answering during run {run_id} and was not back within "
                        f"{waited:.0f}s ({e.detail})",
                    ) from None
                self.lost = True
                time.sleep(max(0.0, opened + 1.0 - time.monotonic()))
                continue
            gone = None
            if run["outcome"] != "running":
                return run
            left = deadline - time.monotonic()
            if left <= 0:
                raise K25Error(0, f"run {run_id} has not ended within {timeout}s")
            try:
                self.request("GET", f"/runs/{run_id}/events", timeout=max(1, int(min(left, 30))))
            except K25Error as e:
                self.lost = self.lost or e.closed
                time.sleep(max(0.0, opened + 1.0 - time.monotonic()))

    def fail(self, error, **result):
        """A K25Error as the task's failure, with the API's own words."""
        where = f"k25-ctl at {self.url}"
        if error.status == 0 or error.status == -1:
            msg = f"{where} did not answer: {error.detail}"
        else:
            msg = f"{where} answered {error.status}: {error.detail}"
        self.module.fail_json(msg=msg, status=error.status, **result)


def profile_path(name):
    return "/profiles/{}".format(quote(name, safe=""))


def _param(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _decode(raw):
    if not raw:
        return None
    try:
        return json.loads(to_native(raw))
    except ValueError:
        return {"detail": to_native(raw)[:500]}

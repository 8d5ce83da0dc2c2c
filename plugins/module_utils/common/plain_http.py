# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""HTTP with ``ansible.module_utils.urls.open_url``'s calling convention, on the standard library only: the Ray
dashboard client runs on nodes as a plain script (plugin_utils/node_script.py) and in the idle guard's service,
where Ansible's module runtime is not loaded."""

from __future__ import annotations

import ssl
import urllib.request
from typing import Any


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # urllib then raises HTTPError with the 3xx status


def open_url(
    url: str,
    data: str | bytes | None = None,
    headers: dict[str, str] | None = None,
    method: str = "GET",
    timeout: float = 30,
    validate_certs: bool = True,
    follow_redirects: str | bool = "urllib2",
    **dummy: Any,
) -> Any:
    """One request; a non-2xx answer raises urllib's HTTPError, a transport failure URLError or OSError.
    ``follow_redirects="none"`` answers a redirect with HTTPError instead of following it."""
    handlers: list[urllib.request.BaseHandler] = []
    if not validate_certs:
        handlers.append(urllib.request.HTTPSHandler(context=ssl._create_unverified_context()))  # pylint: disable=protected-access
    if follow_redirects in ("none", "no", False):
        handlers.append(_NoRedirect())
    if isinstance(data, str):
        data = data.encode("utf-8")
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    return urllib.request.build_opener(*handlers).open(request, timeout=timeout)

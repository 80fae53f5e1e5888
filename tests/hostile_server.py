"""A small hostile OpenAI-compatible server on 127.0.0.1 for the transport and secrets tests.

Each request's first path segment names a case (``/v1-429inf/chat/completions`` -> ``429inf``);
the server answers with that case's status, headers and body, and records every request's
headers and body (so tests count what reached it: keys, Basic auth, requests).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, dict[str, str], bytes]


def chat(text: str = "ANSWER: 3", tool_calls: list[dict[str, Any]] | None = None) -> bytes:
    """A well-formed chat-completion body."""
    msg: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls is not None:
        msg["tool_calls"] = tool_calls
    return json.dumps({"id": "c", "object": "chat.completion", "model": "m",
                       "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if tool_calls else "stop"}],
                       "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}).encode()


class HostileServer:
    """``cases``: name -> (status, headers, body) or a callable returning one; unknown names
    answer ``ok`` (a normal reply)."""

    def __init__(self, cases: dict[str, Answer | Callable[[], Answer]]) -> None:
        self.cases = dict(cases)
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                case = self.path.strip("/").split("/")[0].split("-", 1)[-1]
                with outer._lock:
                    outer.requests.append((self.path, dict(self.headers.items()), body))
                answer = outer.cases.get(case, (200, {}, chat()))
                status, headers, payload = answer() if callable(answer) else answer
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # clients that hang up on an oversized body are part of the tests

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, case: str = "ok") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1-{case}"

    @property
    def request_count(self) -> int:
        with self._lock:
            return len(self.requests)

    def received(self) -> str:
        """Every header and body the server received, as one text (for counting markers)."""
        with self._lock:
            return "\n".join(f"{p}\n{json.dumps(h)}\n{b.decode('utf-8', 'replace')}" for p, h, b in self.requests)

    def __enter__(self) -> HostileServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

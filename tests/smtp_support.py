"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps the messages it receives."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from tests.pg_cluster import free_port


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: EmailMessage


@dataclass
class SmtpServer:
    port: int
    messages: list[Received] = field(default_factory=list)

    def settings(self) -> dict[str, object]:
        """The app's SMTP settings that send to this server."""
        return {
            "SCHEDULER_SMTP_HOST": "127.0.0.1",
            "SCHEDULER_SMTP_PORT": self.port,
            "SCHEDULER_SMTP_SECURITY": "none",
            "SCHEDULER_SMTP_FROM": "scheduler@example.test",
        }


class Collector:
    """aiosmtpd's handler: each message as the standard library parses it."""

    def __init__(self, server: SmtpServer) -> None:
        self.server = server

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:
        parsed = message_from_bytes(
            envelope.original_content or envelope.content, policy=policy.default
        )
        assert isinstance(parsed, EmailMessage)
        self.server.messages.append(Received(envelope.mail_from, list(envelope.rcpt_tos), parsed))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    server = SmtpServer(port=free_port())
    controller = Controller(Collector(server), hostname="127.0.0.1", port=server.port)
    controller.start()
    try:
        yield server
    finally:
        controller.stop()

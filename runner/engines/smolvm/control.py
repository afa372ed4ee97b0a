"""The parent's reader of a smolvm child's control pipe (protocol): what the supervisor knows of
a VM's start, exit and failure comes from here, never from guest output."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from runner.engines.smolvm.protocol import READY_TIMINGS, Error, Event, Exit, Facts, Ready, decode
from runner.spec import RunnerError

CONTROL_KEPT_BYTES = 65536
ERROR_MESSAGE_CHARS = 2000
VM_STARTS = ("cold", "branch")


@dataclass
class ControlChannel:
    """Reads the child's control pipe: one event a line (protocol), known events and typed
    fields only. Anything else is dropped. Guest output never reaches this pipe."""

    buffer: bytes = b""
    ready: bool = False
    boot_s: float | None = None
    vm_start: str | None = None
    vm_note: str = ""  # why the VM booted cold
    timings: dict[str, float] = field(default_factory=dict)  # a start's phases (READY_TIMINGS)
    exit_code: int | None = None
    error: Error | None = None  # the first one: what went wrong first is the cause
    facts: Facts = field(default_factory=Facts)

    def feed(self, data: bytes) -> None:
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        self.buffer = self.buffer[-CONTROL_KEPT_BYTES:]
        for line in lines:
            event = decode(line)
            if event is not None:
                self.facts = self.facts.updated(event.facts)
                self._apply(event)

    def _apply(self, event: Event) -> None:
        if isinstance(event, Ready):
            self.ready = True
            if event.boot_s is not None:
                self.boot_s = event.boot_s
            if event.vm_start in VM_STARTS:
                self.vm_start = event.vm_start
            self.vm_note = (event.vm_note or "")[:ERROR_MESSAGE_CHARS]
            self.timings = {k: v for k in READY_TIMINGS if (v := getattr(event, k)) is not None}
        elif isinstance(event, Exit) and event.exit_code is not None:
            self.exit_code = event.exit_code
        elif isinstance(event, Error) and self.error is None:
            self.error = dataclasses.replace(event, message=event.message[:ERROR_MESSAGE_CHARS])

    def failure(self) -> RunnerError | None:
        if self.error is None:
            return None
        return RunnerError(self.error.code, self.error.message, retryable=self.error.retryable)

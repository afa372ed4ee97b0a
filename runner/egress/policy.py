"""A run's egress policy: the destinations it may reach, as `host:port` or `*.suffix:port` rules
(names, never addresses), checked against the operator's site ceiling and a course's.

The web checks a run's rules with `policy_problem` before it stores the run; the supervisor checks
them again; the proxy (runner.egress.proxy) enforces them. Nothing here touches the network.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from runner.env import ConfigError, env_str

HOST_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")


class PolicyError(ValueError):
    """A rule that is not `host:port` or `*.suffix:port` with a valid name and port."""


@dataclass(frozen=True)
class Rule:
    host: str  # a name, or `*.suffix` for every name below suffix (not the suffix itself)
    port: int

    @classmethod
    def parse(cls, text: str) -> Rule:
        host, sep, port = text.strip().lower().rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise PolicyError(f"{text!r}: a destination is host:port with a port from 1 to 65535")
        name = host.removeprefix("*.")
        labels = name.split(".")
        if len(name) > 253 or len(labels) < 2 or not all(HOST_LABEL.fullmatch(label) for label in labels):
            raise PolicyError(f"{text!r}: {host!r} is not a host name (or *.name) with a dot in it")
        if _is_address(name):
            raise PolicyError(f"{text!r}: destinations are names, never addresses")
        return cls(host, int(port))

    def matches(self, host: str, port: int) -> bool:
        if port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    def within(self, other: Rule) -> bool:
        """Whether every destination this rule allows, `other` allows too."""
        if self.port != other.port:
            return False
        if other.host.startswith("*."):
            return self.host.removeprefix("*").endswith(other.host[1:])
        return self.host == other.host

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...] = ()

    @classmethod
    def parse(cls, items: Iterable[str]) -> Policy:
        return cls(tuple(dict.fromkeys(Rule.parse(item) for item in items)))

    def allows(self, host: str, port: int) -> bool:
        return any(rule.matches(host, port) for rule in self.rules)

    def outside(self, ceiling: Policy) -> list[Rule]:
        """The rules of this policy that the ceiling does not allow (none: it is within it)."""
        return [rule for rule in self.rules if not any(rule.within(top) for top in ceiling.rules)]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def to_json(self) -> list[str]:
        return [str(rule) for rule in self.rules]


CEILING_ENV = "CORDON_EGRESS_CEILING"


def ceiling_from_env(environ: Any = None) -> Policy:
    """The operator's site-wide ceiling, CORDON_EGRESS_CEILING: rules separated by commas or
    spaces. Unset or empty (the default): no run may reach anything."""
    text = env_str(CEILING_ENV, "", environ=environ)
    try:
        return Policy.parse(item for item in re.split(r"[,\s]+", text) if item)
    except PolicyError as exc:
        raise ConfigError(f"{CEILING_ENV}: {exc}") from None


def policy_problem(rules: Sequence[str], ceilings: Sequence[tuple[str, Policy]]) -> tuple[str, str] | None:
    """(code, message) when a run's rules are not a policy or pass one of its ceilings (each named,
    e.g. ("this service's", site) then ("this course's", course)), else None. The supervisor's
    check, and the web's before it stores a run."""
    if isinstance(rules, str) or not all(isinstance(rule, str) for rule in rules):
        return "egress_invalid", 'egress must be a list of destinations such as "api.example.org:443"'
    try:
        policy = Policy.parse(rules)
    except PolicyError as exc:
        return "egress_invalid", f"egress: {exc}"
    for whose, ceiling in ceilings:
        outside = policy.outside(ceiling)
        if outside:
            allowed = ", ".join(ceiling.to_json()) or "nothing"
            named = ", ".join(str(rule) for rule in outside)
            return "egress_outside_ceiling", f"egress to {named} is outside {whose} ceiling (it allows {allowed})"
    return None


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True
